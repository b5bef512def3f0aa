"""Resumable checkpoints, written atomically.

``RUN_DIR/checkpoints/step-000010/`` holds ``model.pt`` (trainable weights: the LoRA
adapter, or the whole model when training all weights), ``trainer.pt`` (optimizer,
scheduler, RNG states of python/numpy/torch, the task sampler, counters) and
``replay.pt`` (the replay buffer's ``state_dict``). A checkpoint is written into a
temporary folder and renamed into place, then ``checkpoints/latest`` is replaced
(rename again), so a crash at any point leaves the previous checkpoint intact and
``--resume`` never reads half a checkpoint.

``RUN_DIR/reference.pt`` (runs with a KL term only) holds the KL reference: the policy's
trainable weights when RL began, after the warm start. It is written once, at step 0, and
read on every (re)start, so a resumed run's reference is the original run's without
repeating the warm start (whose result no checkpoint keeps: with LoRA only the adapter
is saved).
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentsearch.core.config import ConfigError

__all__ = ["save_checkpoint", "load_checkpoint", "latest_checkpoint", "rng_state", "set_rng_state",
           "trainable_state_dict", "save_final", "save_reference", "load_reference"]


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(s: dict) -> None:
    random.setstate(s["python"])
    np.random.set_state(s["numpy"])
    torch.set_rng_state(s["torch"])
    if s.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def trainable_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Only the parameters that train (LoRA adapters, or everything for full fine-tuning)."""
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items() if k in names}


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def save_checkpoint(run_dir: str | Path, step: int, *, model: torch.nn.Module, optimizer,
                    scheduler=None, replay=None, state: dict[str, Any] | None = None,
                    keep: int = 2) -> Path:
    """Write ``checkpoints/step-{step}`` atomically and point ``checkpoints/latest`` at it."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    torch.save(trainable_state_dict(model), tmp / "model.pt")
    torch.save({"step": step, "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict() if scheduler is not None else None,
                "rng": rng_state(), "state": state or {}}, tmp / "trainer.pt")
    if replay is not None:
        torch.save(replay.state_dict(), tmp / "replay.pt")
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _atomic_write_text(root / "latest", final.name + "\n")
    old = sorted(p for p in root.glob("step-*") if p.is_dir() and p != final)
    for p in old[:max(len(old) - (keep - 1), 0)]:
        shutil.rmtree(p, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    root = Path(run_dir) / "checkpoints"
    marker = root / "latest"
    if not marker.exists():
        return None
    path = root / marker.read_text().strip()
    return path if (path / "trainer.pt").exists() else None


def load_checkpoint(path: str | Path, *, model: torch.nn.Module, optimizer=None, scheduler=None,
                    replay=None, restore_rng: bool = True) -> dict:
    """Restore into the given objects; returns the trainer state (step, counters, ...).

    Also restores the RNG states, so the run continues exactly where it stopped; with
    ``restore_rng=False`` they are returned under ``"rng"`` instead, for the caller to restore
    (``set_rng_state``) after whatever else it builds reseeds (a vLLM engine does).
    """
    path = Path(path)
    weights = torch.load(path / "model.pt", map_location="cpu", weights_only=True)
    missing = set(trainable_state_dict(model)) - set(weights)
    if missing:
        raise RuntimeError(f"checkpoint {path} does not match the model: missing {sorted(missing)[:3]}...")
    model.load_state_dict(weights, strict=False)
    # our own file: holds numpy RNG state and optimizer state, so not weights_only
    trainer = torch.load(path / "trainer.pt", map_location="cpu", weights_only=False)
    if optimizer is not None:
        optimizer.load_state_dict(trainer["optimizer"])
    if scheduler is not None and trainer["scheduler"] is not None:
        scheduler.load_state_dict(trainer["scheduler"])
    if replay is not None and (path / "replay.pt").exists():
        replay.load_state_dict(torch.load(path / "replay.pt", map_location="cpu", weights_only=False))
    if not restore_rng:
        return {"step": trainer["step"], **trainer["state"], "rng": trainer["rng"]}
    set_rng_state(trainer["rng"])
    return {"step": trainer["step"], **trainer["state"]}


def save_reference(run_dir: str | Path, model: torch.nn.Module) -> None:
    """Write ``RUN_DIR/reference.pt``: ``model``'s trainable weights, the KL reference (module doc)."""
    path = Path(run_dir) / "reference.pt"
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    torch.save(trainable_state_dict(model), tmp)
    os.replace(tmp, path)


def load_reference(run_dir: str | Path) -> dict[str, torch.Tensor]:
    """The weights ``save_reference`` wrote; a clear error when the run has none."""
    path = Path(run_dir) / "reference.pt"
    if not path.exists():
        raise ConfigError(f"{path} is missing: a run with kl_coef > 0 writes its KL reference "
                                "there at step 0; this run was started with kl_coef=0 (or by an older "
                                "version), so it cannot be resumed with a KL term")
    return torch.load(path, map_location="cpu", weights_only=True)


def save_final(model, tok, out: str | Path) -> None:
    """The trained policy as a loadable model folder (a LoRA adapter merged into the base)."""
    merged = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    merged.save_pretrained(out)
    tok.save_pretrained(out)
