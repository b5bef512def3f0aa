"""The TrainConfig reference as a markdown table, in docs/config.md.

    python scripts/config_reference.py            # print it
    python scripts/config_reference.py --write    # replace the table in docs/config.md
"""
import sys
from pathlib import Path

from agentsearch.core.config import reference
from agentsearch.trainer.train_config import TrainConfig

PAGE = Path(__file__).resolve().parent.parent / "docs" / "config.md"
HEADER = "| key | default | meaning |"


def table() -> list[str]:
    rows = [HEADER, "|---|---|---|"]
    rows += [f"| `{key}` | `{default}` | {doc.replace('|', '/')} |" for key, default, doc in reference(TrainConfig)]
    return rows


if __name__ == "__main__":
    if "--write" not in sys.argv:
        print("\n".join(table()))
        sys.exit(0)
    lines = PAGE.read_text().splitlines()
    start = lines.index(HEADER)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    PAGE.write_text("\n".join(lines[:start] + table() + lines[end:]) + "\n")
    print(f"wrote {end - start} -> {len(table())} rows into {PAGE}")
