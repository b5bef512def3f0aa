"""The on-disk cache: converted models, built worlds and indexes, pretrained bases.

The lowest layer (imports nothing from agentsearch), so ``data``, ``models`` and
``retrievers`` all use it without importing each other.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["cache_dir", "publish_dir"]


def cache_dir() -> Path:
    """Where converted models and built worlds/indexes live (``AGENTSEARCH_CACHE``)."""
    d = Path(os.environ.get("AGENTSEARCH_CACHE", Path.home() / ".cache" / "agentsearch"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def publish_dir(tmp: Path, out: Path) -> Path:
    """Rename the fully written cache folder ``tmp`` to ``out``, so readers never see half of
    one. If a concurrent process published ``out`` first, keep theirs (built from the same
    inputs) and delete ``tmp``."""
    try:
        tmp.rename(out)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
