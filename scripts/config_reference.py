"""The TrainConfig reference as a markdown table.

    python scripts/config_reference.py            # print it
    python scripts/config_reference.py --write    # replace the table in README.md
"""
import sys
from pathlib import Path

from agentsearch.config import reference
from agentsearch.trainer.config import TrainConfig


def table() -> list[str]:
    rows = ["| key | default | meaning |", "|---|---|---|"]
    rows += [f"| `{key}` | `{default}` | {doc.replace('|', '/')} |" for key, default, doc in reference(TrainConfig)]
    return rows


if __name__ == "__main__":
    if "--write" not in sys.argv:
        print("\n".join(table()))
        sys.exit(0)
    readme = Path(__file__).resolve().parent.parent / "README.md"
    lines = readme.read_text().splitlines()
    start = lines.index("| key | default | meaning |")
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    readme.write_text("\n".join(lines[:start] + table() + lines[end:]) + "\n")
    print(f"wrote {end - start} -> {len(table())} rows into {readme}")
