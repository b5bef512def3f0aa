#!/usr/bin/env bash
# agentsearch on OpenRLHF, end to end on one GPU, in under 10 minutes: the `openrlhf-tiny`
# preset (synthetic world, shipped tiny-base, GRPO + HDR) through Ray + vLLM + DeepSpeed, a few
# steps with HDR and a few with a LoRA adapter (the adapter sync to vLLM's LoRA), after the
# CPU smoke round. Prints ONE JSON line (also in $OUT/gpu_openrlhf.json): the smoke's numbers
# and, per run, its steps, last eval, training seconds and replay counts from the run's
# metrics.jsonl. Logs go to $OUT/gpu_openrlhf.log.
#
# Needs OpenRLHF's CUDA stack: torch with CUDA, vllm, deepspeed, flash-attn and
#   pip install openrlhf[vllm]==0.11.2 && pip install -e .[openrlhf]
# (a machine without it prints {"stack": "missing", ...} and exits 2).
# Usage: OUT=out/openrlhf bash scripts/gpu_openrlhf.sh
set -uo pipefail
OUT=${OUT:-$PWD/out/openrlhf}
mkdir -p "$OUT"
export AGENTSEARCH_CACHE=${AGENTSEARCH_CACHE:-/tmp/agentsearch-cache} HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
LOG="$OUT/gpu_openrlhf.log"
if ! python -c "import openrlhf, vllm, deepspeed, torch; assert torch.cuda.is_available()" >>"$LOG" 2>&1; then
  echo '{"stack": "missing", "needs": "torch+CUDA, vllm, deepspeed, openrlhf==0.11.2"}' | tee "$OUT/gpu_openrlhf.json"
  exit 2
fi
timeout 150 python -m agentsearch openrlhf smoke --out "$OUT/smoke" >>"$LOG" 2>&1
ray start --head --num-gpus 1 --disable-usage-stats >>"$LOG" 2>&1
trap 'ray stop >/dev/null 2>&1' EXIT
common=(--preset openrlhf-tiny train.steps=4 train.eval.every=2 eval_questions=64)
timeout 200 python -m agentsearch openrlhf launch "${common[@]}" out="$OUT/hdr" >>"$LOG" 2>&1
echo "hdr exit $?" >>"$LOG"
timeout 200 python -m agentsearch openrlhf launch "${common[@]}" out="$OUT/lora" \
  train.lora.enabled=true train.lora.r=16 >>"$LOG" 2>&1
echo "lora exit $?" >>"$LOG"
python - "$OUT" <<'PY' | tee "$OUT/gpu_openrlhf.json"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def run(name):
    p = out / name / "metrics.jsonl"
    if not p.exists():
        return {"ok": False}
    recs = [json.loads(x) for x in p.read_text().splitlines() if x.strip()]
    evals = [r for r in recs if "eval/mean_at_n" in r]
    steps = [r for r in recs if "time/step" in r]
    return {"ok": bool(steps), "steps": len(steps),
            "eval": evals[-1]["eval/mean_at_n"] if evals else None,
            "train_seconds": recs[-1].get("time/train_cumulative"),
            "replayed_rows": sum(r.get("replay/rows", 0) for r in steps)}
smoke = out / "smoke" / "smoke.json"
print(json.dumps({"stack": "ok", "smoke": json.loads(smoke.read_text()) if smoke.exists() else None,
                  "hdr": run("hdr"), "lora": run("lora")}))
PY
