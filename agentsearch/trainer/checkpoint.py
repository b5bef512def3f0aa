"""Resumable checkpoints, written so that a crash at any instant loses at most the step in flight.

``RUN_DIR/checkpoints/step-000010/`` holds ``model.pt`` (trainable weights: the LoRA
adapter, or the whole model when training all weights), ``trainer.pt`` (optimizer,
scheduler, RNG states of python/numpy/torch, the task sampler, counters), ``replay.pt``
(the replay buffer's ``state_dict``) and, written last, ``MANIFEST.json`` (each file's size
and SHA-256). Writing one:

1. every file goes into a temporary folder ``.tmp-step-000010-PID``, each fsynced;
2. the manifest is written and fsynced, then the folder is renamed into place (an existing
   checkpoint of the same step is first renamed aside, then removed) and the parent fsynced;
3. ``checkpoints/latest`` is replaced (write, fsync, rename); old checkpoints are pruned.

``latest_checkpoint`` takes the newest ``step-*`` folder whose files match its manifest
(``latest`` names it in the normal case; after a crash between steps 2 and 3, or with a
corrupt file, the newest intact one is taken, and each skipped folder is logged with the
reason). A temporary folder is never read, so a half-written checkpoint is never loaded.
``torch.save`` writes identical bytes for identical contents, so two runs' ``replay.pt``
at the same step can be compared byte for byte (``agentsearch.recipes.crash_trials``).
``core.failpoints`` crash points sit between the stages (``checkpoint:model``,
``checkpoint:files``, ``checkpoint:renamed``).

``RUN_DIR/reference.pt`` (runs with a KL term only) holds the KL reference: the policy's
trainable weights when RL began, after the warm start. It is written once, at step 0, and
read on every (re)start, so a resumed run's reference is the original run's without
repeating the warm start (whose result no checkpoint keeps: with LoRA only the adapter
is saved).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentsearch.core.config import ConfigError
from agentsearch.core.failpoints import crash_point

__all__ = ["save_checkpoint", "load_checkpoint", "latest_checkpoint", "rng_state", "set_rng_state",
           "trainable_state_dict", "save_final", "save_reference", "load_reference",
           "checkpoint_problem"]

log = logging.getLogger("agentsearch.checkpoint")
MANIFEST = "MANIFEST.json"


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


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _save(obj, path: Path) -> None:
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _manifest(folder: Path) -> dict:
    return {p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)}
            for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST}


def save_checkpoint(run_dir: str | Path, step: int, *, model: torch.nn.Module, optimizer,
                    scheduler=None, replay=None, state: dict[str, Any] | None = None,
                    keep: int = 2) -> Path:
    """Write ``checkpoints/step-{step}`` (module notes: crash-safe at every instant) and point
    ``checkpoints/latest`` at it; keeps the newest ``keep`` checkpoints."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".tmp-step-*"):  # what a crashed writer left; never read
        shutil.rmtree(stale, ignore_errors=True)
    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}-{os.getpid()}"
    tmp.mkdir()
    _save(trainable_state_dict(model), tmp / "model.pt")
    crash_point("checkpoint:model")
    _save({"step": step, "optimizer": optimizer.state_dict(),
           "scheduler": scheduler.state_dict() if scheduler is not None else None,
           "rng": rng_state(), "state": state or {}}, tmp / "trainer.pt")
    if replay is not None:
        _save(replay.state_dict(), tmp / "replay.pt")
    _atomic_write_text(tmp / MANIFEST, json.dumps(_manifest(tmp), indent=1) + "\n")
    crash_point("checkpoint:files")
    if final.exists():  # the same step again (an outage stop right after a checkpoint)
        aside = root / f".tmp-step-{step:06d}-old-{os.getpid()}"
        os.replace(final, aside)
        os.replace(tmp, final)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _fsync_dir(root)
    crash_point("checkpoint:renamed")
    _atomic_write_text(root / "latest", final.name + "\n")
    old = sorted(p for p in root.glob("step-*") if p.is_dir() and p != final)
    for p in old[:max(len(old) - (keep - 1), 0)]:
        shutil.rmtree(p, ignore_errors=True)
    return final


