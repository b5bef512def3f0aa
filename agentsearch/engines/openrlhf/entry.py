"""``python -m agentsearch.engines.openrlhf.entry --agentsearch-config FILE <train_ppo_ray args>``

OpenRLHF's own ``train_ppo_ray`` (run as ``__main__``, its parser and checks untouched) with
agentsearch's classes in place, chosen by the settings file ``launch.py`` writes:

- always: ``PPOTrainer`` -> ``ppo_trainer.AgentsearchPPOTrainerActor`` (replay when the
  settings have it, ``metrics.jsonl`` in our keys, replay checkpoints per step tag);
- LoRA on: ``PolicyModelActor`` -> ``lora_sync.LoraSyncPolicyModelActor`` (the adapter to
  vLLM; OpenRLHF 0.11's own LoRA sync fails, its issue #1349) and ``create_vllm_engines``
  -> ``lora_sync.create_lora_vllm_engines`` (engines with vLLM's LoRA on).

``train_ppo_ray.train`` imports ``PPOTrainer`` when called, and the module (run fresh by
``runpy``) takes ``PolicyModelActor`` and ``create_vllm_engines`` from their packages'
attributes, so replacing those attributes before it runs is enough. The settings reach the
(remote) trainer as ``strategy.args.agentsearch``: ``get_strategy`` is wrapped to attach
them to the parsed arguments. OpenRLHF's asynchronous trainer (``--train.async_enable``) is
refused: none of this hooks it.
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
    import openrlhf.trainer.ray as ray_pkg
    import openrlhf.trainer.ray.ppo_actor as ppo_actor
    import openrlhf.utils as utils

    from agentsearch.engines.openrlhf.ppo_trainer import AgentsearchPPOTrainerActor

    real_get_strategy = utils.get_strategy

    def get_strategy(args):
        if getattr(args.train, "async_enable", False):
            raise SystemExit("agentsearch runs OpenRLHF's synchronous trainer (its replay, logs "
                             "and checkpoints hook that one): drop --train.async_enable")
        args.agentsearch = SimpleNamespace(**settings)
        return real_get_strategy(args)

    utils.get_strategy = get_strategy
    ppo_trainer.PPOTrainer = AgentsearchPPOTrainerActor
    if settings.get("lora_rank"):
        from agentsearch.engines.openrlhf.lora_sync import (
            LoraSyncPolicyModelActor,
            create_lora_vllm_engines,
        )

        ppo_actor.PolicyModelActor = LoraSyncPolicyModelActor
        ray_pkg.create_vllm_engines = create_lora_vllm_engines(int(settings["lora_rank"]))


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--agentsearch-config" not in argv:
        raise SystemExit("usage: python -m agentsearch.engines.openrlhf.entry "
                         "--agentsearch-config FILE <train_ppo_ray arguments> "
                         "(`agentsearch openrlhf launch` writes both)")
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
