"""The argument parser of the ``agentsearch`` command: its subcommands, their options and
help texts, each subcommand bound to its handler in ``agentsearch.cli.commands``."""

from __future__ import annotations

import argparse

from agentsearch.cli.commands import (
    cmd_check_env,
    cmd_demo,
    cmd_diagnose,
    cmd_eval,
    cmd_index,
    cmd_openrlhf,
    cmd_pareto,
    cmd_report,
    cmd_serve,
    cmd_serve_encoder,
    cmd_train,
    cmd_wiki_corpus,
    cmd_world,
)

DESCRIPTION = "The ``agentsearch`` command."
"""The parser's description: the first line of the command's documentation."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentsearch", description=DESCRIPTION)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("demo",
                       help="train the tiny search agent on the synthetic world (CPU, minutes)")
    s.add_argument("--preset", default="tiny",
                   help="tiny (search, the default) or tiny-math (math with a calculator); the "
                        "table says what RL changed per question type / problem kind")
    s.add_argument("--out", default=None,
                   help="run folder (default: a new runs/demo-YYYYmmdd-HHMMSS, so reruns never "
                        "collide)")
    s.add_argument("overrides", nargs="*", help="key=value overrides of the preset")
    s.set_defaults(fn=cmd_demo)

    s = sub.add_parser("train", help="GRPO (+ replay) training from a preset")
    s.add_argument("--preset", default="tiny",
                   help="preset name (agentsearch/configs/NAME.yaml) or a YAML path")
    s.add_argument("--out", help="run folder (required unless --resume)")
    s.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint")
    s.add_argument("overrides", nargs="*", help="key=value overrides, e.g. steps=50 replay=hdr")
    s.set_defaults(fn=cmd_train)

    s = sub.add_parser("eval", help="Mean@n / Best@n of a model or run on held-out questions")
    s.add_argument("--run", help="run folder (its final model, else its fp16 LoRA adapter: a kept "
                                 "record such as docs/results/real_lm/<run>)")
    s.add_argument("--model", help="model name or path when no run is given (default tiny)")
    s.add_argument("--preset", default="tiny", help="preset whose env/eval settings to use")
    s.add_argument("--split", default=None,
                   help="world split or a questions file (jsonl/parquet); default: the run's "
                        "eval.split")
    s.add_argument("--n", type=int, default=None,
                   help="samples per question (Mean@n, Best@n); default: the run's eval.n")
    s.add_argument("--limit", type=int, default=None,
                   help="evaluate N questions (0 = all; a multi-source file is sampled per source, "
                        "eval.per_source); default: the run's eval.limit")
    s.add_argument("--samples", default=None, metavar="TXT",
                   help="also write decoded episodes (the first --samples-per-type of each "
                        "question type) to this file")
    s.add_argument("--samples-per-type", type=int, default=2, metavar="K",
                   help="decoded episodes per question type in --samples (default 2)")
    s.add_argument("overrides", nargs="*", help="key=value overrides")
    s.set_defaults(fn=cmd_eval)

    s = sub.add_parser("diagnose", help="P(correct | forced search strategy, or math tool call "
                                        "on/off) per question type")
    s.add_argument("--run", help="run folder (uses its final model)")
    s.add_argument("--model", help="model name or path (default: the preset's, tiny-base)")
    s.add_argument("--preset", default="tiny", help="preset whose env settings to use")
    s.add_argument("--split", default=None, help="world split (default: the preset's eval.split)")
    s.add_argument("--limit", type=int, default=None, help="first N questions (0 = all)")
    s.add_argument("overrides", nargs="*", help="key=value overrides")
    s.set_defaults(fn=cmd_diagnose)

    s = sub.add_parser("index", help="build a retrieval index, or adopt a Search-R1 one")
    isub = s.add_subparsers(dest="index_command", metavar="ACTION")
    b = isub.add_parser("build", help="index a corpus.jsonl")
    b.add_argument("--corpus", required=True, help="JSONL rows {id, contents}")
    b.add_argument("--kind", required=True,
                   choices=["bm25", "bm25s", "dense-flat", "dense-hnsw", "dense-ivf", "dense-ivfpq",
                            "dense-hnsw-sq8", "dense-factory"])
    b.add_argument("--out", required=True, help="index folder to write")
    b.add_argument("--encoder", default=None,
                   help="dense encoder (default offline all-MiniLM-L6-v2)")
    b.add_argument("--batch-size", type=int, default=64)
    b.add_argument("--device", default="auto",
                   help="where the dense encoder runs: cpu, cuda, cuda:N or auto (cuda when torch "
                        "sees a GPU)")
    b.add_argument("--threads", type=int, default=None, help="worker threads (default: all cores)")
    b.add_argument("--vectors-from", default=None,
                   help="a dense index folder of this corpus whose vectors to reuse, or a .npy of "
                        "precomputed passage vectors of --encoder (row i = document i)")
    b.add_argument("--shards", type=int, default=None,
                   help="split a dense index into N files, searched as one")
    b.add_argument("--nlist", type=int, default=None, help="IVF cells (default ~4 sqrt(N))")
    b.add_argument("--nprobe", type=int, default=None,
                   help="IVF cells searched per query (query-time)")
    b.add_argument("--pq-m", type=int, default=None,
                   help="dense-ivfpq: bytes per vector (default dim/4)")
    b.add_argument("--refine", type=int, default=None,
                   help="dense-ivfpq: re-score REFINE*k candidates exactly from vectors.npy "
                        "(default 4; 0: off)")
    b.add_argument("--hnsw-m", type=int, default=None, help="HNSW links per node (default 32)")
    b.add_argument("--ef-search", type=int, default=None,
                   help="HNSW candidates per query (query-time)")
    b.add_argument("--factory", default=None, help="dense-factory: a FAISS index factory string")
    b.add_argument("--search", default=None,
                   help="dense-factory: query-time settings, e.g. nprobe=64")
    b = isub.add_parser("plan", help="advice: memory, build time, recall and latency of each dense "
                                     "index kind for a corpus size, extrapolated from measured "
                                     "curves")
    b.add_argument("--vectors", required=True, help="number of passages, e.g. 21e6")
    b.add_argument("--dim", type=int, required=True, help="encoder dimension (e5-base: 768)")
    b.add_argument("--ram", default=None,
                   help="memory for the index, e.g. 16G: marks which kinds fit")
    b.add_argument("--curves", default=None,
                   help="measured curves (default: the shipped plan_curves.json)")
    b.add_argument("--json", action="store_true", help="print one JSON object")
    b = isub.add_parser("adopt", help="wrap a Search-R1 index (FAISS file or Pyserini folder) as "
                                      "an index folder that `agentsearch serve` opens")
    src = b.add_mutually_exclusive_group(required=True)
    src.add_argument("--faiss", help="Search-R1's FAISS file (e5_Flat.index, e5_HNSW64.index)")
    src.add_argument("--lucene", help="Search-R1's Pyserini/Lucene BM25 index folder (bm25/)")
    b.add_argument("--corpus", required=True,
                   help="the corpus jsonl the index was built from (wiki-18.jsonl), rows in index "
                        "order")
    b.add_argument("--encoder", default=None,
                   help="--faiss: the encoder the vectors came from, a HF name or folder "
                        "(intfloat/e5-base-v2)")
    b.add_argument("--pooling", choices=["mean", "cls"], default="mean",
                   help="--faiss: the encoder's pooling (Search-R1 uses mean)")
    b.add_argument("--max-length", type=int, default=256,
                   help="--faiss: query tokens (Search-R1: 256)")
    b.add_argument("--query-prefix", default=None,
                   help="--faiss: text before each query (default Search-R1's rule: 'query: ' for "
                        "e5, the bge instruction for bge, else none)")
    b.add_argument("--passage-prefix", default=None,
                   help="--faiss: recorded passage prefix (e5: 'passage: ')")
    b.add_argument("--out", default=None, help="index folder to write (default: beside the source, "
                                               "NAME-agentsearch)")
    b.add_argument("--copy", action="store_true",
                   help="copy the FAISS file / Lucene folder into --out instead of linking to it")
    s.set_defaults(fn=cmd_index)

    s = sub.add_parser("serve", help="serve an index over HTTP (Search-R1 /retrieve protocol)")
    s.add_argument("--index", required=True, nargs="+", help="index folder(s); two = hybrid (RRF)")
    s.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--device", default="cpu",
                   help="where dense queries are encoded: cpu, cuda, cuda:N or auto; cuda also "
                        "puts a Flat/IVF FAISS index on the GPU when FAISS has GPU support")
    s.add_argument("--max-queries", type=int, default=16384,
                   help="queries per request cap (Search-R1 sends a whole turn: 512 x 5 = 2,560)")
    s.add_argument("--max-topk", type=int, default=100, help="topk cap")
    s.add_argument("--max-query-chars", type=int, default=4096, help="characters per query cap")
    s.add_argument("--max-body-mb", type=float, default=64, help="request body cap in MiB")
    s.add_argument("--search-batch", type=int, default=256,
                   help="queries per internal search call: a large request is searched in chunks "
                        "of this size, which bounds the search's memory")
    s.add_argument("--batch-window-ms", type=float, default=None,
                   help="coalesce concurrent requests into one search: a request arriving while a "
                        "search runs waits at most this long for company (default 2; 0: off)")
    s.add_argument("--max-inflight", type=int, default=512,
                   help="requests admitted and not yet answered; past it a request gets 503 + "
                        "Retry-After at once, before its body is read (default takes 256 "
                        "concurrent clients)")
    s.add_argument("--max-inflight-queries", type=int, default=None,
                   help="queries admitted and not yet answered (default: --max-queries + "
                        "--max-inflight, one largest request beside a full house of single-query "
                        "ones); past it: 503")
    s.add_argument("--max-inflight-body-mb", type=float, default=None,
                   help="request bodies being read or held, MiB (default: 4 x --max-body-mb); past "
                        "it: 503")
    s.add_argument("--threads", type=int, default=None,
                   help="search threads (torch/FAISS/numba/Java)")
    s.add_argument("--search", default=None,
                   help="dense query-time settings over the stored ones, e.g. nprobe=64 or "
                        "efSearch=256")
    s.add_argument("--refine", type=int, default=None,
                   help="dense: exact re-ranking depth (0: off)")
    s.add_argument("--no-mmap", action="store_true",
                   help="read dense FAISS files into memory instead of memory-mapping them")
    s.add_argument("--encoder-url", default=None,
                   help="dense: encode queries in this encoder service (agentsearch "
                        "serve-encoder), shared with other servers, instead of loading the model "
                        "here")
    s.set_defaults(fn=cmd_serve)

    s = sub.add_parser("serve-encoder", help="serve a query encoder over HTTP, shared by several "
                                             "`serve --encoder-url` processes")
    s.add_argument("--encoder", default=None,
                   help="model name or folder (default: the offline all-MiniLM-L6-v2)")
    s.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    s.add_argument("--port", type=int, default=8100)
    s.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
    s.add_argument("--threads", type=int, default=None, help="torch threads")
    s.add_argument("--pooling", default=None, help="mean or cls (default: the model's, else mean)")
    s.add_argument("--query-prefix", default=None,
                   help="default: 'query: ' for e5 models, else none")
    s.add_argument("--passage-prefix", default=None,
                   help="default: 'passage: ' for e5 models, else none")
    s.add_argument("--max-length", type=int, default=256, help="tokens per text")
    s.add_argument("--batch-window-ms", type=float, default=2.0,
                   help="a request arriving while a forward runs waits at most this long for "
                        "company")
    s.set_defaults(fn=cmd_serve_encoder)

    s = sub.add_parser("pareto", help="quality-vs-wall-clock per method, frontier, time to target, "
                                      "replay diagnostics")
    s.add_argument("runs", nargs="+", help="run folders (metrics.jsonl inside)")
    s.add_argument("--out", default=None,
                   help="X.png: the plot plus X.json, X.md, X_*.csv and X_replay.png beside it; "
                        "a folder: the same named pareto*; X.json: the JSON summary only")
    _add_method_args(s, "how runs group into methods: auto (from config.yaml: replay.kind, loss, "
                        "prompts_per_step, dynamic_sampling; configs that differ in anything but "
                        "the seed get the differing keys appended, hdr[lr=0.001]), dir (folder "
                        "name without -sN), or comma-separated config keys (replay.kind,"
                        "replay.tau)")
    s.add_argument("--target-method", default=None,
                   help="the baseline whose final score is the target (default on_policy_larger, "
                        "else the best on-policy method)")
    s.add_argument("--target-score", type=float, default=None,
                   help="a target score instead of the baseline's final (ratios stay relative to "
                        "the baseline's training wall-clock)")
    s.set_defaults(fn=cmd_pareto)

    s = sub.add_parser("report", help="one self-contained HTML page of one run or several: "
                                      "curves, time to target, phases, replay, health, episodes")
    s.add_argument("runs", nargs="+", help="run folders (also runs still being written, and "
                                           "OpenRLHF runs)")
    s.add_argument("--out", default=None,
                   help="HTML file to write (default: RUN/report.html for one run, report.html "
                        "for several)")
    _add_method_args(s, "how runs group into methods (as `agentsearch pareto`): auto, dir, or "
                        "comma-separated config keys")
    s.add_argument("--target", type=float, default=None,
                   help="the score for time to target (default: the best run's score at half "
                        "its training time; the page can change it)")
    s.set_defaults(fn=cmd_report)

    s = sub.add_parser("check-env", help="run Gymnasium's check_env and our checks on env ids")
    s.add_argument("ids", nargs="*", help="env ids (default: every agentsearch/* id)")
    s.add_argument("--fuzz", type=int, default=0, metavar="N",
                   help="also play N seeded adversarial actions per env and setting, checking "
                        "every step")
    s.set_defaults(fn=cmd_check_env)

    s = sub.add_parser("openrlhf", help="run on OpenRLHF (Ray + vLLM + DeepSpeed): launch, smoke")
    osub = s.add_subparsers(dest="openrlhf_command", metavar="ACTION", required=True)
    o = osub.add_parser("launch", help="build (and run) OpenRLHF's train_ppo_ray from a preset")
    o.add_argument("--preset", default="openrlhf-tiny",
                   help="an openrlhf-* preset or any training preset")
    o.add_argument("overrides", nargs="*",
                   help="key=value (train.replay.k_rep=64, vllm_engines=4, out=...)")
    o.add_argument("--dry-run", action="store_true",
                   help="write the run folder's files, print the command")
    o.set_defaults(fn=cmd_openrlhf)
    o = osub.add_parser("smoke", help="one CPU round of the real pieces; prints one JSON line")
    o.add_argument("--out", default=None, help="work folder (default: a temporary one)")
    o.add_argument("--prompts", type=int, default=4, help="prompts per round")
    o.add_argument("--n", type=int, default=4, help="samples per prompt")
    o.set_defaults(fn=cmd_openrlhf)

    s = sub.add_parser("world", help="generate a synthetic search world")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", required=True, help="folder for corpus.jsonl and train/dev/test.jsonl")
    s.add_argument("--entities", type=int, default=None, help="primary entities (default 1400)")
    s.add_argument("--questions", choices=["default", "chains", "keychain"], default="default",
                   help="single/bridge/comparison questions, k-hop chains (k=1-4) over the same "
                        "corpus, or a key-chain world (its own corpus; chains of 1-6 keys)")
    s.set_defaults(fn=cmd_world)

    s = sub.add_parser("wiki-corpus",
                       help="convert the offline Wikipedia summaries to corpus.jsonl")
    s.add_argument("--out", required=True, help="corpus.jsonl to write")
    s.set_defaults(fn=cmd_wiki_corpus)
    return p


def _add_method_args(s, label_help: str) -> None:
    """``--metric`` and ``--label-by``: how ``pareto`` and ``report`` read and group runs."""
    s.add_argument("--metric", default="eval/mean_at_n", help="quality metric (y axis)")
    s.add_argument("--label-by", default="auto", help=label_help)
