"""``agentsearch index adopt``: Search-R1's prebuilt indexes (a FAISS file written by
``faiss.write_index`` + its corpus jsonl; a Pyserini/Lucene folder) served unchanged; and
``--device`` for dense ``index build`` and ``serve``."""

from __future__ import annotations

import json
import shutil
import warnings

import httpx
import numpy as np
import pytest
from test_retrievers_dense import save_tiny_encoder

from agentsearch.cli import build_parser, main
from agentsearch.data import read_jsonl
from agentsearch.retrievers import RetrieverError, build_index, load_retriever, serve_in_thread


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    # 512 positions: the defaults (256 tokens, Search-R1's too) work without --max-length
    return save_tiny_encoder(tmp_path_factory.mktemp("enc") / "tiny-e5-bert", max_positions=512)


@pytest.fixture(scope="module")
def corpus(small_world_path):
    return small_world_path / "corpus.jsonl"


@pytest.fixture(scope="module")
def questions(small_world_path):
    return [q["question"] for q in read_jsonl(small_world_path / "dev.jsonl")][:60]


@pytest.fixture(scope="module")
def ours(tiny_encoder, corpus, tmp_path_factory):
    """Our own dense-flat build of the corpus, through the command line on --device cpu."""
    out = tmp_path_factory.mktemp("ours") / "flat"
    assert main(["index", "build", "--corpus", str(corpus), "--kind", "dense-flat", "--out",
                 str(out), "--encoder", tiny_encoder, "--device", "cpu", "--threads", "1"]) == 0
    return out


def search_r1_faiss_file(vectors: np.ndarray, path, factory: str = "Flat") -> str:
    """What Search-R1's index_builder.py writes: index_factory(dim, "Flat" | "HNSW64",
    METRIC_INNER_PRODUCT), the corpus's vectors in row order, faiss.write_index."""
    import faiss

    index = faiss.index_factory(vectors.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    index.add(vectors)
    faiss.write_index(index, str(path))
    return str(path)


@pytest.fixture(scope="module")
def vectors(ours):
    import faiss

    index = faiss.read_index(str(ours / "index.faiss"))
    return index.reconstruct_n(0, index.ntotal)  # the same vectors our build encoded


def test_adopted_faiss_serves_the_same_hits_as_our_build(ours, vectors, corpus, tiny_encoder,
                                                         questions, tmp_path, capsys):
    faiss_file = search_r1_faiss_file(vectors, tmp_path / "e5_Flat.index")
    out = tmp_path / "adopted"
    assert main(["index", "adopt", "--faiss", faiss_file, "--corpus", str(corpus), "--encoder",
                 tiny_encoder, "--out", str(out)]) == 0
    assert "agentsearch serve --index" in capsys.readouterr().out
    assert ((out / "index.faiss").is_symlink()
            and (out / "index.faiss").resolve() == (tmp_path / "e5_Flat.index"))
    m = json.loads((out / "manifest.json").read_text())
    # Search-R1's e5 settings
    assert (m["kind"], m["dim"], m["pooling"], m["query_prefix"], m["passage_prefix"],
            m["max_length"]) == ("dense-flat", 32, "mean", "query: ", "passage: ", 256)
    mine, adopted = load_retriever(ours, threads=1), load_retriever(out, threads=1)
    assert m["corpus_sha256"] == mine.manifest["corpus_sha256"]
    a, b = mine.search(questions, 5), adopted.search(questions, 5)
    assert [[h.doc_id for h in hs] for hs in a] == [[h.doc_id for h in hs] for hs in b]
    assert [[h.score for h in hs] for hs in a] == [[h.score for h in hs] for hs in b]
    # and through `agentsearch serve` with Search-R1's request
    from agentsearch.retrievers.server import app_from_args

    app, _ = app_from_args(
        build_parser().parse_args(["serve", "--index", str(out), "--threads", "1"]))
    with serve_in_thread(app) as url:
        got = httpx.post(url + "/retrieve",
                         json={"queries": questions, "topk": 3, "return_scores": True},
                         timeout=60).json()["result"]
    assert ([[it["document"]["id"] for it in items] for items in got]
            == [[h.doc_id for h in hs[:3]] for hs in b])
    # a second adopt replaces the folder; --copy makes it self-contained
    assert main(["index", "adopt", "--faiss", faiss_file, "--corpus", str(corpus), "--encoder",
                 tiny_encoder, "--out", str(out), "--copy"]) == 0
    assert not (out / "index.faiss").is_symlink() and (tmp_path / "e5_Flat.index").is_file()
    assert load_retriever(out, threads=1).search(questions[:5], 5) == b[:5]


def test_adopted_hnsw_keeps_its_search_parameters(vectors, corpus, tiny_encoder, questions, ours,
                                                  tmp_path):
    from agentsearch.retrievers import adopt_faiss

    faiss_file = search_r1_faiss_file(vectors, tmp_path / "e5_HNSW64.index", "HNSW64")
    out = adopt_faiss(faiss_file, corpus, tiny_encoder)  # default --out: beside the file
    assert out == tmp_path / "e5_HNSW64-agentsearch"
    r = load_retriever(out, threads=1)
    # FAISS's default, as Search-R1 serves it
    assert r.manifest["kind"] == "dense-hnsw" and r.manifest["ef_search"] == 16
    exact = load_retriever(ours, threads=1).search(questions, 1)
    assert np.mean([x[0].doc_id == y[0].doc_id
                    for x, y in zip(exact, r.search(questions, 1))]) >= 0.9


def test_adopt_refuses_mismatches_in_one_line(vectors, corpus, tiny_encoder, tmp_path, capsys):
    faiss_file = search_r1_faiss_file(vectors, tmp_path / "e5_Flat.index")
    short = tmp_path / "short.jsonl"
    short.write_text("".join(corpus.read_text().splitlines(keepends=True)[:-1]))
    out = tmp_path / "out"

    def adopt(*flags: str) -> str:
        assert main(["index", "adopt", "--out", str(out), *flags]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and not out.exists()
        return err

    n = len(vectors)
    assert f"holds {n:,} vectors but {short} has {n - 1:,} rows" in adopt(
        "--faiss", faiss_file, "--corpus", str(short), "--encoder", tiny_encoder)
    assert ("holds 32-d vectors but encoder 'sentence-transformers/all-MiniLM-L6-v2' makes 384-d"
            in adopt("--faiss", faiss_file, "--corpus", str(corpus), "--encoder", "minilm"))
    assert "--faiss needs --encoder" in adopt("--faiss", faiss_file, "--corpus", str(corpus))
    (tmp_path / "junk.index").write_bytes(b"not a faiss file")
    assert "cannot read" in adopt("--faiss", str(tmp_path / "junk.index"), "--corpus", str(corpus),
                                  "--encoder", tiny_encoder)
    assert "not found" in adopt("--faiss", str(tmp_path / "none.index"), "--corpus", str(corpus),
                                "--encoder", tiny_encoder)
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["index", "adopt", "--out", str(out), "--faiss", faiss_file, "--corpus",
                 str(corpus), "--encoder", tiny_encoder]) == 2
    assert "not an index folder" in capsys.readouterr().err and (out / "notes.txt").exists()


def test_search_r1_prefix_rule():
    from agentsearch.retrievers.adopt import BGE_QUERY_PREFIX, search_r1_prefixes

    assert search_r1_prefixes("intfloat/e5-base-v2") == ("query: ", "passage: ")
    assert search_r1_prefixes("BAAI/bge-large-en-v1.5") == (BGE_QUERY_PREFIX, "")
    assert search_r1_prefixes("/models/contriever") == ("", "")


@pytest.mark.pyserini
@pytest.mark.slow
def test_adopted_lucene_folder_serves_the_same_hits(corpus, questions, world_path, tmp_path,
                                                    monkeypatch):
    pytest.importorskip("pyserini")
    monkeypatch.setenv("AGENTSEARCH_JAVA_THREADS", "2")
    ours = build_index(corpus, "bm25", tmp_path / "ours", threads=1, progress=False)
    # Search-R1's bm25/ folder: Pyserini's JsonCollection index of the corpus, no raw documents
    pyserini_dir = shutil.copytree(ours / "lucene", tmp_path / "search-r1" / "bm25")
    out = tmp_path / "adopted"
    assert main(["index", "adopt", "--lucene", str(pyserini_dir), "--corpus", str(corpus), "--out",
                 str(out)]) == 0
    assert (out / "lucene").is_symlink()
    a, b = load_retriever(ours, threads=1), load_retriever(out, threads=1)
    assert b.manifest["kind"] == "bm25" and (b.manifest["k1"], b.manifest["b"]) == (0.9, 0.4)
    assert a.search(questions, 5) == b.search(questions, 5)
    with pytest.raises(RetrieverError, match="holds .* documents but .* rows"):
        from agentsearch.retrievers import adopt_lucene

        adopt_lucene(pyserini_dir, world_path / "corpus.jsonl", tmp_path / "wrong")


# -- --device --------------------------------------------------------------------------------
def test_device_cpu_and_auto_resolve_here():
    import torch

    from agentsearch.retrievers.encoder import resolve_device

    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="cpu, cuda, auto"):
        resolve_device("tpu")


