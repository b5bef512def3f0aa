"""The query encoder as a shared service: ``agentsearch serve-encoder`` + ``--encoder-url``."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest
from test_retrievers_dense import save_tiny_encoder

from agentsearch.retrievers import RetrieverError, build_index, load_retriever, serve_in_thread
from agentsearch.retrievers.encoder import Encoder
from agentsearch.retrievers.encoder_service import create_encoder_app


@pytest.fixture(scope="module")
def setup(tmp_path_factory, small_world_path):
    root = tmp_path_factory.mktemp("encsvc")
    enc_dir = save_tiny_encoder(root / "tiny-e5-bert")
    index = build_index(small_world_path / "corpus.jsonl", "dense-flat", root / "flat",
                        encoder=enc_dir, max_length=64, progress=False)
    enc = Encoder(enc_dir, max_length=64)
    with serve_in_thread(create_encoder_app(enc, window_ms=20)) as url:
        yield {"index": index, "url": url, "enc": enc, "enc_dir": enc_dir}


def test_shared_service_gives_the_local_hits(setup):
    local = load_retriever(setup["index"])
    a = load_retriever(setup["index"], encoder_url=setup["url"])
    # a second worker, no model of its own
    b = load_retriever(setup["index"], encoder_url=setup["url"])
    assert not hasattr(a.encoder, "model") and "via http" in a.devices["encoder"]
    qs = ["Who founded the company?", "", "capital city of the north"]
    want = [[h.doc_id for h in hs] for hs in local.search(qs, 5)]
    assert [[h.doc_id for h in hs] for hs in a.search(qs, 5)] == want
    assert [[h.doc_id for h in hs] for hs in b.search(qs, 5)] == want


def test_concurrent_requests_share_forwards(setup):
    texts = [f"question number {i}" for i in range(24)]

    async def main():
        async with httpx.AsyncClient(base_url=setup["url"]) as c:
            before = (await c.get("/health")).json()["stats"]["query"]["batches"]
            rs = await asyncio.gather(*(c.post("/encode", json={"texts": [t]}) for t in texts))
            after = (await c.get("/health")).json()["stats"]["query"]["batches"]
            return rs, after - before

    rs, batches = asyncio.run(main())
    assert all(r.status_code == 200 for r in rs)
    assert batches < len(texts)  # coalesced: fewer forwards than requests
    import base64

    got = np.stack([np.frombuffer(base64.b64decode(r.json()["vectors"]), "<f4") for r in rs])
    np.testing.assert_allclose(got, setup["enc"].encode(texts), atol=1e-5)


def test_bad_requests_and_mismatched_services(setup, tmp_path):
    bad = httpx.post(setup["url"] + "/encode", content=b"not json")
    assert bad.status_code == 422 and "texts" in bad.json()["detail"]
    assert httpx.post(setup["url"] + "/encode",
                      json={"texts": ["a"], "kind": "image"}).status_code == 422
    huge = httpx.post(setup["url"] + "/encode", content=b" " * ((64 << 20) + 1))
    assert huge.status_code == 413 and "split the texts" in huge.json()["detail"]
    # A service with another encoder config (here: max_length) refuses to serve this index.
    with serve_in_thread(create_encoder_app(Encoder(setup["enc_dir"], max_length=32))) as other:
        with pytest.raises(RetrieverError, match="max_length: index 64 vs service 32"):
            load_retriever(setup["index"], encoder_url=other)
    with pytest.raises(RetrieverError, match="not answering GET /health.*serve-encoder"):
        load_retriever(setup["index"], encoder_url="http://127.0.0.1:9")
