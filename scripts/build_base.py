"""Build a shipped base model from its recipe into ``agentsearch/data/assets/<base>``:
``tiny-base`` (``agentsearch/configs/base-tiny.yaml``), ``tiny-chain-base``
(``agentsearch/configs/base-chains.yaml``, the hard world's) or ``tiny-math-base``
(``agentsearch/configs/base-math.yaml``, math with a calculator).

    python scripts/build_base.py                                # -> .../assets/tiny-base
    python scripts/build_base.py --base tiny-chain-base         # -> .../assets/tiny-chain-base
    python scripts/build_base.py --base tiny-chain-base-worlds  # the hard world's, across worlds
    python scripts/build_base.py --base tiny-math-base          # -> .../assets/tiny-math-base
    python scripts/build_base.py --out /tmp/b sft.steps=100     # an experiment elsewhere

25-40 minutes on 2 CPU cores; prints a progress line every 100 steps. Commit the folder it
writes: ``make demo`` loads it instead of training a base (tests check that the shipped
``build.json`` matches this recipe and code).
"""

from __future__ import annotations

import argparse
import json

from agentsearch.models.tiny_base import BASE_RECIPES
from agentsearch.recipes.base_build import build

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="tiny-base", choices=sorted(BASE_RECIPES),
                    help="which shipped base")
    ap.add_argument("--out", default=None,
                    help="model folder to write (default: the base's folder in the package)")
    ap.add_argument("overrides", nargs="*",
                    help="key=value changes to the recipe (experiments only)")
    a = ap.parse_args()
    rec = build(a.out, a.overrides, base=a.base)
    print(json.dumps({"dev_em": rec["eval"]["eval/mean_at_n"],
                      "train_seconds": rec["train_seconds"], "out": a.out or a.base}))
