"""The kept SmolLM2 adapter of the real-LM run (docs/results/real_lm/rl-seed0/adapter, fp16)
answers as its run's record says: ``agentsearch eval --run`` on the record folder (config.yaml +
adapter, no merged weights), greedy, on the six dev questions whose episodes the run decoded at
its last eval (samples/step-66.txt), gives the same answers. HF generation here (no vLLM engine
start); the run's evals used the fp32 vLLM engine, which agrees with HF's greedy tokens."""

import json
import re
from pathlib import Path

import pytest

from agentsearch.core.config import apply_overrides
from agentsearch.trainer.eval import eval_envs
from agentsearch.trainer.train_config import TrainConfig

RUN = Path(__file__).resolve().parents[1] / "docs" / "results" / "real_lm" / "rl-seed0"


def _answers(text: str) -> list[tuple[str, bool, str]]:
    """(type, correct, the last <answer>) of each decoded episode of a samples file."""
    out = []
    for block in text.split("=== ")[1:]:
        head = block.splitlines()[0]
        answers = re.findall(r"<answer>(.*?)</answer>", block)
        out.append((head.split(" | ")[0], "correct True" in head,
                    answers[-1].strip() if answers else ""))
    return out


@pytest.mark.slow
def test_the_kept_adapter_answers_as_its_run_recorded(tmp_path, capsys):
    from agentsearch.cli import main

    cfg = apply_overrides(TrainConfig, str(RUN / "config.yaml"), [])
    _, tasks = eval_envs(cfg, limit=cfg.eval.limit)
    picked, seen = [], {}
    for t in tasks:  # write_samples' choice: the first two questions of each type
        if seen.get(t["type"], 0) < 2:
            seen[t["type"]] = seen.get(t["type"], 0) + 1
            picked.append(t)
    questions = tmp_path / "six.jsonl"
    questions.write_text("".join(json.dumps(t) + "\n" for t in picked))
    samples = tmp_path / "samples.txt"
    capsys.readouterr()
    assert main(["eval", "--run", str(RUN), "--split", str(questions), "--limit", "0",
                 "--samples", str(samples), "generation.backend=hf", "threads=2"]) == 0
    out = capsys.readouterr().out
    got = json.loads(out[out.index("{"):])
    want = _answers((RUN / "samples" / "step-66.txt").read_text())
    assert len(want) == 6 and got["eval/questions"] == 6
    assert _answers(samples.read_text()) == want
    assert got["eval/mean_at_n"] == pytest.approx(sum(c for _, c, _ in want) / 6)
