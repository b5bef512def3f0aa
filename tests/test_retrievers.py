"""In-process retrievers: bm25s, index folders, micro-batching, hybrid fusion."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest

from agentsearch.data import read_jsonl
from agentsearch.retrievers import (
    BatchingRetriever,
    Hit,
    HybridRetriever,
    MicroBatcher,
    Retriever,
    RetrieverError,
    build_index,
    format_hits,
    load_retriever,
    world_index,
)


def recall_at(retriever, questions, k=3):
    hits = retriever.search([q["question"] for q in questions], k)
    return sum(any(h.doc_id in q["gold_doc_ids"] for h in hs)
               for q, hs in zip(questions, hits)) / len(questions)


@pytest.fixture(scope="module")
def bm25s_world():
    return load_retriever(world_index(seed=0, kind="bm25s"))


@pytest.fixture(scope="module")
def single_hop(world_path):
    return [q for q in read_jsonl(world_path / "test.jsonl") if q["type"] == "single"]


def test_import_is_light():
    code = ("import sys, agentsearch.retrievers as r; r.Hit; "
            "heavy = [m for m in ('numpy', 'bm25s', 'faiss', 'torch', 'pyserini', 'fastapi', "
            "'httpx') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_bm25s_recall_single_hop(bm25s_world, single_hop):
    assert isinstance(bm25s_world, Retriever)
    assert recall_at(bm25s_world, single_hop, k=3) >= 0.9


def test_bm25s_hits_are_ranked_and_formatted(bm25s_world, single_hop):
    q = single_hop[0]
    hits = bm25s_world.search([q["question"]], k=5)[0]
    assert 1 <= len(hits) <= 5 and all(isinstance(h, Hit) for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[0].doc_id in q["gold_doc_ids"]
    text = format_hits(hits)
    assert text.startswith(f'Doc 1(Title: "{hits[0].title}") ')


def test_bm25s_empty_and_unknown_queries_return_no_hits(bm25s_world):
    assert bm25s_world.search(["", "   ", "zzzqqqxx", "the of and"], k=3) == [[], [], [], []]
    with pytest.raises(ValueError):
        bm25s_world.search(["x"], k=0)


def test_bm25s_long_query_and_huge_k(bm25s_world):
    hits = bm25s_world.search(["Stethith " * 20000], k=10**6)[0]  # ~180 KB, k > corpus
    assert 1 <= len(hits) <= bm25s_world.num_docs


def test_asearch_matches_search(bm25s_world, single_hop):
    qs = [q["question"] for q in single_hop[:5]]
    assert asyncio.run(bm25s_world.asearch(qs, 3)) == bm25s_world.search(qs, 3)


def test_build_index_atomic_and_manifest(tmp_path, small_world_path):
    out = build_index(small_world_path / "corpus.jsonl", "bm25s", tmp_path / "idx", progress=False)
    m = json.loads((out / "manifest.json").read_text())
    assert m["kind"] == "bm25s" and m["num_docs"] > 0 and len(m["corpus_sha256"]) == 64
    assert not [p for p in tmp_path.iterdir() if p.name != "idx"]  # no temp folder left
    build_index(small_world_path / "corpus.jsonl", "bm25s", out, progress=False)  # rebuild in place
    assert load_retriever(out).search(["born"], 1)[0]


def test_bad_index_folders(tmp_path, small_world_path):
    with pytest.raises(RetrieverError, match="not found"):
        load_retriever(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RetrieverError, match="manifest.json"):
        load_retriever(tmp_path / "empty")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "keep.txt").write_text("user data")
    with pytest.raises(RetrieverError, match="not an index folder"):
        build_index(small_world_path / "corpus.jsonl", "bm25s", tmp_path / "junk", progress=False)
    assert (tmp_path / "junk" / "keep.txt").exists()
    with pytest.raises(RetrieverError, match="unknown index kind"):
        build_index(small_world_path / "corpus.jsonl", "nope", tmp_path / "x", progress=False)
    with pytest.raises(FileNotFoundError):
        build_index(tmp_path / "missing.jsonl", "bm25s", tmp_path / "y", progress=False)


def test_index_cli_main(tmp_path, small_world_path, capsys):
    from agentsearch.cli import main

    rc = main(["index", "build", "--corpus", str(small_world_path / "corpus.jsonl"),
               "--kind", "bm25s", "--out", str(tmp_path / "cli")])
    assert rc == 0 and "built bm25s index" in capsys.readouterr().out
    assert (tmp_path / "cli" / "manifest.json").exists()


# -- micro-batching ------------------------------------------------------------------

class CountingRetriever:
    """Echo retriever that records the batches it is asked for."""

    def __init__(self, delay=0.0, fail_on=None):
        self.calls: list[list[str]] = []
        self.delay, self.fail_on = delay, fail_on

    def search(self, queries, k=3):
        return [[Hit(f"{q}-{i}", f'"{q}"\ntext', float(-i)) for i in range(k)] for q in queries]

    async def asearch(self, queries, k=3):
        self.calls.append(list(queries))
        await asyncio.sleep(self.delay)
        if self.fail_on is not None and self.fail_on in queries:
            raise RetrieverError("backend failed")
        return self.search(queries, k)


def test_batching_coalesces_concurrent_calls():
    inner = CountingRetriever(delay=0.01)
    r = BatchingRetriever(inner, window_ms=20, max_batch=256)

    async def main():
        return await asyncio.gather(*(r.asearch([f"q{i % 50}"], 1 + i % 3) for i in range(200)))

    res = asyncio.run(main())
    assert len(inner.calls) == 1 and len(inner.calls[0]) == 50  # one call, duplicates sent once
    for i, hits in enumerate(res):
        assert [h.doc_id for h in hits[0]] == [f"q{i % 50}-{j}" for j in range(1 + i % 3)]


def test_batching_splits_at_max_batch_and_keeps_order():
    inner = CountingRetriever()
    b = MicroBatcher(inner.asearch, window_ms=50, max_batch=8)

    async def main():
        big = b.submit([f"big{i}" for i in range(20)], 2)
        small = [b.submit([f"s{i}"], 1) for i in range(10)]
        return await asyncio.gather(big, *small)

    big, *small = asyncio.run(main())
    assert [h[0].doc_id for h in big] == [f"big{i}-0" for i in range(20)]
    assert [s[0][0].doc_id for s in small] == [f"s{i}-0" for i in range(10)]
    assert max(len(c) for c in inner.calls) <= 8


def test_batching_error_reaches_only_that_batch_and_recovers():
    inner = CountingRetriever(fail_on="bad")
    r = BatchingRetriever(inner, window_ms=5)

    async def main():
        bad = await asyncio.gather(r.asearch(["bad"]), r.asearch(["ok"]), return_exceptions=True)
        good = await r.asearch(["fine"], 1)
        return bad, good

    bad, good = asyncio.run(main())
    assert all(isinstance(x, RetrieverError) for x in bad)
    assert good[0][0].doc_id == "fine-0"


def test_batching_idle_fire_skips_the_window_only_when_idle():
    inner = CountingRetriever(delay=0.2)
    r = BatchingRetriever(inner, window_ms=1000, max_batch=256, idle_fire=True, max_inflight=1)

    async def main():
        t = time.perf_counter()
        first = asyncio.ensure_future(r.asearch(["lone"], 1))
        await asyncio.sleep(0.05)  # the lone call is in flight; these arrive behind it
        rest = [asyncio.ensure_future(r.asearch([f"q{i}"], 1)) for i in range(5)]
        await first
        lone_s = time.perf_counter() - t
        await asyncio.gather(*rest)
        return lone_s, time.perf_counter() - t

    lone_s, all_s = asyncio.run(main())
    assert lone_s < 0.5  # 0.2 s of search, no 1 s window: the batcher was idle
    assert [len(c) for c in inner.calls] == [1, 5]  # the five waited together behind it...
    assert all_s < 0.9  # ...and went when it ended, not after the 1 s window


def test_batching_survives_new_event_loops():
    r = BatchingRetriever(CountingRetriever(), window_ms=1)
    for _ in range(3):
        assert asyncio.run(r.asearch(["a"], 1))[0][0].doc_id == "a-0"


# -- hybrid ----------------------------------------------------------------------------

class FixedRetriever(CountingRetriever):
    def __init__(self, ranking):
        super().__init__()
        self.ranking = ranking

    def search(self, queries, k=3):
        return [[Hit(d, f'"{d}"\nx', 1.0 / (r + 1))
                 for r, d in enumerate(self.ranking[:k])] for _ in queries]


def test_hybrid_rrf_fuses_ranks():
    a = FixedRetriever(["d1", "d2", "d3"])
    b = FixedRetriever(["d3", "d1", "d4"])
    h = HybridRetriever([a, b], rrf_k=60)
    hits = h.search(["q"], k=4)[0]
    assert [x.doc_id for x in hits] == ["d1", "d3", "d2", "d4"]
    assert hits[0].score == pytest.approx(1 / 61 + 1 / 62)
    assert asyncio.run(h.asearch(["q"], 4)) == [hits]
