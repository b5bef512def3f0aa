"""What every index folder shares: the documents and a ``manifest.json``.

An index folder is self-contained::

    manifest.json   {"format": 1, "kind": "bm25s", "num_docs": ..., "corpus_sha256": ..., ...}
    docs.jsonl      the corpus rows {"id", "contents"}, in index order (row i = internal id i)
    docs.offsets.npy  where each row starts (uint64, N + 1 entries): rows are read in place
    ...             backend files (bm25s arrays, a Lucene index, index.faiss)

``corpus_sha256`` hashes the normalised rows, so two indexes of the same corpus can be
fused (hybrid search) and a dense index can tell when it no longer matches its documents.
``docs_bytes`` is docs.jsonl's size, so a truncated copy is an error, not missing documents.

A loaded folder reads its documents in place (``MappedDocStore``: the file memory-mapped,
a row parsed when it is a hit), so serving 21M passages costs 8 bytes a row of offsets, not
the ~14 GB of text held as Python strings.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agentsearch.retrievers.base import Hit, RetrieverError

__all__ = ["DocStore", "MappedDocStore", "MANIFEST", "DOCS", "FORMAT", "read_manifest",
           "write_manifest", "check_out_dir", "staging", "finish_index"]

MANIFEST = "manifest.json"
DOCS = "docs.jsonl"
OFFSETS = "docs.offsets.npy"
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
        """Read a corpus JSONL (rows ``{"id", "contents"}``; DPR ``title``/``text`` rows
        work too)."""
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
    def load(cls, index_dir: Path, manifest: dict | None = None) -> MappedDocStore:
        """The documents of an index folder, read in place (``MappedDocStore``)."""
        return MappedDocStore(Path(index_dir), manifest)

    def save(self, index_dir: Path) -> int:
        """Write ``docs.jsonl`` and its row offsets; returns its size in bytes."""
        ends = np.zeros(len(self.ids) + 1, dtype=np.uint64)
        with open(index_dir / DOCS, "wb") as f:
            for n, (i, c) in enumerate(zip(self.ids, self.contents), 1):
                f.write((json.dumps({"id": i, "contents": c}, ensure_ascii=False) + "\n").encode())
                ends[n] = f.tell()
        np.save(index_dir / OFFSETS, ends)
        return int(ends[-1])

    def sha256(self) -> str:
        h = hashlib.sha256()
        for i, c in zip(self.ids, self.contents):
            h.update(json.dumps([i, c], ensure_ascii=False).encode())
            h.update(b"\n")
        return h.hexdigest()


class _Column(Sequence):
    """One field of every row of a ``MappedDocStore``, read on access."""

    def __init__(self, store: MappedDocStore, key: str):
        self.store, self.key = store, key

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.store.row(j)[self.key] for j in range(*i.indices(len(self)))]
        return self.store.row(i)[self.key]


class MappedDocStore:
    """``docs.jsonl`` memory-mapped: row ``i`` is parsed when asked for (``hit``, ``row``);
    ``ids`` and ``contents`` are lazy sequences. Offsets come from ``docs.offsets.npy``, or
    (folders built before it existed) from one scan for newlines."""

    def __init__(self, index_dir: Path, manifest: dict | None = None):
        path = index_dir / DOCS
        if not path.is_file():
            raise RetrieverError(f"{path} is missing: the index folder is incomplete; rebuild it")
        size = path.stat().st_size
        want = (manifest or {}).get("docs_bytes")
        if want is not None and size != want:
            raise RetrieverError(f"{path} has {size:,} bytes but was written with {want:,}: it is "
                                 "truncated or was replaced since the build; rebuild the index")
        if size == 0:
            raise RetrieverError(f"{path} is empty; rebuild the index")
        with open(path, "rb") as f:
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        off_path = index_dir / OFFSETS
        offsets = np.load(off_path, mmap_mode="r") if off_path.is_file() else None
        if offsets is None or len(offsets) < 2 or int(offsets[-1]) != size:
            offsets = _line_offsets(self._mm)
        self._off = offsets
        if manifest is not None and len(self) != manifest.get("num_docs", len(self)):
            raise RetrieverError(f"{path} has {len(self):,} rows but the manifest says "
                                 f"{manifest['num_docs']:,} documents; rebuild the index")

    def __len__(self) -> int:
        return len(self._off) - 1

    def row(self, i: int) -> dict:
        if not 0 <= i < len(self):
            raise IndexError(f"document {i} of {len(self)}")
        return json.loads(self._mm[int(self._off[i]):int(self._off[i + 1])])

    def hit(self, i: int, score: float) -> Hit:
        row = self.row(i)
        return Hit(row["id"], row["contents"], float(score))

    @property
    def ids(self) -> _Column:
        return _Column(self, "id")

    @property
    def contents(self) -> _Column:
        return _Column(self, "contents")


def _line_offsets(buf, chunk: int = 1 << 26) -> np.ndarray:
    """``[0, end of line 1, end of line 2, ...]`` of a JSONL buffer, 64 MiB at a time."""
    ends = [np.zeros(1, dtype=np.uint64)]
    for a in range(0, len(buf), chunk):
        part = np.frombuffer(buf[a:a + chunk], dtype=np.uint8)
        ends.append(np.flatnonzero(part == 10).astype(np.uint64) + np.uint64(a + 1))
    out = np.concatenate(ends)
    if int(out[-1]) != len(buf):  # a last row without its newline
        out = np.append(out, np.uint64(len(buf)))
    return out


def read_manifest(index_dir: str | Path) -> dict:
    """The manifest of an index folder, with errors that say what to do."""
    index_dir = Path(index_dir)
    path = index_dir / MANIFEST
    if not index_dir.is_dir():
        raise RetrieverError(f"index folder not found: {index_dir} "
                             "(build one with: agentsearch index build --corpus FILE "
                             "--kind bm25s --out DIR)")
    if not path.is_file():
        raise RetrieverError(f"{index_dir} is not an agentsearch index: it has no {MANIFEST} "
                             "(build one with: agentsearch index build --corpus FILE "
                             "--kind bm25s --out DIR)")
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


def finish_index(folder: Path, docs: DocStore, kind: str, corpus_path, t0: float,
                 extra: dict) -> None:
    """Write ``docs.jsonl`` and the manifest: the last step of every build or adoption."""
    size = docs.save(folder)
    write_manifest(folder, {"format": FORMAT, "kind": kind, "num_docs": len(docs),
                            "docs_bytes": size, "corpus_sha256": docs.sha256(),
                            "corpus_path": str(corpus_path),
                            "build_seconds": round(time.perf_counter() - t0, 2),
                            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **extra})
