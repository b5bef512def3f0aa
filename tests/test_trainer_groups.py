"""Episodes -> GRPO groups, and the trainer-side rescoring, against hand-worked numbers."""

import math

import pytest
import torch

from agentsearch.algorithms.grouping import episodes_to_groups, rescore
from agentsearch.rollout import Episode


def _episode(task, ids, mask, lps, reward, correct):
    return Episode(task_id=task, token_ids=ids, action_mask=mask, gen_logprobs=lps, prompt_len=2,
                   reward=reward, reward_components={"answer": reward}, answer_correct=correct,
                   terminated=True, truncated=False, num_turns=1)


def _two_groups():
    # task a: rewards 1, 0 (mixed); task b: rewards 0, 0 (zero variance)
    return [_episode("a", [5, 6, 7, 8], [0, 0, 1, 1], [0, 0, -0.5, -1.0], 1.0, True),
            _episode("a", [5, 6, 9], [0, 0, 1], [0, 0, -2.0], 0.0, False),
            _episode("b", [5, 6, 7], [0, 0, 1], [0, 0, -0.1], 0.0, False),
            _episode("b", [5, 6, 7], [0, 0, 1], [0, 0, -0.1], 0.0, False)]


def test_groups_pad_rows_and_centre_rewards():
    groups, m = episodes_to_groups(_two_groups(), 2, step=3, pad_id=0)
    a, b = groups
    assert a.token_ids.tolist() == [[5, 6, 7, 8], [5, 6, 9, 0]]  # right-padded to the longest row
    assert a.action_mask.tolist() == [[False, False, True, True], [False, False, True, False]]
    # rewards [1, 0]: mean 0.5, sample std 0.7071 -> advantages +-0.7071
    assert a.advantages.tolist() == pytest.approx([0.70710, -0.70710], abs=1e-4)
    assert b.advantages.tolist() == [0.0, 0.0] and a.born_step == 3
    assert m["groups/zero_variance_frac"] == 0.5 and m["groups/all_correct_frac"] == 0.0
    with pytest.raises(ValueError, match="do not split"):
        episodes_to_groups(_two_groups()[:3], 2, step=0, pad_id=0)


def test_rescore_stores_the_trainers_logprobs_and_reports_gap_and_entropy():
    groups, _ = episodes_to_groups(_two_groups(), 2, step=0, pad_id=0)
    # the trainer's logprobs differ from the engine's by +0.1 on every policy token
    trainer = [torch.where(g.action_mask, g.gen_logprobs + 0.1,
                           torch.full_like(g.gen_logprobs, 9.0)) for g in groups]
    m = rescore(groups, lambda gs: trainer)
    # 5 policy tokens; trainer logprobs -0.4, -0.9, -1.9, 0.0, 0.0 -> mean -log p = 3.2 / 5
    assert m["rollout/logprob_gap"] == pytest.approx(0.1, abs=1e-6)
    assert m["rollout/entropy"] == pytest.approx(3.2 / 5, abs=1e-6)
    assert groups[0].gen_logprobs.tolist()[0] == pytest.approx([0, 0, -0.4, -0.9])
    assert groups[0].gen_logprobs[1, 3] == 0.0  # padding stays 0, never the scorer's value
    assert not any(math.isnan(v) for v in m.values()) and rescore([], lambda gs: []) == {}


def test_overlong_shaping_counts_policy_tokens_against_the_response_budget():
    from agentsearch.algorithms.grouping import response_lengths
    from agentsearch.core.config import apply_overrides
    from agentsearch.trainer.train_config import TrainConfig

    # budget = max_turns x max_new_tokens = 2 x 5 = 10 policy tokens; the penalty ramps from
    # 10 - 4 = 6 to 10 (max_seq_len = 1024 is the whole episode's budget, not the response's)
    cfg = apply_overrides(TrainConfig, {}, ["max_turns=2", "generation.max_new_tokens=5",
                                            "overlong_buffer=4", "max_seq_len=1024"])
    prompt, obs = [0] * 30, [0] * 20  # 50 prompt + observation tokens per episode
    eps = [_episode("a", list(range(50 + k)), prompt + [1] * (k // 2) + obs + [1] * (k - k // 2),
                    [0.0] * (50 + k), 1.0, True) for k in (4, 8, 10, 12)]
    assert response_lengths(eps).tolist() == [4, 8, 10, 12]
    groups, _ = episodes_to_groups(eps, 4, step=0, pad_id=0, advantage_scale="none",
                                   overlong=cfg.overlong_shaping())
    # penalties 0, -(8-6)/4, -1, -1 -> rewards [1, 0.5, 0, 0], mean 0.375
    assert groups[0].rewards.tolist() == pytest.approx([1.0, 0.5, 0.0, 0.0])
    assert groups[0].advantages.tolist() == pytest.approx([0.625, 0.125, -0.375, -0.375])
    # max_response_tokens overrides the default budget: 9 -> the ramp runs from 5 to 9
    cfg = apply_overrides(TrainConfig, {},
                          ["max_response_tokens=9", "overlong_buffer=4", "overlong_penalty=2"])
    groups, _ = episodes_to_groups(eps, 4, step=0, pad_id=0, overlong=cfg.overlong_shaping())
    assert groups[0].rewards.tolist() == pytest.approx([1.0, 1 - 2 * 3 / 4, -1.0, -1.0])
