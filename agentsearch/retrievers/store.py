"""What every index folder shares: the documents and a ``manifest.json``.

An index folder is self-contained::

    manifest.json   {"format": 1, "kind": "bm25s", "num_docs": ..., "corpus_sha256": ..., ...}
    docs.jsonl      the corpus rows {"id", "contents"}, in index order (row i = internal id i)
    ...             backend files (bm25s arrays, a Lucene index, index.faiss)

``corpus_sha256`` hashes the normalised rows, so two indexes of the same corpus can be
fused (hybrid search) and a dense index can tell when it no longer matches its documents.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from agentsearch.retrievers.base import Hit, RetrieverError

__all__ = ["DocStore", "MANIFEST", "DOCS", "FORMAT", "read_manifest", "write_manifest", "check_out_dir",
           "staging", "finish_index"]

MANIFEST = "manifest.json"
DOCS = "docs.jsonl"
FORMAT = 1


@dataclass
class DocStore:
    """The corpus in index order: ``ids[i]`` and ``contents[i]`` are document ``i``."""

    ids: list[str]
    contents: list[str]

    def __len__(self) -> int:
        return len(self.ids)

    def hit(self, i: int, score: float) -> Hit:
        return Hit(self.ids[i], self.contents[i], float(score))

    @classmethod
    def from_corpus(cls, path: str | Path) -> DocStore:
        """Read a corpus JSONL (rows ``{"id", "contents"}``; DPR ``title``/``text`` rows work too)."""
        from agentsearch.data import load_corpus

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"corpus file not found: {path} (expected JSONL rows "
                                    '{"id", "contents"}; `agentsearch world --out DIR` writes one)')
        rows = load_corpus(path)
        if not rows:
            raise ValueError(f"corpus {path} has no rows")
        ids = [r["id"] for r in rows]
        if len(set(ids)) != len(ids):
            seen: set[str] = set()
            dup = next(i for i in ids if i in seen or seen.add(i))
            raise ValueError(f"corpus {path} repeats id {dup!r}; document ids must be unique")
        return cls(ids, [r["contents"] for r in rows])

    @classmethod
    def load(cls, index_dir: Path) -> DocStore:
        ids, contents = [], []
        with open(index_dir / DOCS, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                ids.append(row["id"])
                contents.append(row["contents"])
        return cls(ids, contents)

    def save(self, index_dir: Path) -> None:
        with open(index_dir / DOCS, "w", encoding="utf-8") as f:
            for i, c in zip(self.ids, self.contents):
                f.write(json.dumps({"id": i, "contents": c}, ensure_ascii=False) + "\n")

    def sha256(self) -> str:
        h = hashlib.sha256()
        for i, c in zip(self.ids, self.contents):
            h.update(json.dumps([i, c], ensure_ascii=False).encode())
            h.update(b"\n")
        return h.hexdigest()


def read_manifest(index_dir: str | Path) -> dict:
    """The manifest of an index folder, with errors that say what to do."""
    index_dir = Path(index_dir)
    path = index_dir / MANIFEST
    if not index_dir.is_dir():
        raise RetrieverError(f"index folder not found: {index_dir} "
                             "(build one with: agentsearch index build --corpus FILE --kind bm25s --out DIR)")
    if not path.is_file():
        raise RetrieverError(f"{index_dir} is not an agentsearch index: it has no {MANIFEST} "
                             "(build one with: agentsearch index build --corpus FILE --kind bm25s --out DIR)")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise RetrieverError(f"{path} is not valid JSON ({e.msg}); rebuild the index") from None
    if manifest.get("format") != FORMAT or "kind" not in manifest:
        raise RetrieverError(f"{path} has format {manifest.get('format')!r}, this agentsearch "
                             f"reads format {FORMAT}; rebuild the index")
    return manifest


def write_manifest(index_dir: Path, manifest: dict) -> None:
    (index_dir / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def check_out_dir(out_dir: Path) -> None:
    """An index may replace an index folder, never another non-empty folder."""
    if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / MANIFEST).exists():
        raise RetrieverError(f"{out_dir} exists and is not an index folder; choose another --out")


@contextlib.contextmanager
def staging(out_dir: Path) -> Iterator[Path]:
    """A private folder beside ``out_dir`` that replaces ``out_dir`` when the block ends
    without error (and is removed when it fails), so a reader never sees half an index."""
    check_out_dir(out_dir)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        if out_dir.exists():
            shutil.rmtree(out_dir)  # links inside (adopted indexes) go, their targets stay
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def finish_index(folder: Path, docs: DocStore, kind: str, corpus_path, t0: float, extra: dict) -> None:
    """Write ``docs.jsonl`` and the manifest: the last step of every build or adoption."""
    docs.save(folder)
    write_manifest(folder, {"format": FORMAT, "kind": kind, "num_docs": len(docs),
                            "corpus_sha256": docs.sha256(), "corpus_path": str(corpus_path),
                            "build_seconds": round(time.perf_counter() - t0, 2),
                            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **extra})
