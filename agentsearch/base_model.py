"""The shipped base model ``tiny-base``: its recipe, its build record, and loading it.

``scripts/build_base.py`` trains it once from the recipe ``agentsearch/configs/base-tiny.yaml`` (a warm
start only: pretraining on disjoint worlds, then SFT; see that file) and writes
``agentsearch/data/assets/tiny-base/``: ``model.safetensors``, ``config.json``, the tokenizer,
and ``build.json`` (the recipe, a fingerprint of the code that makes its training data, the
dev evaluation measured at build time, how long it took; ``agentsearch.trainer.base_build``
writes it). A base is built once, as a real
base model is downloaded once; ``make demo`` spends its minutes on RL.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

__all__ = ["BASE_DIR", "BASE_RECIPE", "check_base", "load_base", "tokenizer_fingerprint"]

BASE_DIR = Path(__file__).parent / "data" / "assets" / "tiny-base"
BASE_RECIPE = "base-tiny"
"""The preset (``agentsearch/configs/base-tiny.yaml``) that ``scripts/build_base.py`` builds."""
_REBUILD = "rebuild it with: python scripts/build_base.py (about 25 minutes on 2 CPU cores)"


def tokenizer_fingerprint(folder: Path) -> str:
    return hashlib.sha256((Path(folder) / "tokenizer.json").read_bytes()).hexdigest()


def check_base(folder: Path = BASE_DIR) -> dict:
    """``build.json`` of a base folder, after checking the folder is whole and was built for
    the shipped world tokenizer; a clear error naming the build script otherwise."""
    from agentsearch.config import ConfigError
    from agentsearch.models import TOKENIZER_DIR

    folder = Path(folder)
    missing = [f for f in ("model.safetensors", "config.json", "tokenizer.json", "build.json")
               if not (folder / f).is_file()]
    if missing:
        raise FileNotFoundError(f"the shipped base {folder} lacks {missing}; {_REBUILD}")
    try:
        build = json.loads((folder / "build.json").read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{folder}/build.json is unreadable ({e}); {_REBUILD}") from None
    if build.get("tokenizer_sha256") != tokenizer_fingerprint(TOKENIZER_DIR):
        raise ConfigError(f"the base in {folder} was built for another tokenizer than the shipped "
                          f"{TOKENIZER_DIR}; {_REBUILD}")
    return build


def load_base(folder: Path = BASE_DIR, *, dtype=None, device: str | None = None):
    """``(model, tokenizer)`` of the shipped base, checked by ``check_base`` and then loaded
    like any model folder (``models.load_model``); a folder that does not load is a clear
    error naming the build script."""
    from agentsearch.config import ConfigError
    from agentsearch.models import load_model

    check_base(folder)
    try:
        model, tok = load_model(str(folder), dtype=dtype, device=device)
    except Exception as e:  # noqa: BLE001 - safetensors/transformers raise many kinds
        raise ConfigError(f"the shipped base in {folder} does not load ({type(e).__name__}: {e}); "
                          f"{_REBUILD}") from None
    if model.config.vocab_size < len(tok):
        raise ConfigError(f"the base's vocabulary ({model.config.vocab_size}) is smaller than its "
                          f"tokenizer's ({len(tok)}); {_REBUILD}")
    return model, tok
