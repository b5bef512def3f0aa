"""Benchmark the replay scan: throughput, cost vs buffer size, peak memory.

Prints one JSON line per comparison:

- ``scan_throughput``: ``HeadroomDriftBuffer.select`` with ``make_score_fn`` (every group
  passes the gate, k_rep = all groups) in scored tokens/s, next to a plain batched
  forward pass (``model(ids).logits``) of the same model over the same tokens in the same
  batches. Target: ratio >= 0.8.
- ``select_vs_capacity``: time of one ``select`` for buffers of 64...4096 groups at a fixed
  k_rep, with a share ``--pass-frac`` of groups passing the gate (the paper's tau = 1e-2
  accepted ~40%). Early termination keeps it roughly flat.
- ``scan_peak_memory``: peak memory of scoring one scan chunk with ``make_score_fn`` vs a
  naive scan that materialises full-vocabulary fp32 logits (and their log_softmax) for the
  whole chunk. On CPU each is measured in a fresh subprocess (peak RSS growth, Linux);
  on CUDA with ``torch.cuda.max_memory_allocated``.

Groups are synthetic (random tokens, a shared prompt, ragged responses with an
environment observation inside); "passing" groups carry the model's own logprobs as
generation logprobs, the others get them perturbed (drift ~0.09 > tau).

    python scripts/bench_replay.py                      # defaults: tiny model, 1 thread
    python scripts/bench_replay.py --model small --threads 2 --only throughput
    python scripts/bench_replay.py --device cuda --model small --groups 256 --n 16
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from agentsearch.core.provenance import ALLOW_DIRTY_HELP, require_clean
from agentsearch.models import load_model
from agentsearch.models.logprobs import make_score_fn, token_logprobs
from agentsearch.replay import HeadroomDriftBuffer, ReplayGroup

TAU = 1e-2


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny",
                    help="tiny, tiny-s, small, a model folder, or a random-init shape: "
                         "qwen2-0.5b (151,936-token vocabulary)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--groups", type=int, default=32, help="groups scanned in the throughput run")
    ap.add_argument("--n", type=int, default=8, help="responses per group")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--resp-len", type=int, default=96, help="longest response (tokens)")
    ap.add_argument("--scan-chunk", type=int, default=16)
    ap.add_argument("--max-batch-tokens", type=int, default=8192)
    ap.add_argument("--chunk-tokens", type=int, default=1024)
    ap.add_argument("--k-rep", type=int, default=16, help="replay budget for select_vs_capacity")
    ap.add_argument("--capacities", default="64,256,1024,4096")
    ap.add_argument("--pass-frac", type=float, default=0.4)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--only", default="throughput,capacity,memory")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    ap.add_argument("--_memory-child", dest="memory_child", default=None, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


# random-init shapes of real models (nothing is downloaded): a realistic vocabulary matters
# here, since full-vocab logits are what the chunked scorer avoids
SHAPES = {"qwen2-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                             num_attention_heads=14, num_key_value_heads=2, vocab_size=151936)}


def setup(args):
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    if args.model in SHAPES:
        from transformers import Qwen2Config, Qwen2ForCausalLM

        torch.manual_seed(args.seed)
        with torch.device(args.device):
            model = Qwen2ForCausalLM(Qwen2Config(tie_word_embeddings=True, **SHAPES[args.model]))
        return model.to(dtype).eval()
    model, _ = load_model(args.model, seed=args.seed, dtype=dtype)
    return model.to(args.device).eval()


def synth_groups(model, args, count, *, true_logprobs=True, seed=0):
    """`count` distinct groups; gen_logprobs are the model's own when true_logprobs."""
    g = torch.Generator().manual_seed(seed)
    n, P, R = args.n, args.prompt_len, args.resp_len
    T, V = P + R, model.config.vocab_size
    env = slice(P + R // 3, P + R // 3 + max(1, R // 8))  # an environment observation
    out = []
    for k in range(count):
        ids = torch.randint(0, V, (n, T), generator=g)
        ids[:, :P] = ids[0, :P]
        ends = torch.randint(P + R // 2, T + 1, (n,), generator=g)
        mask = (torch.arange(T) >= P) & (torch.arange(T)[None] < ends[:, None])  # [n, T]
        mask[:, env] = False
        lp = torch.zeros(n, T)
        if true_logprobs:
            with torch.no_grad():
                lp = token_logprobs(model, ids.to(args.device), None,
                                    chunk_tokens=args.chunk_tokens).float().cpu()
        rewards = (torch.arange(n) % 2).float()
        out.append(ReplayGroup(prompt_id=k, token_ids=ids, action_mask=mask, gen_logprobs=lp,
                               advantages=rewards - rewards.mean(), rewards=rewards,
                               answer_correct=None, born_step=0))
    return out


def perturbed(group, pid, noise, g):
    """A copy of `group` (shared token tensors) with gen_logprobs moved by N(0, noise)."""
    lp = group.gen_logprobs + noise * torch.randn(group.gen_logprobs.shape, generator=g) if noise \
        else group.gen_logprobs
    return ReplayGroup(prompt_id=pid, token_ids=group.token_ids, action_mask=group.action_mask,
                       gen_logprobs=lp, advantages=group.advantages, rewards=group.rewards,
                       answer_correct=None, born_step=0)


def sync(args):
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()


def rows_of(groups):
    """(ids, length) of every row cut after its last policy token: the tokens scored."""
    rows = []
    for grp in groups:
        for i in range(grp.n):
            pos = grp.action_mask[i].nonzero()
            if len(pos):
                L = int(pos.max()) + 1
                rows.append(grp.token_ids[i, :L].long())
    return sorted(rows, key=len, reverse=True)


def batches_of(rows, max_batch_tokens):
    """The same packing make_score_fn uses: longest first, rows x longest <= budget."""
    out, s = [], 0
    while s < len(rows):
        size = max(1, min(len(rows) - s, max_batch_tokens // len(rows[s])))
        ids = torch.zeros(size, len(rows[s]), dtype=torch.long)
        attn = torch.zeros_like(ids)
        for b, r in enumerate(rows[s:s + size]):
            ids[b, :len(r)], attn[b, :len(r)] = r, 1
        out.append((ids, attn))
        s += size
    return out


def bench_throughput(model, args):
    groups = synth_groups(model, args, args.groups, true_logprobs=False, seed=args.seed)
    tokens = sum(len(r) for r in rows_of(groups))
    score = make_score_fn(model, max_batch_tokens=args.max_batch_tokens,
                          chunk_tokens=args.chunk_tokens)
    batches = batches_of(rows_of(groups), args.max_batch_tokens)

    def scan():
        buf = HeadroomDriftBuffer(capacity=len(groups), k_rep=len(groups), tau=float("inf"),
                                  scan_chunk=args.scan_chunk)
        buf.add(groups, step=0)
        sync(args)
        t = time.perf_counter()
        sel = buf.select(score, step=1)
        sync(args)
        assert len(sel.accepted) == len(groups)
        return time.perf_counter() - t

    def forward():
        sync(args)
        t = time.perf_counter()
        with torch.no_grad():
            for ids, attn in batches:
                _ = model(input_ids=ids.to(args.device), attention_mask=attn.to(args.device)).logits
        sync(args)
        return time.perf_counter() - t

    scan(), forward()  # warm-up
    ts, tf = [], []
    for _ in range(args.repeats):  # interleaved, so background load hits both alike
        ts.append(scan())
        tf.append(forward())
    s, f = statistics.median(ts), statistics.median(tf)
    return {"bench": "scan_throughput", "model": args.model, "device": args.device,
            "dtype": args.dtype, "threads": args.threads, "groups": len(groups), "n": args.n,
            "tokens": tokens, "policy_tokens": sum(g.num_policy_tokens for g in groups),
            "scan_s": round(s, 4), "forward_s": round(f, 4),
            "scan_tokens_per_s": round(tokens / s), "forward_tokens_per_s": round(tokens / f),
            "ratio": round(f / s, 3), "target_ratio": 0.8}


def bench_capacity(model, args):
    capacities = [int(c) for c in args.capacities.split(",")]
    templates = synth_groups(model, args, 64, true_logprobs=True, seed=args.seed + 1)
    g = torch.Generator().manual_seed(args.seed)
    score = make_score_fn(model, max_batch_tokens=args.max_batch_tokens,
                          chunk_tokens=args.chunk_tokens)
    times, scanned, accepted = [], [], []
    for cap in capacities:
        buf = HeadroomDriftBuffer(capacity=cap, k_rep=args.k_rep, tau=TAU,
                                  scan_chunk=args.scan_chunk)
        passes = torch.rand(cap, generator=g) < args.pass_frac
        buf.add([perturbed(templates[i % len(templates)], i, 0.0 if passes[i] else 0.3, g)
                 for i in range(cap)], step=0)
        ts = []
        for r in range(args.repeats):
            sync(args)
            t = time.perf_counter()
            sel = buf.select(score, step=1 + r)
            sync(args)
            ts.append(time.perf_counter() - t)
        times.append(round(statistics.median(ts), 4))
        scanned.append(sel.scanned)
        accepted.append(len(sel.accepted))
    return {"bench": "select_vs_capacity", "model": args.model, "device": args.device,
            "threads": args.threads, "k_rep": args.k_rep, "tau": TAU, "pass_frac": args.pass_frac,
            "scan_chunk": args.scan_chunk, "capacity": capacities, "select_s": times,
            "scanned": scanned, "accepted": accepted,
            "ms_per_scanned_group": [round(1000 * t / max(n, 1), 1)
                                     for t, n in zip(times, scanned, strict=True)],
            "max_over_min_time": round(max(times) / min(times), 2)}


def _status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


MEMORY_METHODS = ("scan", "scan_one_batch", "body_only", "naive")


def measure_memory(model, args, method):
    """Peak memory (MB) of scoring one scan chunk with `method` (one of MEMORY_METHODS).

    ``scan``: make_score_fn as configured; ``scan_one_batch``: make_score_fn with the
    whole chunk in one batch, like the naive scan; ``body_only``: the decoder body alone
    on that batch (the floor); ``naive``: full logits, fp32, log_softmax, gather.
    """
    groups = synth_groups(model, args, args.scan_chunk, true_logprobs=False, seed=args.seed)
    batch = batches_of(rows_of(groups), 10**12)[0]  # the whole chunk at once
    budget = args.max_batch_tokens if method == "scan" else 10**12
    score = make_score_fn(model, max_batch_tokens=budget, chunk_tokens=args.chunk_tokens)

    def run():
        if method.startswith("scan"):
            score(groups)
            return
        ids, attn = (t.to(args.device) for t in batch)
        with torch.no_grad():
            if method == "body_only":
                model.get_decoder()(input_ids=ids, attention_mask=attn)
                return
            logits = model(input_ids=ids, attention_mask=attn).logits.float()
            logits.log_softmax(-1)[:, :-1].gather(-1, ids[:, 1:, None])

    gc.collect()
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        run()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    with torch.no_grad():  # load kernels and lazily built state before measuring
        model(input_ids=torch.zeros(1, 8, dtype=torch.long, device=args.device))
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed set-up memory back first
    except (OSError, AttributeError):
        pass
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak-RSS high-water mark (Linux >= 4.0)
    base = _status_kb("VmRSS")
    run()
    return (_status_kb("VmHWM") - base) / 1024


def bench_memory(args, argv):
    if args.device.startswith("cuda"):
        model = setup(args)
        mb = {m: measure_memory(model, args, m) for m in MEMORY_METHODS}
        mb["vocab"] = model.config.vocab_size
    else:  # one fresh process per method, so none sees another's freed pages
        mb = {}
        for m in MEMORY_METHODS:
            out = subprocess.run([sys.executable, __file__, *argv, "--_memory-child", m],
                                 capture_output=True, text=True, check=True)
            res = json.loads(out.stdout.strip().splitlines()[-1])
            mb[m], mb["vocab"] = res["mb"], res["vocab"]
    rows = args.scan_chunk * args.n
    T = args.prompt_len + args.resp_len
    vocab = mb.get("vocab")
    return {"bench": "scan_peak_memory", "model": args.model, "device": args.device,
            "chunk_groups": args.scan_chunk, "rows": rows, "max_len": T,
            "max_batch_tokens": args.max_batch_tokens, "chunk_tokens": args.chunk_tokens,
            "scan_mb": round(mb["scan"], 1), "scan_one_batch_mb": round(mb["scan_one_batch"], 1),
            "body_only_mb": round(mb["body_only"], 1),
            "naive_full_logits_mb": round(mb["naive"], 1),
            "full_logits_fp32_mb_estimate": (round(rows * T * vocab * 4 / 2**20, 1)
                                             if vocab else None),
            "naive_over_scan": round(mb["naive"] / max(mb["scan"], 1e-6), 1),
            "naive_over_scan_one_batch": round(mb["naive"] / max(mb["scan_one_batch"], 1e-6), 1)}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.memory_child:
        model = setup(args)
        print(json.dumps({"mb": measure_memory(model, args, args.memory_child),
                          "vocab": model.config.vocab_size}))
        return
    prov = {"provenance": require_clean("bench_replay", args.allow_dirty)}
    only = set(args.only.split(","))
    model = setup(args) if only & {"throughput", "capacity"} else None
    if "throughput" in only:
        print(json.dumps({**bench_throughput(model, args), **prov}), flush=True)
    if "capacity" in only:
        print(json.dumps({**bench_capacity(model, args), **prov}), flush=True)
    if "memory" in only:
        print(json.dumps({**bench_memory(args, argv), **prov}), flush=True)


if __name__ == "__main__":
    main()