def checkpoint_problem(path: str | Path) -> str | None:
    """Why the checkpoint folder ``path`` cannot be loaded (a missing or changed file, no
    manifest), or ``None`` when every file matches its manifest."""
    path = Path(path)
    if not (path / MANIFEST).exists() and (path / "trainer.pt").is_file() \
            and (path / "model.pt").is_file():
        return None  # written before manifests (renamed into place whole, as now): not verifiable
    try:
        want = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        return f"{path / MANIFEST} is missing or unreadable ({type(e).__name__})"
    for name in ("model.pt", "trainer.pt"):
        if name not in want:
            return f"{path / MANIFEST} does not list {name}"
    for name, meta in want.items():
        f = path / name
        if not f.is_file():
            return f"{f} is missing"
        if f.stat().st_size != meta["bytes"] or _sha256(f) != meta["sha256"]:
            return (f"{f} does not match its manifest (size or SHA-256): written partly or "
                    "changed since")
    return None


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest intact checkpoint of ``run_dir`` (module notes), or ``None``."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return None
    marker = root / "latest"
    named = marker.read_text().strip() if marker.exists() else None
    for path in sorted((p for p in root.glob("step-*") if p.is_dir()), reverse=True):
        problem = checkpoint_problem(path)
        if problem is None:
            if named and path.name != named:
                log.warning("checkpoints/latest names %s; resuming from %s, the newest intact "
                            "checkpoint", named, path.name)
            return path
        log.warning("skipping checkpoint %s: %s", path.name, problem)
    return None


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
        raise RuntimeError(f"checkpoint {path} does not match the model: missing "
                           f"{sorted(missing)[:3]}...")
    model.load_state_dict(weights, strict=False)
    # our own file: holds numpy RNG state and optimizer state, so not weights_only
    trainer = torch.load(path / "trainer.pt", map_location="cpu", weights_only=False)
    if optimizer is not None:
        optimizer.load_state_dict(trainer["optimizer"])
    if scheduler is not None and trainer["scheduler"] is not None:
        scheduler.load_state_dict(trainer["scheduler"])
    if replay is not None and (path / "replay.pt").exists():
        replay.load_state_dict(torch.load(path / "replay.pt", map_location="cpu",
                                          weights_only=False))
    # the checkpoint's own step wins over any "step" a caller's state dict carried along
    if not restore_rng:
        return {**trainer["state"], "step": trainer["step"], "rng": trainer["rng"]}
    set_rng_state(trainer["rng"])
    return {**trainer["state"], "step": trainer["step"]}


def save_reference(run_dir: str | Path, model: torch.nn.Module) -> None:
    """Write ``RUN_DIR/reference.pt``: ``model``'s trainable weights, the KL reference (module
    doc)."""
    path = Path(run_dir) / "reference.pt"
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    _save(trainable_state_dict(model), tmp)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def load_reference(run_dir: str | Path) -> dict[str, torch.Tensor]:
    """The weights ``save_reference`` wrote; a clear error when the run has none."""
    path = Path(run_dir) / "reference.pt"
    if not path.exists():
        raise ConfigError(f"{path} is missing: a run with kl_coef > 0 writes its KL reference "
                          "there at step 0; this run was started with kl_coef=0 (or by an older "
                          "version), so it cannot be resumed with a KL term")
    return torch.load(path, map_location="cpu", weights_only=True)


def save_final(model, tok, out: str | Path) -> None:
    """The trained policy as a loadable model folder (a LoRA adapter merged into the base),
    written beside ``out`` and renamed into place: ``out`` is whole or absent. A LoRA policy
    also leaves its adapter alone, in fp16, in ``adapter/`` beside ``out`` (``save_adapter``):
    small enough to keep with a run's record, and ``agentsearch eval --run`` loads it."""
    out = Path(out)
    if hasattr(model, "peft_config"):
        from agentsearch.models.lora import save_adapter

        save_adapter(model, out.with_name("adapter"))
    tmp = out.with_name(f".tmp-{out.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    merged = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    merged.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
