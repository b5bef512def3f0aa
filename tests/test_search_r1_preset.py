"""`search-r1-grpo` (Search-R1's train_grpo.sh in our trainer) trains, from the CLI, against a
stand-in for Search-R1's own retrieval server (no /health) on 127.0.0.1, on Search-R1's
parquet layout: with its parser, prompt, token-cut observations, mini-batch updates, entropy
term and Adam betas, shrunk to the tiny base."""

import json

import pytest

pytest.importorskip("pyarrow")

from search_r1_stub import search_r1_server  # noqa: E402
from test_search_r1_data import _parquet, _rows  # noqa: E402

from agentsearch.core.config import apply_overrides  # noqa: E402
from agentsearch.trainer.train_config import TrainConfig  # noqa: E402


def test_preset_mirrors_train_grpo_sh():
    cfg = apply_overrides(TrainConfig, "search-r1-grpo", [])
    assert (cfg.prompts_per_step, cfg.group_size, cfg.steps, cfg.max_turns) == (512, 5, 1005, 3)
    assert (cfg.update_minibatch_size, cfg.update_epochs, cfg.entropy_coef) == (256, 1, 0.001)
    assert ((cfg.lr, cfg.weight_decay, cfg.adam_betas, cfg.warmup_steps)
            == (1e-6, 0.01, [0.9, 0.999], 286))
    assert (cfg.kl_coef, cfg.kl_kind, cfg.clip_low, cfg.clip_high, cfg.replay.kind) == (
        0.001, "k3", 0.2, 0.2, "none")
    kw = cfg.env_kwargs
    assert ((kw["parser"], kw["max_obs_tokens"], kw["topk"], kw["format_penalty"])
            == ("search_r1", 500, 3, 0.0))
    # 2,560 episodes a step in mini-batches of 256: 10 optimizer steps, as verl takes
    assert cfg.prompts_per_step * cfg.group_size // cfg.update_minibatch_size == 10


@pytest.mark.slow
def test_search_r1_grpo_trains_against_search_r1s_server(tmp_path, world_path):
    from agentsearch.cli import main
    from agentsearch.retrievers import load_retriever, world_index

    train = _parquet(tmp_path / "train.parquet", _rows(world_path, 4, 2, "train"),
                     with_question=False)
    test = _parquet(tmp_path / "test.parquet", _rows(world_path, 2, 2, "test"), with_question=False)
    with search_r1_server(load_retriever(world_index(seed=0, kind="bm25s"))) as (url, seen):
        rc = main(["train", "--preset", "search-r1-grpo", "--out", str(tmp_path / "run"),
                   "model=tiny-base", "steps=2", "prompts_per_step=2", "group_size=2",
                   "max_seq_len=768", "generation.backend=hf", "generation.max_new_tokens=24",
                   "gradient_checkpointing=false", "update_minibatch_size=2",
                   "micro_batch_size=4", "warmup_steps=1", "threads=1", "tensorboard=false",
                   "checkpoint_every=2", "eval.limit=4", "eval.every=0",
                   f"env_kwargs.questions={train}", f"eval.questions={test}",
                   f"env_kwargs.index={url}"])
    assert rc == 0
    recs = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in recs if "train/rows" in r]
    assert (len(steps) == 2 and all(r["train/optimizer_steps"] >= 1 for r in steps
                                    if not r["train/skipped"]))
    assert {"eval/nq/mean_at_n", "eval/hotpotqa/mean_at_n"} <= set(recs[-1])  # per source
    assert (seen and all(set(req) == {"queries", "topk", "return_scores"}
                         and req["topk"] == 3 for req in seen))
