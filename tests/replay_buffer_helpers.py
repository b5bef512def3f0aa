"""Replay groups with known probabilities and a scorer with known drift, shared by the replay
buffer tests (conftest puts this folder on sys.path)."""

from __future__ import annotations

import math

import torch

from agentsearch.replay import ReplayGroup

N, T = 2, 4
MASK = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 1]], dtype=torch.bool)  # 5 policy tokens


def group(pid, p=0.5, *, step=0, adv=(1.0, 1.0), rewards=(1.0, 0.0), correct=None):
    """A group whose policy tokens all have probability p under the generator.

    With both advantages positive, its reference headroom is 1 - p.
    """
    return ReplayGroup(prompt_id=pid, token_ids=torch.arange(N * T).view(N, T),
                       action_mask=MASK, gen_logprobs=torch.full((N, T), math.log(p)),
                       advantages=torch.tensor(adv), rewards=torch.tensor(rewards),
                       answer_correct=None if correct is None else torch.tensor(correct),
                       born_step=step)


class FakeScorer:
    """score_fn whose current logprobs are gen + shift[pid] on every token; records calls.

    A shift s gives drift_l2 = s**2 and current p = p_gen * exp(s).
    """

    def __init__(self, shifts=None):
        self.shifts = shifts or {}
        self.calls: list[list] = []

    def __call__(self, groups):
        self.calls.append([g.prompt_id for g in groups])
        return [g.gen_logprobs + self.shifts.get(g.prompt_id, 0.0) for g in groups]

    @property
    def scanned(self):
        return [pid for call in self.calls for pid in call]


def filled(buf, ps, step=0):
    """Add one group per p (prompt ids 0..), at `step`; return them."""
    gs = [group(i, p, step=step) for i, p in enumerate(ps)]
    assert buf.add(gs, step) == len(gs)
    return gs
