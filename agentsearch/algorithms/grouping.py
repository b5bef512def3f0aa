"""From finished episodes to GRPO groups (``ReplayGroup``), and the group statistics.

Episodes arrive task-major (``n`` consecutive episodes per task). Each task's episodes
become one group: rows right-padded to the group's longest row, rewards (plus DAPO's
overlong shaping if enabled), ``answer_correct``, and group-relative advantages.

The stored ``gen_logprobs`` are the *trainer's* logprobs of the sampled tokens, computed
by one teacher-forced forward right after generation (``rescore``), not the generation
engine's: replay's drift gate then measures how far the policy has moved, not vLLM-vs-
transformers numerics. The engine-vs-trainer gap is logged as ``rollout/logprob_gap``. (A
stale group's tokens sampled by older weights are stored with the engine's logprobs:
``staleness.as_sampled``.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from agentsearch.algorithms.advantages import group_advantages, has_signal, zero_variance_mask
from agentsearch.algorithms.losses import overlong_penalty
from agentsearch.replay import ReplayGroup
from agentsearch.rollout import Episode

__all__ = ["episodes_to_groups", "rescore", "response_lengths", "drop_zero_signal",
           "episodes_have_signal"]


def response_lengths(episodes: Sequence[Episode]) -> torch.Tensor:
    """Each episode's response length in policy tokens (action mask set): [len(episodes)] long."""
    return torch.tensor([int(sum(e.action_mask)) for e in episodes], dtype=torch.long)


def episodes_to_groups(episodes: Sequence[Episode], n: int, step: int, *, pad_id: int,
                       advantage_scale: str = "std", overlong: tuple[int, int, float] | None = None,
                       pixel_fn: Callable | None = None
                       ) -> tuple[list[ReplayGroup], dict[str, float]]:
    """``len(episodes) / n`` groups, and ``groups/*`` metrics.

    ``overlong=(max_len, buffer, factor)`` adds DAPO's soft overlong penalty on each
    response's length in *policy* tokens (prompt and observation tokens do not count), so
    ``max_len`` is a policy-token budget (``TrainConfig.overlong_shaping()``: the config's
    ``max_response_tokens``), not the episode's ``max_seq_len``.

    ``pixel_fn(images) -> [k, 3, H, W]`` (a VLM's ``ImageTextTokenizer.pixel_values``) stores
    each episode's images with its group (``ReplayGroup.pixel_values``), so rescoring, the
    update and the replay scan encode the same pixels the policy saw.
    """
    if len(episodes) % n:
        raise ValueError(f"{len(episodes)} episodes do not split into groups of {n}")
    G = len(episodes) // n
    rewards = torch.tensor([e.reward for e in episodes], dtype=torch.float32).view(G, n)  # [G, n]
    if overlong is not None and overlong[1] > 0:
        lengths = response_lengths(episodes)  # [G * n]
        rewards = rewards + overlong_penalty(lengths, *overlong).view(G, n)
    adv = group_advantages(rewards, scale=advantage_scale)  # [G, n]
    groups = []
    for g in range(G):
        eps = episodes[g * n:(g + 1) * n]
        T = max(len(e.token_ids) for e in eps)
        ids = torch.full((n, T), pad_id, dtype=torch.int32)
        mask = torch.zeros(n, T, dtype=torch.bool)
        lp = torch.zeros(n, T, dtype=torch.float32)
        for i, e in enumerate(eps):
            L = len(e.token_ids)
            ids[i, :L] = torch.tensor(e.token_ids, dtype=torch.int32)
            mask[i, :L] = torch.tensor(e.action_mask, dtype=torch.bool)
            lp[i, :L] = torch.tensor(e.gen_logprobs, dtype=torch.float32)
        correct = [e.answer_correct for e in eps]
        pixels = None
        if pixel_fn is not None and any(e.info.get("images") for e in eps):
            pixels = [pixel_fn(e.info["images"]) if e.info.get("images") else None for e in eps]
        groups.append(ReplayGroup(
            pixel_values=pixels,
            prompt_id=eps[0].task_id, token_ids=ids, action_mask=mask, gen_logprobs=lp,
            advantages=adv[g], rewards=rewards[g], born_step=step,
            answer_correct=None if any(c is None for c in correct) else torch.tensor(correct)))
    zero_var = zero_variance_mask(rewards)
    all_correct = sum(bool(g.answer_correct is not None and g.answer_correct.all()) for g in groups)
    metrics = {"groups/fresh": float(G),
               "groups/zero_variance_frac": float(zero_var.float().mean()),
               "groups/all_correct_frac": float(all_correct) / max(G, 1),
               "groups/reward_std_mean": float(rewards.std(dim=1).mean()) if n > 1 else 0.0,
               "groups/abs_advantage_mean": float(adv.abs().mean())}
    return groups, metrics


def drop_zero_signal(groups: Sequence[ReplayGroup]) -> list[ReplayGroup]:
    """DAPO's dynamic sampling (``TrainConfig.dynamic_sampling``): the groups with signal
    (``advantages.has_signal`` of the rewards their advantages came from). A zero-variance
    group has no policy-gradient signal; the loop drops such groups from the update (they
    are still logged and offered to the replay buffer)."""
    return [g for g in groups if bool(has_signal(g.rewards))]


def episodes_have_signal(episodes: Sequence[Episode]) -> bool:
    """Whether one group's episodes have signal (``advantages.has_signal`` of their rewards,
    before any shaping): what regeneration counts and the task sampler records."""
    return bool(has_signal(torch.tensor([e.reward for e in episodes], dtype=torch.float32)))


def rescore(groups: list[ReplayGroup], score_fn: Callable) -> dict[str, float]:
    """Replace each group's engine logprobs by the trainer's (one forward); report the gap
    and ``rollout/entropy``: the mean of ``-log p`` over sampled policy tokens, an unbiased
    estimate of the policy's per-token entropy at the sampling temperature (rising entropy
    with falling reward is the signature of a policy that noisy updates are blurring)."""
    if not groups:
        return {}
    new = score_fn(groups)
    gaps, nll, count = 0.0, 0.0, 0
    for g, lp in zip(groups, new):
        m = g.action_mask
        gaps += float((lp[m] - g.gen_logprobs[m]).abs().sum())
        nll -= float(lp[m].sum())
        count += int(m.sum())
        g.gen_logprobs = torch.where(m, lp.to(torch.float32), torch.zeros(()))
    return {"rollout/logprob_gap": gaps / max(count, 1), "rollout/entropy": nll / max(count, 1)}
