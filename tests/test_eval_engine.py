"""``eval.backend=vllm``: evals generate on a vLLM engine of their own, given the weights as
trained before each eval, so that runs which generate differently (HF here, TRL's trainer in
scripts/bench_vs_trl.py) are scored by one engine; its fp32 greedy episodes are the HF
policy's own."""

import json

import pytest

from agentsearch.core.config import apply_overrides
from agentsearch.trainer.train_config import TrainConfig

pytest.importorskip("vllm")
pytestmark = [pytest.mark.vllm, pytest.mark.slow]

KEYS = ("eval/mean_at_n", "eval/searches", "eval/turns_mean", "eval/format_reward")


def test_evals_on_an_engine_of_their_own_score_the_weights_as_trained(tmp_path, capsys):
    from agentsearch.cli import main
    from agentsearch.trainer.loop import train

    run = tmp_path / "run"
    over = ["threads=1", "tensorboard=false", "steps=2", "eval.every=1", "eval.limit=24",
            "prompts_per_step=4", "group_size=4", "lr=1e-2", "warmup_steps=0",
            "checkpoint_every=100", "generation.backend=hf", "eval.backend=vllm"]
    train(apply_overrides(TrainConfig, "tiny", over), run, quiet=True)
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [{k: r[k] for k in KEYS} for r in recs]
    assert len(evals) == 3 and evals[-1] != evals[0]  # the updates moved the greedy episodes
    capsys.readouterr()
    # the final weights on the HF backend: what an engine left at the start would not give
    assert main(["eval", "--run", str(run), "eval.backend=train"]) == 0
    out = capsys.readouterr().out
    hf = json.loads(out[out.index("{"):])
    assert {k: hf[k] for k in KEYS} == evals[-1]