def test_serve_device_cpu_reports_where_it_searches(ours):
    from agentsearch.retrievers.server import app_from_args

    app, r = app_from_args(build_parser().parse_args(["serve", "--index", str(ours), "--device",
                                                      "cpu"]))
    assert r.devices == {"encoder": "cpu", "faiss": "cpu"} and r.batch_size == 16
    with serve_in_thread(app) as url:
        assert httpx.get(url + "/health").json()["devices"] == {"encoder": "cpu", "faiss": "cpu"}


def test_device_cuda_without_cuda_is_a_clear_error(ours, corpus, tiny_encoder, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["index", "build", "--corpus", str(corpus), "--kind", "dense-flat", "--out",
                 str(tmp_path / "x"), "--encoder", tiny_encoder, "--device", "cuda"]) == 2
    assert "--device cuda: torch" in capsys.readouterr().err and not (tmp_path / "x").exists()
    from agentsearch.retrievers.server import main as serve_main

    a = build_parser().parse_args(["serve", "--index", str(ours), "--device", "cuda"])
    assert serve_main(a) == 2
    err = capsys.readouterr().err
    assert "sees no CUDA GPU; use --device cpu" in err and len(err.strip().splitlines()) == 1


def test_faiss_without_gpu_support_warns_and_searches_on_cpu():
    import faiss

    from agentsearch.retrievers.dense import _to_device

    if faiss.get_num_gpus() > 0:
        pytest.skip("this FAISS has GPU support")
    index = faiss.IndexFlatIP(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        moved, where = _to_device(faiss, index, "cuda")
    assert moved is index and where == "cpu"
    assert "no GPU support" in str(caught[0].message) and "faiss-gpu" in str(caught[0].message)
