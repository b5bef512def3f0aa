"""The replay buffer: Headroom-Drift Replay and, by configuration, its baselines.

One step of training with replay (docs/design.md, "Headroom-Drift Replay"):

    sel = buf.select(score_fn, step)      # before the update
    loss on fresh groups + sel.accepted   # replayed tokens: stored gen_logprobs and advantages
    buf.add(ingress_candidates, step)     # after the update

``select`` looks only at groups that were in the buffer before this step, orders them
(HDR: cached headroom, descending), and scans them in chunks of ``scan_chunk`` groups with
one ``score_fn`` call (one teacher-forced forward pass) per chunk. For every scanned group
it computes the current headroom and drift, overwrites the cached headroom (accepted or
not) and accepts the group if drift <= tau, until ``k_rep`` groups are accepted; it stops
after the chunk in which that happens, so a large buffer costs no more than a small one
once enough groups pass. Groups that were not scanned keep their cached headroom.

``add`` admits only groups with mixed outcomes (some but not all responses succeed: by
``answer_correct`` where the task gives it, else reward > ``success_threshold``), sets
their cached headroom to the reference headroom under the stored generation logprobs,
and appends them FIFO; the oldest are evicted beyond ``capacity``. Replay never removes
or re-queues a group. A group whose generation logprobs are nan/inf on a policy token is
refused (its ratios and headroom would be nan) and counted: ``replay/ingress_nonfinite``
(last ``add``) and ``replay/ingress_nonfinite_total`` in ``metrics()``.

The baselines are the same buffer with another scan order and/or no gate (see
``make_replay`` in ``agentsearch.replay.strategies``):

=================  ===========  =====  ==============================================
kind               order        gate   scoring
=================  ===========  =====  ==============================================
``hdr``            headroom     yes    every scanned chunk
``headroom_only``  headroom     no     every scanned chunk (keeps the cache fresh)
``drift_only``     random       yes    every scanned chunk
``naive``          random       no     none: k_rep groups uniformly, no forward pass
``recency``        recency      no     none: the newest k_rep groups
``per``            priority     no     none: k_rep groups drawn by (mean |A|)^alpha
``fresh_per``      priority     no     none: ... x exp(-age / age_tau) (FreshPER)
=================  ===========  =====  ==============================================

``priority`` draws without replacement, each draw in proportion to ``scores.per_priority``
(prioritized replay over groups, the priority a group's mean |advantage|; FreshPER,
arXiv 2604.16918, discounts it by age).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from agentsearch.replay.groups import ReplayGroup
from agentsearch.replay.scores import (
    DRIFT_KINDS,
    HEADROOM_WEIGHTINGS,
    headroom,
    headroom_batched,
    pad_stack,
    per_priority,
    policy_drift_batched,
)
from agentsearch.replay.stats import ReplayStats, ScanRecord, selection_metrics

__all__ = ["HeadroomDriftBuffer", "Selection", "ScoreFn", "ORDERS", "STATE_FORMAT"]

log = logging.getLogger("agentsearch.replay")

ScoreFn = Callable[[list[ReplayGroup]], Sequence[Tensor]]
"""Current-policy logprobs of each group's stored tokens: ``[n, T]`` per group, aligned
with ``token_ids`` (see ``agentsearch.models.logprobs.make_score_fn``)."""

ORDERS = ("headroom", "random", "recency", "priority")
STATE_FORMAT = "agentsearch.replay.buffer/1"


@dataclass
class Selection:
    """The result of one ``select``: groups to replay, how many were scanned, metrics."""

    accepted: list[ReplayGroup] = field(default_factory=list)  # in scan order
    scanned: int = 0
    stats: dict[str, float] = field(default_factory=dict)
    # one per scored group, in scan order (empty when the strategy scores nothing); the
    # records with ``accepted`` set are those of ``accepted``, in the same order
    records: list[ScanRecord] = field(default_factory=list)


def finite_on_policy_tokens(g: ReplayGroup) -> bool:
    """Whether every generation logprob on a policy token of ``g`` is finite ([n, T] -> bool)."""
    return bool(torch.isfinite(g.gen_logprobs[g.action_mask]).all())


class HeadroomDriftBuffer:
    """Headroom-Drift Replay buffer (module doc); baselines via ``order`` and ``gate``.

    Args:
        capacity: most groups kept (FIFO); 0 stores nothing (the ``none`` strategy).
        k_rep: replay budget: most groups accepted per ``select``; 0 scans nothing.
        tau: drift threshold of the gate (accept iff drift <= tau). Paper: 1e-2 for
            search, 1e-3 for math. Ignored when ``gate=False``.
        scan_chunk: groups per ``score_fn`` call.
        headroom_weighting: ``"sign"`` or ``"advantage"`` (see ``scores.headroom``).
        drift_kind: ``"l2"`` or ``"l1"`` (see ``scores.policy_drift``).
        success_threshold: a response without ``answer_correct`` succeeds iff its reward is
            greater than this.
        order: ``"headroom"`` (cached headroom, descending; ties: oldest first),
            ``"random"`` (seeded permutation each step), ``"recency"`` (newest first) or
            ``"priority"`` (seeded draws by ``per_priority``: PER / FreshPER).
        gate: apply the drift gate. With ``gate=False`` and an order other than
            ``"headroom"``, nothing is scored and ``score_fn`` is never called.
        seed: seed of the random and priority orders.
        per_alpha: the priority order's exponent on mean |A| (PER's alpha; 0: uniform).
        age_tau: the priority order's freshness time constant in steps (inf: plain PER).
        drought_steps: warn (and set ``replay/ingress_drought``) after this many
            consecutive ``add`` calls that admitted nothing; 0 disables.
        name: label for logs.
    """

    def __init__(self, capacity: int, k_rep: int, tau: float, scan_chunk: int = 16,
                 headroom_weighting: str = "sign", drift_kind: str = "l2",
                 success_threshold: float = 0.0, *, order: str = "headroom", gate: bool = True,
                 seed: int = 0, drought_steps: int = 20, name: str = "hdr",
                 per_alpha: float = 0.6, age_tau: float = math.inf) -> None:
        if capacity < 0 or k_rep < 0:
            raise ValueError(f"capacity and k_rep must be >= 0, got {capacity}, {k_rep}")
        if scan_chunk < 1:
            raise ValueError(f"scan_chunk must be >= 1, got {scan_chunk}")
        if math.isnan(tau) or tau < 0:
            raise ValueError(f"tau must be >= 0 (inf admits everything), got {tau}")
        if headroom_weighting not in HEADROOM_WEIGHTINGS:
            raise ValueError(f"headroom_weighting must be one of {HEADROOM_WEIGHTINGS}, "
                             f"got {headroom_weighting!r}")
        if drift_kind not in DRIFT_KINDS:
            raise ValueError(f"drift_kind must be one of {DRIFT_KINDS}, got {drift_kind!r}")
        if order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
        if not per_alpha >= 0 or not age_tau > 0:
            raise ValueError(f"per_alpha must be >= 0 and age_tau > 0, got {per_alpha}, {age_tau}")
        self.per_alpha, self.age_tau = float(per_alpha), float(age_tau)
        self.capacity, self.k_rep, self.tau = int(capacity), int(k_rep), float(tau)
        self.scan_chunk = int(scan_chunk)
        self.headroom_weighting, self.drift_kind = headroom_weighting, drift_kind
        self.success_threshold = float(success_threshold)
        self.order, self.gate, self.seed, self.name = order, bool(gate), int(seed), name
        self.stats = ReplayStats(drought_steps if capacity > 0 else 0, headroom_weighting)
        self._rng = torch.Generator().manual_seed(self.seed)
        self._groups: list[ReplayGroup] = []  # FIFO, oldest first
        self._added: list[int] = []           # the step each group was added at
        self._nonfinite_last = 0              # groups refused by the last add for nan/inf logprobs
        self._nonfinite_total = 0

    # ------------------------------------------------------------------ inspection
    @property
    def groups(self) -> list[ReplayGroup]:
        """The stored groups, oldest first (a new list; the groups themselves are shared)."""
        return list(self._groups)

    def __len__(self) -> int:
        return len(self._groups)

    @property
    def scores_groups(self) -> bool:
        """Whether ``select`` calls ``score_fn`` (gated, or ordered by headroom)."""
        return self.gate or self.order == "headroom"

    def nbytes(self) -> int:
        """Approximate memory held by the stored groups."""
        return sum(g.nbytes() for g in self._groups)

    def metrics(self) -> dict[str, float]:
        """Buffer-level metrics now (log after ``add`` to see this step's ingress)."""
        return {**self.stats.metrics(self._groups), **self._ingress_metrics()}

    def _ingress_metrics(self) -> dict[str, float]:
        return {"replay/ingress_nonfinite": float(self._nonfinite_last),
                "replay/ingress_nonfinite_total": float(self._nonfinite_total)}

    def __repr__(self) -> str:
        return (f"HeadroomDriftBuffer(name={self.name!r}, size={len(self)}/{self.capacity}, "
                f"k_rep={self.k_rep}, tau={self.tau}, order={self.order!r}, gate={self.gate})")

    # ------------------------------------------------------------------ ingress
    def add(self, groups: Sequence[ReplayGroup], step: int) -> int:
        """Offer this step's groups; admit those with mixed outcomes. Returns how many.

        Call after the update of ``step``: groups added at ``step`` are scanned from the
        next ``select`` on (``select`` at the same ``step`` does not see them). Groups with
        nan/inf generation logprobs on policy tokens are refused and counted.
        """
        all_success = all_fail = nonfinite = 0
        new: list[ReplayGroup] = []
        for g in groups:
            if not isinstance(g, ReplayGroup):
                raise TypeError(f"add() takes ReplayGroup objects, got {type(g).__name__}")
            if not finite_on_policy_tokens(g):
                nonfinite += 1
                continue
            wins = int(g.successes(self.success_threshold).sum())
            if wins == g.n:
                all_success += 1
            elif wins == 0:
                all_fail += 1
            elif self.capacity > 0:
                g.cached_headroom = float(headroom(g.gen_logprobs, g.advantages, g.action_mask,
                                                   self.headroom_weighting))
                new.append(g)
        self._groups.extend(new)
        self._added.extend([int(step)] * len(new))
        overflow = max(0, len(self._groups) - self.capacity)
        evicted = self._groups[:overflow]
        del self._groups[:overflow], self._added[:overflow]
        self.stats.on_add(offered=len(groups), admitted=len(new), all_success=all_success,
                          all_fail=all_fail, evicted=evicted, step=int(step))
        self._nonfinite_last = nonfinite
        self._nonfinite_total += nonfinite
        if nonfinite:
            log.warning("replay ingress at step %d: refused %d group(s) with nan/inf generation "
                        "logprobs on policy tokens (%d so far)", step, nonfinite,
                        self._nonfinite_total)
        return len(new)

    # ------------------------------------------------------------------ selection
    def select(self, score_fn: ScoreFn | None, step: int, *, extra: int = 0) -> Selection:
        """Choose up to ``k_rep + extra`` groups to replay at ``step`` (module doc for the
        rule; ``extra``: slots fresh groups left empty, e.g. the streaming trainer's top-up).

        ``score_fn`` may be None for strategies that do not score (``scores_groups``).
        Every accepted group's ``replay_count`` goes up by one.
        """
        pool = [i for i, a in enumerate(self._added) if a < step]  # present before this step
        accepted: list[ReplayGroup] = []
        records: list[ScanRecord] = []
        scanned = calls = 0
        budget = self.k_rep + max(int(extra), 0)
        if budget > 0 and pool:
            order = self._scan_order(pool, int(step))
            if not self.scores_groups:
                accepted = [self._groups[i] for i in order[:budget]]
                scanned = len(accepted)
            else:
                if score_fn is None:
                    raise ValueError(f"replay strategy {self.name!r} scores groups: "
                                     "pass a score_fn")
                for start in range(0, len(order), self.scan_chunk):
                    chunk = [self._groups[i] for i in order[start:start + self.scan_chunk]]
                    chunk_records = self._score_chunk(chunk, score_fn)
                    calls += 1
                    scanned += len(chunk)
                    for g, r in zip(chunk, chunk_records, strict=True):
                        g.cached_headroom = r.headroom  # refreshed, accepted or not
                        take = r.passed and len(accepted) < budget
                        if take:
                            accepted.append(g)
                        records.append(dataclasses.replace(r, accepted=take,
                                                           age=int(step) - g.born_step))
                    if len(accepted) >= budget:
                        break
        for g in accepted:
            g.replay_count += 1
        self.stats.on_select(scanned, sum(r.passed for r in records) if records else len(accepted))
        stats = selection_metrics(candidates=len(pool), scanned=scanned, accepted=accepted,
                                  k_rep=budget, step=int(step), score_calls=calls,
                                  records=records)
        stats.update(self.metrics())
        return Selection(accepted=accepted, scanned=scanned, stats=stats, records=records)

    def _scan_order(self, pool: list[int], step: int) -> list[int]:
        if self.order == "headroom":
            # stable sort: ties keep FIFO order (oldest first); a NaN cache sorts last
            def key(i: int) -> float:
                h = self._groups[i].cached_headroom
                return -h if h == h else math.inf
            return sorted(pool, key=key)
        if self.order == "random":
            perm = torch.randperm(len(pool), generator=self._rng).tolist()
            return [pool[j] for j in perm]
        if self.order == "priority":  # draws without replacement, by PER / FreshPER weight
            groups = [self._groups[i] for i in pool]
            w = per_priority(torch.tensor([float(g.advantages.abs().mean()) for g in groups]),
                             torch.tensor([float(step - g.born_step) for g in groups]),
                             self.per_alpha, self.age_tau)                       # [len(pool)]
            draws = torch.multinomial(w, len(pool), replacement=False, generator=self._rng)
            return [pool[j] for j in draws.tolist()]
        return pool[::-1]  # recency: newest first

    def _score_chunk(self, chunk: list[ReplayGroup], score_fn: ScoreFn) -> list[ScanRecord]:
        """Score one chunk with one score_fn call; return one record per group (accepted unset)."""
        out = list(score_fn(list(chunk)))
        if len(out) != len(chunk):
            raise ValueError(f"score_fn returned {len(out)} tensors for {len(chunk)} groups")
        lps = []
        for g, lp in zip(chunk, out, strict=True):
            lp = torch.as_tensor(lp).detach().to("cpu", torch.float32)
            if lp.shape != g.token_ids.shape:
                raise ValueError(f"score_fn returned shape {list(lp.shape)} for group "
                                 f"{g.prompt_id!r} whose token_ids are {list(g.token_ids.shape)}")
            if not torch.isfinite(lp[g.action_mask]).all():
                raise ValueError(f"score_fn returned non-finite logprobs on policy tokens of "
                                 f"group {g.prompt_id!r}: the model produced nan/inf")
            lps.append(lp)
        lp = pad_stack(lps)                                        # [G, n, T]
        gen = pad_stack([g.gen_logprobs for g in chunk])           # [G, n, T]
        mask = pad_stack([g.action_mask for g in chunk], False)    # [G, n, T]
        adv = pad_stack([g.advantages for g in chunk])             # [G, n]
        h = headroom_batched(lp, adv, mask, self.headroom_weighting).tolist()
        d2 = policy_drift_batched(lp, gen, mask, "l2")
        d = d2 if self.drift_kind == "l2" else policy_drift_batched(lp, gen, mask, self.drift_kind)
        tokens = mask.sum((1, 2)).tolist()
        return [ScanRecord(h[i], float(d[i]), float(d2[i]), int(tokens[i]),
                           passed=(not self.gate) or float(d[i]) <= self.tau, accepted=False)
                for i in range(len(chunk))]

    # ------------------------------------------------------------------ checkpointing
    def config(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "k_rep": self.k_rep, "tau": self.tau,
                "scan_chunk": self.scan_chunk, "headroom_weighting": self.headroom_weighting,
                "drift_kind": self.drift_kind, "success_threshold": self.success_threshold,
                "order": self.order, "gate": self.gate, "seed": self.seed, "name": self.name,
                "per_alpha": self.per_alpha, "age_tau": self.age_tau}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly: groups, their mutable fields, steps, RNG, stats.

        Save it with ``torch.save``; the group tensors are shared, not copied.
        """
        return {"format": STATE_FORMAT, "config": self.config(),
                "groups": [g.state_dict() for g in self._groups],
                "added_steps": list(self._added),
                "rng_state": self._rng.get_state(),
                "stats": self.stats.state_dict(),
                "ingress_nonfinite": [self._nonfinite_last, self._nonfinite_total]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()`` output. This buffer's own configuration is kept; a
        difference from the saved one is logged, and groups beyond ``capacity`` are evicted
        oldest first."""
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"not a replay buffer state of format {STATE_FORMAT!r} "
                             f"(got format {state.get('format')!r})")
        changed = {k: (v, self.config()[k]) for k, v in state["config"].items()
                   if self.config().get(k) != v}
        if changed:
            log.warning("replay state was saved with a different configuration; keeping the "
                        "current one: %s", {k: f"{a} -> {b}" for k, (a, b) in changed.items()})
        groups = [ReplayGroup.from_state_dict(s) for s in state["groups"]]
        added = [int(a) for a in state["added_steps"]]
        if len(groups) != len(added):
            raise ValueError("corrupt replay state: groups and added_steps differ in length")
        overflow = max(0, len(groups) - self.capacity)
        self._groups, self._added = groups[overflow:], added[overflow:]
        self._rng.set_state(state["rng_state"])
        self.stats.load_state_dict(state["stats"])
        self._nonfinite_last, self._nonfinite_total = (
            int(x) for x in state.get("ingress_nonfinite", (0, 0)))
