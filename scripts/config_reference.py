"""The TrainConfig reference as a markdown table, in docs/config.md, and the OpenRLHF field
mapping (agentsearch.engines.openrlhf.mapping.table) in docs/openrlhf.md.

    python scripts/config_reference.py            # print the config table
    python scripts/config_reference.py --write    # replace both tables in their pages
"""
import sys
from pathlib import Path

from agentsearch.core.config import reference
from agentsearch.trainer.train_config import TrainConfig

PAGE = Path(__file__).resolve().parent.parent / "docs" / "config.md"
HEADER = "| key | default | meaning |"
OPENRLHF_PAGE = PAGE.with_name("openrlhf.md")
OPENRLHF_HEADER = "| `train.` field | on OpenRLHF |"


def replace_table(page: Path, header: str, rows: list[str]) -> tuple[int, int]:
    """Replace the markdown table that starts at ``header`` in ``page``; (old, new) rows."""
    lines = page.read_text().splitlines()
    start = lines.index(header)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    page.write_text("\n".join(lines[:start] + rows + lines[end:]) + "\n")
    return end - start, len(rows)


def table() -> list[str]:
    rows = [HEADER, "|---|---|---|"]
    rows += [f"| `{key}` | `{default}` | {doc.replace('|', '/')} |"
             for key, default, doc in reference(TrainConfig)]
    return rows


if __name__ == "__main__":
    if "--write" not in sys.argv:
        print("\n".join(table()))
        sys.exit(0)
    from agentsearch.engines.openrlhf.mapping import table as openrlhf_table

    for page, header, rows in ((PAGE, HEADER, table()),
                               (OPENRLHF_PAGE, OPENRLHF_HEADER, openrlhf_table().splitlines())):
        old, new = replace_table(page, header, rows)
        print(f"wrote {old} -> {new} rows into {page}")
