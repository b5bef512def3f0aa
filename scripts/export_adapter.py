"""A LoRA run's adapter in fp16, from one of its checkpoints, for runs whose ``save_final``
predates ``RUN/adapter/`` (or to keep an intermediate step): writes ``OUT`` (peft's layout,
what ``agentsearch eval --run`` and ``init_from`` load).

    python scripts/export_adapter.py runs/real_lm/seed0 --out docs/results/real_lm/rl-seed0/adapter
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agentsearch.core.config import apply_overrides
from agentsearch.models.lora import save_adapter
from agentsearch.trainer.checkpoint import latest_checkpoint, load_checkpoint
from agentsearch.trainer.setup import build_policy
from agentsearch.trainer.train_config import TrainConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="run folder (config.yaml, checkpoints/)")
    ap.add_argument("--checkpoint", default=None,
                    help="checkpoint folder name, e.g. step-000065 (default: the latest)")
    ap.add_argument("--out", required=True, help="adapter folder to write")
    a = ap.parse_args()
    run = Path(a.run)
    cfg = apply_overrides(TrainConfig, str(run / "config.yaml"), [])
    if not cfg.lora.enabled:
        raise SystemExit(f"{run} trained all weights (lora.enabled=false): no adapter to export")
    ckpt = run / "checkpoints" / a.checkpoint if a.checkpoint else latest_checkpoint(run)
    if ckpt is None or not ckpt.is_dir():
        raise SystemExit(f"{run}: no checkpoint {a.checkpoint or '(none intact)'}")
    model, _ = build_policy(cfg)
    step = load_checkpoint(ckpt, model=model, restore_rng=False)["step"]
    save_adapter(model, a.out)
    size = sum(p.stat().st_size for p in Path(a.out).iterdir())
    print(f"{ckpt} (step {step}) -> {a.out}: {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
