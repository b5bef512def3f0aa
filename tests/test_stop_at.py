"""``eval.stop_at``: a run timed to a target score (the side-by-side with TRL,
scripts/bench_vs_trl.py) ends at its first eval at or above it."""

from __future__ import annotations

from test_trainer import WARM, _cfg, _records

from agentsearch.trainer.loop import train


def test_a_run_timed_to_a_target_ends_at_the_first_eval_that_reaches_it(tmp_path):
    """``eval.stop_at``: the run ends after the first eval at or above it (step 0's included),
    checkpointed, final weights saved; the steps before it are the free run's own; a resume of
    the ended run trains nothing more."""
    from agentsearch.trainer.checkpoint import latest_checkpoint

    over = [*WARM, "steps=4", "eval.every=1", "eval.limit=8", "replay.kind=none"]
    train(_cfg(*over), tmp_path / "free", quiet=True)
    em = [r["eval/mean_at_n"] for r in _records(tmp_path / "free")]  # steps 0..4
    assert len(em) == 5
    new_best = [k for k in range(1, 5) if em[k] > max(em[:k])]  # not reached by any before
    target, stop = (em[new_best[0]], new_best[0]) if new_best else (em[0], 0)
    run = tmp_path / "timed"
    train(_cfg(*over, f"eval.stop_at={target}"), run, quiet=True)
    recs = _records(run)
    assert [r["step"] for r in recs] == list(range(stop + 1))
    assert [r["eval/mean_at_n"] for r in recs] == em[:stop + 1]
    assert (run / "final" / "model.safetensors").exists()
    if stop:
        assert latest_checkpoint(run).name == f"step-{stop:06d}"
    train(_cfg(*over, f"eval.stop_at={target}"), run, resume=True, quiet=True)
    assert [r["step"] for r in _records(run)] == list(range(stop + 1))
