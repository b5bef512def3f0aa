"""The README stays a first hour and every document cites only documents that exist.

Plain text checks (pathlib and re only): no agentsearch import, no network.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_LINES = 150

# [text](target) and ![alt](target), with an optional "title"; the target has no spaces
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# a repository path to a markdown file under docs/, e.g. `docs/results/replay_suite.md`
DOC_MENTION = re.compile(r"(?<![\w./-])docs/[\w./-]*?\.md\b")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
EXTERNAL = ("http://", "https://", "mailto:", "ftp://")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def markdown_files(root: Path = ROOT) -> list[Path]:
    """README.md and every markdown file under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def links(text: str) -> list[str]:
    """Link targets of a markdown text, outside code blocks and inline code."""
    prose = INLINE_CODE.sub("", FENCE.sub("", text))
    return LINK.findall(prose)


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a markdown file (duplicates get -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(path: Path) -> list[str]:
    """Relative links in `path` whose file does not exist (resolved against its folder), or
    whose `#anchor` names no heading of the markdown file it points to."""
    broken = []
    for target in links(path.read_text(encoding="utf-8")):
        if target.lower().startswith(EXTERNAL):
            continue
        file_part, _, anchor = target.partition("#")
        file = path.parent / file_part.split("?", 1)[0] if file_part else path
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(target)
    return broken


def missing_doc_mentions(path: Path, root: Path = ROOT) -> list[str]:
    """`docs/....md` paths mentioned anywhere in `path` (prose or code) that do not exist."""
    return [m for m in DOC_MENTION.findall(path.read_text(encoding="utf-8"))
            if not (root / m).is_file()]


def test_readme_is_a_first_hour():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, (f"README.md has {n} lines (at most {README_MAX_LINES}): "
                                   "move the manual into docs/")


def test_config_reference_ends_with_its_table():
    """scripts/config_reference.py --write replaces the table at the end of docs/config.md."""
    lines = (ROOT / "docs" / "config.md").read_text(encoding="utf-8").rstrip().splitlines()
    start = lines.index("| key | default | meaning |")
    assert all(line.startswith("|") for line in lines[start:]) and len(lines) - start > 2


def test_readme_starts_with_the_two_commands():
    head = "\n".join(README.read_text(encoding="utf-8").splitlines()[:6])
    assert "make demo" in head and "make test" in head


def test_every_relative_link_resolves():
    broken = {str(p.relative_to(ROOT)): b for p in markdown_files() if (b := broken_links(p))}
    assert broken == {}


def test_every_mentioned_doc_exists():
    missing = {str(p.relative_to(ROOT)): m for p in markdown_files()
               if (m := missing_doc_mentions(p))}
    assert missing == {}


def test_the_checks_catch_a_broken_link_and_a_missing_doc(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "here.md").write_text("# Here\n\n## The top (of it)\n\n## Top\n\n## Top\n")
    page = tmp_path / "README.md"
    page.write_text(
        "# A\n\nSee [here](docs/here.md#the-top-of-it), [again](docs/here.md#top-1),\n"
        "[the web](https://example.org/x.md), [self](#a), [no such anchor](docs/here.md#top-2),\n"
        "[gone](docs/gone.md), ![a plot](plots/missing.png \"title\") and "
        "[gone too](docs/gone2.md#sec).\n"
        "```python\nx = d[0](1)  # [not a link](nowhere.md)\n```\n"
        "Mentions: `docs/here.md`, `docs/absent.md`.\n"
    )
    assert broken_links(page) == ["docs/here.md#top-2", "docs/gone.md", "plots/missing.png",
                                  "docs/gone2.md#sec"]
    assert missing_doc_mentions(page, root=tmp_path) == ["docs/gone.md", "docs/gone2.md",
                                                         "docs/absent.md"]
    assert [p.name for p in markdown_files(tmp_path)] == ["README.md", "here.md"]
