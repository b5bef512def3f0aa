"""Dense indexes past memory: IVF-PQ with exact re-ranking, HNSW over SQ8, factory strings,
shards, memory-mapped files and documents, and the bad input that must never give wrong results."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from agentsearch.data import read_jsonl
from agentsearch.retrievers import RetrieverError, build_index, load_retriever
from agentsearch.retrievers.faiss_index import factory_for, parse_settings, rerank_exact

from .test_retrievers_dense import save_tiny_encoder


@pytest.fixture(scope="module")
def built(tmp_path_factory, world_path):
    """The default world (2,111 articles) under a 32-d random encoder: Flat and its variants."""
    root = tmp_path_factory.mktemp("compressed")
    enc = save_tiny_encoder(root / "enc-e5")
    corpus = world_path / "corpus.jsonl"
    flat = build_index(corpus, "dense-flat", root / "flat", encoder=enc, max_length=32,
                       progress=False)
    out = {"flat": flat, "encoder": enc, "root": root}
    for name, kind, kw in [("ivfpq", "dense-ivfpq", {}),
                           ("hnsw-sq8", "dense-hnsw-sq8", {"hnsw_m": 16}),
                           ("factory", "dense-factory",
                            {"factory": "IVF32,SQ8", "search": "nprobe=32"}),
                           ("ivf", "dense-ivf", {"nlist": 32}),
                           ("ivf-shards", "dense-ivf", {"nlist": 32, "shards": 3})]:
        out[name] = build_index(corpus, kind, root / name, vectors_from=flat, progress=False, **kw)
    return out


@pytest.fixture(scope="module")
def questions(world_path):
    return [q["question"] for q in read_jsonl(world_path / "dev.jsonl")][:60]


def _ids(r, qs, k=10):
    return [[h.doc_id for h in hs] for hs in r.search(qs, k)]


def _recall(ref, got):
    return float(np.mean([len(set(a) & set(b)) / len(a) for a, b in zip(ref, got)]))


def test_factory_strings_by_kind():
    assert factory_for("flat", 768, 10**6)[0] == "Flat"
    assert factory_for("hnsw-sq8", 768, 10**6, hnsw_m=32)[0] == "HNSW32,SQ8"
    s, f = factory_for("ivfpq", 768, 21_000_000)
    assert (s == "OPQ192_768,IVF18330,PQ192x8" and f["search"] == {"nprobe": 4582}
            and f["pq_m"] == 192)
    assert factory_for("ivfpq", 384, 10**6, nlist=4096, nprobe=64,
                       pq_m=48)[0] == "OPQ48_384,IVF4096,PQ48x8"
    assert factory_for("ivfpq", 30, 5000)[1]["pq_m"] == 6  # d/4 = 7 does not divide 30; 6 does
    with pytest.raises(ValueError, match="needs factory="):
        factory_for("factory", 32, 100)
    with pytest.raises(ValueError, match="must divide"):
        factory_for("ivfpq", 32, 5000, pq_m=5)
    assert parse_settings("nprobe=64, efSearch=128") == {"nprobe": 64, "efSearch": 128}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_settings("nprobe")


def test_rerank_exact_by_hand():
    vectors = np.array([[1, 0], [0, 1], [0.6, 0.8], [-1, 0]], dtype=np.float32)  # [N=4, d=2]
    queries = np.array([[0, 1], [1, 0]], dtype=np.float32)                       # [q=2, d]
    # [q, c]: dupes, gaps
    ids = np.array([[0, 2, 1, -1], [3, 3, -1, -1]])
    scores, top = rerank_exact(queries, ids, vectors, k=2)
    np.testing.assert_array_equal(top, [[1, 2], [3, -1]])
    np.testing.assert_allclose(scores, [[1.0, 0.8], [-1.0, -np.inf]])


def test_compressed_kinds_recall_against_flat(built, questions):
    ref = _ids(load_retriever(built["flat"]), questions)
    ivfpq = load_retriever(built["ivfpq"])
    m = ivfpq.manifest
    assert m["factory"].startswith("OPQ8_32,IVF") and m["refine"] == 4 and m["pq_m"] == 8
    assert (built["ivfpq"] / "vectors.npy").is_file()
    # A random 32-d encoder in 8 bytes is very lossy (real encoders: scripts/bench_retrieval.py);
    # re-ranking lifts recall, and re-ranking every candidate of every cell is exact search.
    pq_only = _recall(ref, _ids(load_retriever(built["ivfpq"], refine=0), questions))
    assert _recall(ref, _ids(ivfpq, questions)) > pq_only + 0.15
    deep = load_retriever(built["ivfpq"], nprobe=m["nlist"], refine=m["num_docs"] // 10 + 1)
    assert _recall(ref, _ids(deep, questions)) == 1.0
    assert _recall(ref, _ids(load_retriever(built["hnsw-sq8"]), questions)) >= 0.9
    fac = load_retriever(built["factory"])
    assert fac.manifest["search"] == {"nprobe": 32} and _recall(ref, _ids(fac, questions)) >= 0.95
    flat_bytes = built["flat"].joinpath("index.faiss").stat().st_size
    # 8-byte codes vs 128-byte vectors
    assert (built["ivfpq"] / "index.faiss").stat().st_size < flat_bytes / 2
    assert not (built["hnsw-sq8"] / "vectors.npy").exists()  # kept only where it re-ranks


def test_shards_search_as_one_index(built, questions):
    m = json.loads((built["ivf-shards"] / "manifest.json").read_text())
    assert [f["file"] for f in m["faiss_files"]] == ["index.000.faiss", "index.001.faiss",
                                                     "index.002.faiss"]
    assert sum(f["ntotal"] for f in m["faiss_files"]) == m["num_docs"]
    one, three = (load_retriever(built[k], nprobe=32) for k in ("ivf", "ivf-shards"))
    assert (_ids(three, questions) == _ids(one, questions)
            == _ids(load_retriever(built["flat"]), questions))
    assert _ids(load_retriever(built["ivf-shards"], search="nprobe=4"), questions) == _ids(
        load_retriever(built["ivf"], nprobe=4), questions)  # same trained cells, so the same probes


def test_mmap_and_in_memory_agree_and_documents_read_in_place(built, questions):
    from agentsearch.retrievers.store import MappedDocStore

    mapped, loaded = load_retriever(built["ivfpq"]), load_retriever(built["ivfpq"], mmap=False)
    assert isinstance(mapped.docs, MappedDocStore)
    assert _ids(mapped, questions) == _ids(loaded, questions)
    rows = list(read_jsonl(built["flat"] / "docs.jsonl"))
    assert len(mapped.docs) == len(rows) and mapped.docs.ids[5] == rows[5]["id"]
    assert mapped.docs.contents[-2:] == [r["contents"] for r in rows[-2:]]


def test_folder_from_before_offsets_and_sizes_still_loads(built, questions, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(built["flat"], old)
    (old / "docs.offsets.npy").unlink()
    m = json.loads((old / "manifest.json").read_text())
    for key in ("docs_bytes", "faiss_files", "encoder_check", "search", "factory"):
        m.pop(key)
    (old / "manifest.json").write_text(json.dumps(m))
    assert _ids(load_retriever(old), questions) == _ids(load_retriever(built["flat"]), questions)


def test_truncated_files_are_errors_naming_them(built, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(built["ivf-shards"], bad)
    shard = bad / "index.001.faiss"
    shard.write_bytes(shard.read_bytes()[:-100])  # a half-written copy
    with pytest.raises(RetrieverError,
                       match=r"index\.001\.faiss has .* bytes but was written with .*truncated"):
        load_retriever(bad)
    shutil.rmtree(bad)
    shutil.copytree(built["ivfpq"], bad)
    docs = bad / "docs.jsonl"
    docs.write_bytes(docs.read_bytes()[:-500])
    with pytest.raises(RetrieverError, match=r"docs\.jsonl has .* bytes but was written with"):
        load_retriever(bad)
    shutil.rmtree(bad)
    shutil.copytree(built["ivfpq"], bad)
    # right size, garbage
    (bad / "index.faiss").write_bytes(b"\0" * (bad / "index.faiss").stat().st_size)
    with pytest.raises(RetrieverError, match=r"cannot read .*index\.faiss"):
        load_retriever(bad)
    shutil.rmtree(bad)
    shutil.copytree(built["ivfpq"], bad)
    (bad / "vectors.npy").unlink()
    with pytest.raises(RetrieverError, match="refine=4 needs .*vectors.npy"):
        load_retriever(bad)
    assert load_retriever(bad, refine=0).search(["x"], 3)[0]


def test_changed_encoder_with_the_same_name_and_dim_is_an_error(built, world_path, tmp_path):
    """The encoder folder is replaced by another model of the same shape: same name, same
    dimension, different vectors. The probe catches it; without it every search is wrong."""
    enc = tmp_path / "enc-e5"
    shutil.copytree(built["encoder"], enc)
    idx = build_index(world_path / "corpus.jsonl", "dense-ivf", tmp_path / "idx", encoder=str(enc),
                      max_length=32, nlist=16, progress=False)
    assert load_retriever(idx).search(["who"], 1)[0]
    import torch
    from transformers import BertModel

    model = BertModel.from_pretrained(enc)
    torch.manual_seed(1)
    for p in model.parameters():
        p.data.normal_(0, 0.05)
    model.save_pretrained(enc)
    with pytest.raises(RetrieverError, match="no longer encodes like .*probe cosine"):
        load_retriever(idx)


def test_a_setting_the_index_lacks_is_an_error(built, world_path):
    with pytest.raises(RetrieverError, match="nprobe=8 does not apply"):
        load_retriever(built["hnsw-sq8"], search="nprobe=8")
    with pytest.raises(ValueError, match="cannot make an index from factory string 'NotAnIndex'"):
        build_index(world_path / "corpus.jsonl", "dense-factory", built["root"] / "x",
                    vectors_from=built["flat"], factory="NotAnIndex", progress=False)
    assert not (built["root"] / "x").exists()


def test_precomputed_vectors_file(built, world_path, tmp_path):
    flat = load_retriever(built["flat"])
    vecs = flat.index.reconstruct_n(0, flat.index.ntotal)
    np.save(tmp_path / "v.npy", vecs)
    idx = build_index(world_path / "corpus.jsonl", "dense-hnsw", tmp_path / "h",
                      encoder=built["encoder"], max_length=32, vectors_from=tmp_path / "v.npy",
                      progress=False)
    assert (load_retriever(idx).search(["who founded"], 3)[0][0].doc_id
            == flat.search(["who founded"], 3)[0][0].doc_id)
    np.save(tmp_path / "w.npy", vecs[:, :16].copy())
    with pytest.raises(RetrieverError, match=r"shape \(2111, 16\).*needs float32 \(2111, 32\)"):
        build_index(world_path / "corpus.jsonl", "dense-hnsw", tmp_path / "h2",
                    encoder=built["encoder"], max_length=32, vectors_from=tmp_path / "w.npy",
                    progress=False)
