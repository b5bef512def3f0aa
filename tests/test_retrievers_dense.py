"""Dense retrieval: encoders, FAISS Flat/HNSW/IVF folders, and encoder/index mismatches."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from agentsearch.data import read_jsonl
from agentsearch.retrievers import RetrieverError, build_index, load_retriever, world_index


def save_tiny_encoder(d, max_positions: int = 128) -> str:
    """A random 32-d BERT with MiniLM's tokenizer, saved to folder ``d``: encodes
    in milliseconds."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from agentsearch.retrievers.encoder import resolve_encoder

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=max_positions)
    BertModel(cfg).save_pretrained(d)
    AutoTokenizer.from_pretrained(resolve_encoder(None)[1]).save_pretrained(d)
    return str(d)


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    return save_tiny_encoder(tmp_path_factory.mktemp("enc") / "tiny-e5-bert")


@pytest.fixture(scope="module")
def tiny_indexes(tiny_encoder, small_world_path, tmp_path_factory):
    root, corpus = tmp_path_factory.mktemp("dense"), small_world_path / "corpus.jsonl"
    flat = build_index(corpus, "dense-flat", root / "flat", encoder=tiny_encoder, max_length=64,
                       progress=False)
    return {"dense-flat": flat,
            # HNSW from the flat index's stored vectors (no re-encoding); IVF encodes afresh.
            "dense-hnsw": build_index(corpus, "dense-hnsw", root / "hnsw", vectors_from=flat,
                                      progress=False),
            "dense-ivf": build_index(corpus, "dense-ivf", root / "ivf", encoder=tiny_encoder,
                                     max_length=64, progress=False)}


def test_encoder_unit_norm_and_e5_prefixes(tiny_encoder):
    from agentsearch.retrievers.encoder import Encoder

    enc = Encoder(tiny_encoder, max_length=64)
    assert (enc.query_prefix, enc.passage_prefix) == ("query: ", "passage: ")  # "e5" in the name
    texts = ["short", "a much longer text " * 20, "short"]
    v = enc.encode(texts, batch_size=2)
    assert v.shape == (3, 32) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(v[0], v[2], atol=1e-6)  # order-independent batching
    assert not np.allclose(v[0], enc.encode(["short"], kind="passage")[0])  # prefixes differ
    assert Encoder(tiny_encoder, query_prefix="", pooling="cls").pooling == "cls"


def test_dense_kinds_manifest_and_agreement(tiny_indexes, small_world_path):
    qs = [q["question"] for q in read_jsonl(small_world_path / "dev.jsonl")][:50]
    flat = load_retriever(tiny_indexes["dense-flat"])
    m = flat.manifest
    assert m["dim"] == 32 and m["index_type"] == "flat" and m["query_prefix"] == "query: "
    assert m["encoder"].endswith("tiny-e5-bert") and len(m["corpus_sha256"]) == 64
    ref = [{h.doc_id for h in hs} for hs in flat.search(qs, 10)]
    assert all(len(r) == 10 for r in ref)

    def recall(r):
        got = r.search(qs, 10)
        return np.mean([len(ref_i & {h.doc_id for h in g}) / 10 for ref_i, g in zip(ref, got)])

    hnsw = load_retriever(tiny_indexes["dense-hnsw"])
    assert {k: hnsw.manifest[k] for k in ("encoder", "dim", "query_prefix")} == {
        k: m[k] for k in ("encoder", "dim", "query_prefix")}
    assert recall(hnsw) >= 0.9
    ivf_manifest = json.loads((tiny_indexes["dense-ivf"] / "manifest.json").read_text())
    assert 1 <= ivf_manifest["nprobe"] <= ivf_manifest["nlist"]
    assert recall(load_retriever(tiny_indexes["dense-ivf"], nprobe=ivf_manifest["nlist"])) == 1.0
    assert recall(load_retriever(tiny_indexes["dense-ivf"])) > 0.3


def test_vectors_from_checks_its_source(tiny_indexes, small_world_path, world_path, tmp_path):
    with pytest.raises(RetrieverError, match="must be dense-flat or keep its exact vectors"):
        build_index(small_world_path / "corpus.jsonl", "dense-ivf", tmp_path / "a",
                    vectors_from=tiny_indexes["dense-hnsw"], progress=False)
    with pytest.raises(RetrieverError, match="different corpus"):
        build_index(world_path / "corpus.jsonl", "dense-ivf", tmp_path / "b",
                    vectors_from=tiny_indexes["dense-flat"], progress=False)
    assert not (tmp_path / "a").exists() and not list(tmp_path.iterdir())


def test_dense_edge_queries(tiny_indexes):
    r = load_retriever(tiny_indexes["dense-flat"])
    out = r.search(["", "  ", "x " * 50_000], k=10**6)  # empty, blank, 100 KB; k above N
    assert out[0] == [] and out[1] == [] and len(out[2]) == r.num_docs


def test_index_encoder_mismatch_is_a_clear_error(tiny_indexes, tmp_path):
    with pytest.raises(RetrieverError, match="built with encoder .*tiny-e5-bert.*rebuild"):
        load_retriever(tiny_indexes["dense-flat"], encoder="sentence-transformers/all-MiniLM-L6-v2")
    broken = tmp_path / "broken"
    shutil.copytree(tiny_indexes["dense-flat"], broken)
    m = json.loads((broken / "manifest.json").read_text())
    (broken / "manifest.json").write_text(
        json.dumps({**m, "encoder": "sentence-transformers/all-MiniLM-L6-v2"}))
    with pytest.raises(RetrieverError, match="384-d vectors .* 32-d"):
        load_retriever(broken)  # encoder files no longer match the stored vectors
    (broken / "manifest.json").write_text(json.dumps({**m, "dim": 384}))
    with pytest.raises(RetrieverError, match="dim 32.*dim 384"):
        load_retriever(broken)
    (broken / "index.faiss").write_bytes(b"garbage")  # the manifest knows its size
    with pytest.raises(RetrieverError, match="index.faiss has 7 bytes but was written with"):
        load_retriever(broken)


@pytest.mark.slow
def test_dense_minilm_recall_single_hop(world_path):
    """all-MiniLM-L6-v2 + exact search on the default world (cached after the first build)."""
    r = load_retriever(world_index(seed=0, kind="dense-flat", threads=2))
    qs = [q for q in read_jsonl(world_path / "test.jsonl") if q["type"] == "single"]
    hits = r.search([q["question"] for q in qs], 3)
    recall = np.mean([any(h.doc_id in q["gold_doc_ids"] for h in hs) for q, hs in zip(qs, hits)])
    assert recall >= 0.8
