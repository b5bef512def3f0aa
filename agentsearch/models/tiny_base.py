"""The shipped base model ``tiny-base``: its recipe and its build record.

``scripts/build_base.py`` trains it once from the recipe ``agentsearch/configs/base-tiny.yaml`` (a
warm start only: pretraining on disjoint worlds, then SFT; see that file) and writes
``agentsearch/data/assets/tiny-base/``: ``model.safetensors``, ``config.json``, the tokenizer,
and ``build.json`` (the recipe, a fingerprint of the code that makes its training data, the
dev evaluation measured at build time, how long it took; ``agentsearch.recipes.base_build``
writes it). A base is built once, as a real base model is downloaded once; ``make demo``
spends its minutes on RL. ``agentsearch.models.load_base`` (or ``load_model("tiny-base")``)
loads it after ``check_base``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from agentsearch.core.config import ConfigError
from agentsearch.data.paths import BASE_DIR, BASE_DIRS, tokenizer_dir

__all__ = ["BASE_DIR", "BASE_DIRS", "BASE_RECIPE", "BASE_RECIPES", "REBUILD_HINT", "check_base",
           "tokenizer_fingerprint"]

BASE_RECIPE = "base-tiny"
"""The preset (``agentsearch/configs/base-tiny.yaml``) that ``scripts/build_base.py`` builds."""
BASE_RECIPES = {"tiny-base": BASE_RECIPE, "tiny-chain-base": "base-chains",
                "tiny-chain-base-worlds": "base-chains-worlds", "tiny-math-base": "base-math"}
"""The recipe preset of every shipped base (``data.paths.BASE_DIRS`` says where it lives)."""
REBUILD_HINT = ("rebuild it with: python scripts/build_base.py [--base "
                f"{'|'.join(b for b in BASE_RECIPES if b != 'tiny-base')}] "
                "(10-40 minutes on 2 CPU cores)")


def tokenizer_fingerprint(folder: Path) -> str:
    return hashlib.sha256((Path(folder) / "tokenizer.json").read_bytes()).hexdigest()


def check_base(folder: Path = BASE_DIR) -> dict:
    """``build.json`` of a base folder, after checking the folder is whole and was built for
    the shipped tokenizer its recipe's model names (``tiny``: the world tokenizer); a clear
    error naming the build script otherwise."""
    folder = Path(folder)
    missing = [f for f in ("model.safetensors", "config.json", "tokenizer.json", "build.json")
               if not (folder / f).is_file()]
    if missing:
        raise FileNotFoundError(f"the shipped base {folder} lacks {missing}; {REBUILD_HINT}")
    try:
        build = json.loads((folder / "build.json").read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{folder}/build.json is unreadable ({e}); {REBUILD_HINT}") from None
    # the one it was built from
    tokenizer = tokenizer_dir(build.get("recipe", {}).get("model", "tiny"))
    if build.get("tokenizer_sha256") != tokenizer_fingerprint(tokenizer):
        raise ConfigError(f"the base in {folder} was built for another tokenizer than the shipped "
                          f"{tokenizer}; {REBUILD_HINT}")
    return build
