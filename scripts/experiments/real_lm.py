"""Issue 50's runs: SmolLM2-135M + LoRA learning WikiSearch-v0 (docs/results/real_lm.md),
resumable across sessions.

    python scripts/experiments/real_lm.py run --seeds 0 1 --name v2   # runs/real_lm/v2-seed<k>
    python scripts/experiments/real_lm.py finals runs/real_lm/v2-seed0
    python scripts/experiments/real_lm.py keep runs/real_lm/v2-seed0 rl-v2-seed0

``run``: ``agentsearch train --preset PRESET seed=K`` for each seed, one run at a time with both
cores, into ``OUT/<name>-seed<K>``. A run cut short (a session's end kills it) resumes from its
last checkpoint on the next call; a finished one is skipped; ``touch OUT/HOLD`` and no new run
starts. The runs' 2 h budget is training time (``time_budget_s``): anything else on the machine
slows the run and costs it steps, so nothing else should run beside it.

``finals``: the run's warm-started policy (``RUN/warm_start``) and its final one (``RUN/adapter``),
greedy, on questions the warm start never saw: the people-written slice (69 FanOutQA
sub-questions whose evidence page is among the summaries) and a synthetic world never used
(``agentsearch/Search-v0``, world seed 500, 300 dev questions: single, bridge, comparison), in
``RUN/final_evals.json`` (a policy-set pair already there is skipped), their decoded episodes
in ``RUN/finals/POLICY-SET.txt`` (every people question; 4 per type of the world).

``keep``: the run's record into ``docs/results/real_lm/NAME``: config, metrics, provenance, the
first and last eval's decoded episodes, episodes.jsonl, both adapters, final_evals.json and
the finals' decoded episodes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agentsearch.recipes.runner import agentsearch_eval, train_run  # noqa: E402

SETS = {  # name -> eval arguments (split, limit, decoded episodes per type), overrides
    "people": (["--split", "people", "--limit", "0", "--samples-per-type", "69"], []),
    "world500": (["--split", "dev", "--limit", "300", "--samples-per-type", "4"],
                 ["env=agentsearch/Search-v0", "env_kwargs.world_seed=500"]),
}
POLICIES = ("warm_start", "adapter")


def run(a) -> None:
    for seed in a.seeds:
        if (a.out / "HOLD").exists():
            print(f"[real_lm] {a.out}/HOLD: no new run starts", flush=True)
            return
        folder = a.out / f"{a.name}-seed{seed}"
        print(f"[real_lm] {folder}", flush=True)
        trained = train_run(folder, a.preset, [f"seed={seed}", *a.overrides], threads=2)
        print(f"[real_lm] {folder}: {'trained' if trained else 'already finished'}", flush=True)


def finals(a) -> None:
    out = a.run / "final_evals.json"
    done = json.loads(out.read_text()) if out.exists() else {}
    for policy in POLICIES:
        if not (a.run / policy).exists():
            print(f"[real_lm] {a.run}/{policy} is missing: skipped", flush=True)
            continue
        for name, (args, overrides) in SETS.items():
            key = f"{policy}/{name}"
            if key in done:
                continue
            samples = a.run / "finals" / f"{policy}-{name}.txt"
            done[key] = agentsearch_eval("--preset", str(a.run / "config.yaml"), *args,
                                         "--samples", str(samples),
                                         f"init_from={a.run / policy}", *overrides, "threads=2",
                                         threads=2, log=a.run / "finals.log")
            out.write_text(json.dumps(done, indent=1) + "\n")
            print(f"[real_lm] {key}: {done[key]['eval/mean_at_n']:.3f}", flush=True)


def keep(a) -> None:
    dest = ROOT / "docs" / "results" / "real_lm" / a.name
    (dest / "samples").mkdir(parents=True, exist_ok=True)
    for f in ("config.yaml", "metrics.jsonl", "provenance.json", "episodes.jsonl",
              "final_evals.json"):
        if (a.run / f).exists():
            shutil.copy2(a.run / f, dest / f)
    samples = sorted((a.run / "samples").glob("step-*.txt"),
                     key=lambda p: int(p.stem.split("-")[1]))
    for p in samples[:1] + samples[-1:]:
        shutil.copy2(p, dest / "samples" / p.name)
    for folder in (*POLICIES, "finals"):
        if (a.run / folder).exists():
            shutil.copytree(a.run / folder, dest / folder, dirs_exist_ok=True)
    print(dest)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    r.add_argument("--name", default="v2")
    r.add_argument("--preset", default="smollm2-search")
    r.add_argument("--out", type=Path, default=ROOT / "runs" / "real_lm")
    r.add_argument("overrides", nargs="*", help="key=value, on top of the preset")
    f = sub.add_parser("finals")
    f.add_argument("run", type=Path)
    k = sub.add_parser("keep")
    k.add_argument("run", type=Path)
    k.add_argument("name")
    a = ap.parse_args()
    {"run": run, "finals": finals, "keep": keep}[a.cmd](a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
