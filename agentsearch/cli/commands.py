"""The handlers of the ``agentsearch`` subcommands: each takes the parsed arguments and
returns the exit code. Every handler imports its heavy modules lazily, so ``--help`` is
instant."""

from __future__ import annotations


def cmd_world(a) -> int:
    from agentsearch.data import WorldConfig, generate_world, write_world

    cfg = (WorldConfig(seed=a.seed) if a.entities is None
           else WorldConfig(seed=a.seed, entities=a.entities))
    if a.questions == "keychain":
        from agentsearch.data.keychain_world import write_keychain_world

        paths = write_keychain_world(a.out, seed=a.seed)
    elif a.questions == "chains":
        from agentsearch.data.chains import write_chain_world

        paths = write_chain_world(cfg, a.out)
    else:
        paths = write_world(generate_world(cfg), a.out)
    for name, p in paths.items():
        print(f"{name:7s} {p}")
    return 0


def cmd_wiki_corpus(a) -> int:
    from agentsearch.data import wiki_corpus

    rows = wiki_corpus(a.out)
    print(f"wrote {len(rows)} Wikipedia summaries to {a.out}")
    return 0


def cmd_demo(a) -> int:
    from agentsearch.recipes.demo import run_demo

    return run_demo(out=a.out, overrides=a.overrides, preset=a.preset)


def cmd_train(a) -> int:
    return train_main(preset=a.preset, out=a.out, overrides=a.overrides, resume=a.resume)


def train_main(preset: str, out: str | None, overrides: list[str],
               resume: str | None = None) -> int:
    """``agentsearch train``: preset + overrides, or ``--resume RUN_DIR``."""
    import json
    import logging
    import math
    from pathlib import Path

    from agentsearch.core.config import ConfigError, apply_overrides
    from agentsearch.core.provenance import tree_state
    from agentsearch.trainer.loop import train
    from agentsearch.trainer.train_config import TrainConfig

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per retrieval request
    if resume:
        run_dir = Path(resume)
        if not (run_dir / "config.yaml").exists():
            raise ConfigError(f"--resume {resume}: no config.yaml there (is it a run folder?)")
        cfg = apply_overrides(TrainConfig, str(run_dir / "config.yaml"), overrides)
    else:
        if not out:
            raise ConfigError("--out RUN_DIR is required (or --resume RUN_DIR)")
        run_dir = Path(out)
        cfg = apply_overrides(TrainConfig, preset, overrides)
    # resume ignores --preset
    source = f"resume={run_dir / 'config.yaml'}" if resume else f"preset={preset}"
    tree = tree_state()
    logging.getLogger("agentsearch.train").info(
        "agentsearch train: %s git=%s%s run=%s", source, tree["git"][:7],
        " (uncommitted changes)" if tree["dirty"] else "", run_dir)
    final = train(cfg, run_dir, resume=bool(resume))
    print(json.dumps({k: v for k, v in final.items() if not math.isnan(v)}, indent=1))
    return 0


def cmd_eval(a) -> int:
    from agentsearch.trainer.eval import main as eval_main

    return eval_main(a)


def cmd_diagnose(a) -> int:
    from agentsearch.recipes.diagnose import main as diagnose_main

    return diagnose_main(a)


def cmd_index(a) -> int:
    from agentsearch.retrievers.index import main as index_main

    return index_main(a)


def cmd_serve(a) -> int:
    from agentsearch.retrievers.server import main as serve_main

    return serve_main(a)


def cmd_serve_encoder(a) -> int:
    from agentsearch.retrievers.encoder_service import main as encoder_main

    return encoder_main(a)


def cmd_pareto(a) -> int:
    from agentsearch.analysis.pareto import main as pareto_main

    return pareto_main(a)


def cmd_report(a) -> int:
    from agentsearch.analysis.report import main as report_main

    return report_main(a)


def cmd_check_env(a) -> int:
    from agentsearch.rollout.checker import main as check_main

    return check_main(a)


def cmd_openrlhf(a) -> int:
    from agentsearch.core.config import ConfigError

    try:
        if a.openrlhf_command == "smoke":
            from agentsearch.engines.openrlhf.smoke import main as smoke_main

            return smoke_main(a)
        from agentsearch.engines.openrlhf.launch import launch, load_config

        return launch(load_config(a.preset, a.overrides), dry_run=a.dry_run)
    except ImportError as e:  # the openrlhf extra is missing, or another OpenRLHF version
        raise ConfigError(str(e)) from None
