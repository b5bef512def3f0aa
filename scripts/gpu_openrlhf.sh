#!/usr/bin/env bash
# agentsearch on OpenRLHF, end to end on one GPU: the `openrlhf-tiny` preset (synthetic world,
# shipped tiny-base, GRPO + HDR) through Ray + vLLM + DeepSpeed, a few steps, once with HDR and
# once with a LoRA adapter (the merged-LoRA weight sync). Results (OpenRLHF's step logs with
# replay/* and time/replay_scan, the final model) go into $OUT.
#
# Needs a machine with OpenRLHF's CUDA stack: torch with CUDA, vllm, deepspeed, flash-attn and
#   pip install openrlhf[vllm]==0.11.2 && pip install -e .[openrlhf]
# (the lent H200 of docs/design.md has no vLLM/OpenRLHF and no network: this script does not
# run there). Usage: OUT=out/openrlhf bash scripts/gpu_openrlhf.sh
set -uo pipefail
OUT=${OUT:-$PWD/out/openrlhf}
mkdir -p "$OUT"
export AGENTSEARCH_CACHE=${AGENTSEARCH_CACHE:-/tmp/agentsearch-cache} HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec > >(tee "$OUT/gpu_openrlhf.log") 2>&1
python -c "import openrlhf, vllm, deepspeed, torch; assert torch.cuda.is_available(); print('openrlhf', openrlhf.__file__)" \
  || { echo "OpenRLHF's CUDA stack is missing (see the header)"; exit 2; }
python -m agentsearch openrlhf smoke --out "$OUT/smoke" || echo "smoke failed"
ray start --head --num-gpus 1 --disable-usage-stats >/dev/null
trap 'ray stop >/dev/null' EXIT
common=(--preset openrlhf-tiny train.steps=6 train.eval.every=3 eval_questions=100)
python -m agentsearch openrlhf launch "${common[@]}" out="$OUT/hdr" && echo "hdr: ok" || echo "hdr: failed"
python -m agentsearch openrlhf launch "${common[@]}" out="$OUT/lora" train.lora.enabled=true train.lora.r=16 \
  && echo "lora: ok" || echo "lora: failed"
