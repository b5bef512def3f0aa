"""``python -m agentsearch.engines.openrlhf.entry --agentsearch-config FILE <train_ppo_ray args>``

OpenRLHF's own ``train_ppo_ray`` (run as ``__main__``, its parser and checks untouched) with
agentsearch's classes in place, chosen by the settings file ``launch.py`` writes:

- replay on: ``PPOTrainer`` -> ``hdr.HDRPPOTrainerActor`` (scan, ``batch - k`` fresh prompts,
  replayed rows, ``replay/*`` logs, buffer checkpoints);
- LoRA on: ``PolicyModelActor`` -> ``lora_sync.LoraSyncPolicyModelActor`` (merged weights to
  vLLM under the base names; OpenRLHF 0.11's own LoRA sync fails, its issue #1349).

``train_ppo_ray.train`` imports ``PPOTrainer`` when called and reads ``PolicyModelActor`` from
its module globals, so replacing the attributes before the module runs is enough. The
settings reach the (remote) trainer as ``strategy.args.agentsearch``: ``get_strategy`` is
wrapped to attach them to the parsed arguments.
"""

from __future__ import annotations

import json
import runpy
import sys
from types import SimpleNamespace

from agentsearch.engines.openrlhf.compat import check_version, import_openrlhf

__all__ = ["install", "main"]


def install(settings: dict) -> None:
    """Swap agentsearch's classes into OpenRLHF per ``settings`` (see the module doc)."""
    import_openrlhf()
    import openrlhf.trainer.ppo_trainer as ppo_trainer
    import openrlhf.trainer.ray.ppo_actor as ppo_actor
    import openrlhf.utils as utils

    real_get_strategy = utils.get_strategy

    def get_strategy(args):
        if getattr(args.train, "async_enable", False) and settings.get("replay"):
            raise SystemExit("agentsearch replay runs on OpenRLHF's synchronous trainer; drop "
                             "--train.async_enable or set train.replay.kind=none")
        args.agentsearch = SimpleNamespace(**settings)
        return real_get_strategy(args)

    utils.get_strategy = get_strategy
    if settings.get("replay"):
        from agentsearch.engines.openrlhf.hdr import HDRPPOTrainerActor

        ppo_trainer.PPOTrainer = HDRPPOTrainerActor
    if settings.get("lora"):
        from agentsearch.engines.openrlhf.lora_sync import LoraSyncPolicyModelActor

        ppo_actor.PolicyModelActor = LoraSyncPolicyModelActor


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--agentsearch-config" not in argv:
        raise SystemExit("usage: python -m agentsearch.engines.openrlhf.entry --agentsearch-config FILE "
                         "<train_ppo_ray arguments> (`agentsearch openrlhf launch` writes both)")
    i = argv.index("--agentsearch-config")
    with open(argv[i + 1]) as f:
        settings = json.load(f)
    del argv[i:i + 2]
    check_version()
    install(settings)
    sys.argv = ["train_ppo_ray", *argv]
    runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__")


if __name__ == "__main__":
    main()
