"""Replay diagnostics: the metrics that show when replay silently stops working.

Every key is namespaced ``replay/...``. Per selection (``Selection.stats``):

- ``replay/candidates``: groups eligible this step (in the buffer before the step);
- ``replay/scan_depth``: groups scanned (scored, or picked when the strategy does not
  score); ``replay/scan_frac``: scan_depth / candidates; ``replay/score_calls``;
- ``replay/accepted`` (groups replayed), ``replay/accept_rate`` (share of scanned groups
  that passed the gate: the paper's acceptance rate; 1 without a gate; a group that
  passes after the budget filled up in its chunk counts as passed but is not replayed),
  ``replay/budget_filled`` (1 if all k_rep slots were filled);
- only for scoring strategies: ``replay/kl`` = 0.5 * mean(d**2) pooled over the replayed
  groups' policy tokens (d = current - generation logprob; the usual k2 estimate of
  KL(pi_gen || pi)), ``replay/drift_accepted`` / ``replay/drift_rejected`` (mean gate
  drift of replayed groups / of groups that failed the gate),
  ``replay/headroom_accepted`` / ``replay/headroom_rejected`` (the same for current
  headroom), each present only when there is such a group;
- ``replay/age_mean``, ``replay/age_max``: step - born_step of the accepted groups;
- drift by age, only for scoring strategies: ``replay/drift_age_1``, ``_2_3``, ``_4_7``,
  ``_8_15``, ``_16up``: mean gate drift of the groups scanned this step whose age (steps since
  they were generated) falls in that range, each present only when one does. How fast does a
  stored group go stale as the policy moves, and does the gate's tau cut at the right age?

Buffer-level (``ReplayStats.metrics``, merged into every selection's stats and available
after ``add`` through the buffer's ``metrics()``):

- ``replay/buffer_size``, ``replay/buffer_mb``;
- ``replay/ingress`` (groups admitted by the last ``add``), ``replay/ingress_offered``,
  ``replay/ingress_all_success`` / ``replay/ingress_all_fail`` (rejected for having no
  mixed outcome), ``replay/ingress_total``, ``replay/evicted``;
- ``replay/steps_since_ingress`` and ``replay/ingress_drought`` (1.0 once ``add`` admitted
  nothing for ``drought_steps`` consecutive calls; a warning is logged then and every
  ``drought_steps`` calls after). A drought means every group is all-correct or
  all-wrong: the task is too easy or too hard, or ``success_threshold`` is wrong;
- lifetime exposure over every group ever admitted (evicted ones included):
  ``replay/exposure_mean``, ``replay/exposure_max``, ``replay/never_replayed_frac`` and
  ``replay/exposure_top10_share`` (share of all replays taken by the 10% most replayed
  groups; 0.1 is perfectly even, 1.0 means a few groups take everything);
- ``replay/accept_rate_lifetime``;
- ``replay/exposure_h0_decile_0`` ... ``_9``: mean replay count of the groups ever admitted,
  by decile of their *initial* headroom (the reference headroom under the stored
  generation logprobs, which ``add`` computes; decile 0 = the lowest tenth), present once
  ten groups were admitted. Does a strategy spend its replays on high-headroom groups (HDR,
  headroom-only) or evenly (naive, recency)? ``agentsearch pareto`` plots the last value.
  Evicted groups are kept as a histogram of (initial headroom rounded to 1e-3, count).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agentsearch.replay.groups import ReplayGroup
from agentsearch.replay.scores import headroom

__all__ = ["ScanRecord", "ReplayStats", "selection_metrics", "exposure_concentration",
           "exposure_by_decile", "AGE_BUCKETS", "age_key"]

log = logging.getLogger("agentsearch.replay")


@dataclass(frozen=True)
class ScanRecord:
    """What one select() learned about one scanned group."""

    headroom: float   # current headroom (the new cached value)
    drift: float      # the gate's drift (its kind: l2 or l1)
    drift_l2: float   # mean d**2, for the KL estimate whatever the gate's kind
    tokens: int       # |T(g)|
    passed: bool      # drift <= tau (always True without a gate)
    accepted: bool    # passed and a replay slot was still free
    age: int = 0      # step - born_step at the scan


AGE_BUCKETS = ((1, 1), (2, 3), (4, 7), (8, 15), (16, None))
"""Age ranges (inclusive; None: no upper end) of the ``replay/drift_age_*`` metrics."""


def age_key(lo: int, hi: int | None) -> str:
    """``replay/drift_age_1``, ``_2_3``, ..., ``_16up``: the key of an ``AGE_BUCKETS`` range."""
    return f"replay/drift_age_{lo}" + ("up" if hi is None else "" if hi == lo else f"_{hi}")


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def selection_metrics(*, candidates: int, scanned: int, accepted: Sequence[ReplayGroup],
                      k_rep: int, step: int, score_calls: int,
                      records: Sequence[ScanRecord] = ()) -> dict[str, float]:
    """The per-selection metrics listed in the module doc."""
    out: dict[str, float] = {
        "replay/candidates": float(candidates),
        "replay/scan_depth": float(scanned),
        "replay/scan_frac": scanned / candidates if candidates else 0.0,
        "replay/score_calls": float(score_calls),
        "replay/accepted": float(len(accepted)),
        "replay/budget_filled": float(k_rep > 0 and len(accepted) >= k_rep),
    }
    acc = [r for r in records if r.accepted]
    rej = [r for r in records if not r.passed]
    passed = sum(r.passed for r in records) if records else len(accepted)
    out["replay/accept_rate"] = passed / scanned if scanned else 0.0
    if acc:
        tokens = sum(r.tokens for r in acc)
        out["replay/kl"] = 0.5 * sum(r.drift_l2 * r.tokens for r in acc) / max(tokens, 1)
        out["replay/drift_accepted"] = _mean([r.drift for r in acc])
        out["replay/headroom_accepted"] = _mean([r.headroom for r in acc])
    if rej:
        out["replay/drift_rejected"] = _mean([r.drift for r in rej])
        out["replay/headroom_rejected"] = _mean([r.headroom for r in rej])
    for lo, hi in AGE_BUCKETS:
        ds = [r.drift for r in records if r.age >= lo and (hi is None or r.age <= hi)]
        if ds:
            out[age_key(lo, hi)] = _mean(ds)
    if accepted:
        ages = [step - g.born_step for g in accepted]
        out["replay/age_mean"] = _mean(ages)
        out["replay/age_max"] = float(max(ages))
    return out


def exposure_concentration(histogram: dict[int, int], top_frac: float = 0.1) -> float:
    """Share of all replays taken by the ``top_frac`` most replayed groups.

    ``histogram`` maps a replay count to how many groups have it. The top group set has
    ceil(top_frac * groups) members. Returns 0 when nothing was replayed.
    """
    groups = sum(histogram.values())
    total = sum(c * m for c, m in histogram.items())
    if groups == 0 or total == 0:
        return 0.0
    room = math.ceil(top_frac * groups)
    taken = 0
    for count in sorted(histogram, reverse=True):
        k = min(room, histogram[count])
        taken += k * count
        room -= k
        if room == 0:
            break
    return taken / total


def exposure_by_decile(groups: Iterable[tuple[float, int, int]]) -> list[float]:
    """Mean replay count per decile of initial headroom.

    ``groups``: ``(initial headroom, replay count, number of such groups)`` triples. The
    groups are ranked by headroom and cut into ten equal shares of the group count (a
    triple that straddles a cut is split between the two deciles). Returns ten means,
    lowest headroom first, or ``[]`` with fewer than ten groups.
    """
    items = sorted((h, c, m) for h, c, m in groups if m > 0)
    total = sum(m for _, _, m in items)
    if total < 10:
        return []
    width = total / 10
    sums = [0.0] * 10
    pos = 0.0
    for _, count, m in items:
        lo, hi = pos, pos + m
        d = min(int(lo / width), 9)
        while lo < hi and d < 10:  # spread this triple over the deciles it overlaps
            end = min(hi, (d + 1) * width) if d < 9 else hi
            sums[d] += (end - lo) * count
            lo, d = end, d + 1
        pos = hi
    return [s / width for s in sums]


class ReplayStats:
    """Counters that outlive single steps: ingress, drought, lifetime exposure, totals.

    Lifetime exposure of evicted groups is kept as a histogram (replay count -> groups),
    so memory stays bounded however long the run, and so is their exposure by initial
    headroom (``headroom_weighting`` as the buffer's). ``drought_steps=0`` turns the drought
    warning off (the ``none`` strategy, which stores nothing, uses that).
    """

    def __init__(self, drought_steps: int = 20, headroom_weighting: str = "sign") -> None:
        self.drought_steps = int(drought_steps)
        self.headroom_weighting = headroom_weighting
        self.evicted_by_h0: dict[tuple[float, int], int] = {}  # (h0 rounded, count) -> groups
        self._h0: dict[int, float] = {}  # id(group) -> initial headroom, for live groups
        self.steps_since_ingress = 0
        self.ingress_total = 0
        self.scanned_total = 0
        self.accepted_total = 0
        self.evicted_exposure: dict[int, int] = {}
        self.last_add: dict[str, float] = {}

    def on_select(self, scanned: int, accepted: int) -> None:
        self.scanned_total += scanned
        self.accepted_total += accepted

    def on_add(self, *, offered: int, admitted: int, all_success: int, all_fail: int,
               evicted: Iterable[ReplayGroup], step: int) -> None:
        """Record one ``add`` call; logs a warning when an ingress drought starts or goes on."""
        evicted = list(evicted)
        for g in evicted:
            self.evicted_exposure[g.replay_count] = self.evicted_exposure.get(g.replay_count, 0) + 1
            key = (round(self._initial_headroom(g), 3), g.replay_count)
            self.evicted_by_h0[key] = self.evicted_by_h0.get(key, 0) + 1
            self._h0.pop(id(g), None)
        self.ingress_total += admitted
        self.steps_since_ingress = 0 if admitted else self.steps_since_ingress + 1
        self.last_add = {
            "replay/ingress": float(admitted),
            "replay/ingress_offered": float(offered),
            "replay/ingress_all_success": float(all_success),
            "replay/ingress_all_fail": float(all_fail),
            "replay/evicted": float(len(evicted)),
        }
        n = self.steps_since_ingress
        if self.drought_steps > 0 and n >= self.drought_steps and n % self.drought_steps == 0:
            log.warning(
                "replay ingress drought: no group admitted for %d consecutive steps (step %d; "
                "last add: %d offered, %d all-success, %d all-fail). Replay needs groups with "
                "mixed outcomes: check the task difficulty, answer_correct, or success_threshold.",
                n, step, offered, all_success, all_fail)

    def _initial_headroom(self, g: ReplayGroup) -> float:
        """The reference headroom of ``g`` under its stored generation logprobs (what ``add``
        caches at ingress; recomputed here because scans overwrite the cache), memoised."""
        h0 = self._h0.get(id(g))
        if h0 is None:
            h0 = self._h0[id(g)] = float(headroom(g.gen_logprobs, g.advantages, g.action_mask,
                                                  self.headroom_weighting))
        return h0

    def metrics(self, live: Sequence[ReplayGroup]) -> dict[str, float]:
        """Buffer-level metrics given the groups now in the buffer."""
        hist = dict(self.evicted_exposure)
        for g in live:
            hist[g.replay_count] = hist.get(g.replay_count, 0) + 1
        groups = sum(hist.values())
        replays = sum(c * m for c, m in hist.items())
        drought = 0 < self.drought_steps <= self.steps_since_ingress
        out = {
            "replay/buffer_size": float(len(live)),
            "replay/buffer_mb": sum(g.nbytes() for g in live) / 2**20,
            "replay/ingress_total": float(self.ingress_total),
            "replay/steps_since_ingress": float(self.steps_since_ingress),
            "replay/ingress_drought": float(drought),
            "replay/exposure_mean": replays / groups if groups else 0.0,
            "replay/exposure_max": float(max(hist)) if hist else 0.0,
            "replay/never_replayed_frac": hist.get(0, 0) / groups if groups else 0.0,
            "replay/exposure_top10_share": exposure_concentration(hist, 0.1),
            "replay/accept_rate_lifetime":
                self.accepted_total / self.scanned_total if self.scanned_total else 0.0,
        }
        triples = [(h, c, m) for (h, c), m in self.evicted_by_h0.items()]
        triples += [(self._initial_headroom(g), g.replay_count, 1) for g in live]
        self._h0 = {id(g): self._h0[id(g)] for g in live}  # forget groups no longer stored
        for d, mean in enumerate(exposure_by_decile(triples)):
            out[f"replay/exposure_h0_decile_{d}"] = mean
        out.update(self.last_add)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"drought_steps": self.drought_steps,
                "steps_since_ingress": self.steps_since_ingress,
                "ingress_total": self.ingress_total, "scanned_total": self.scanned_total,
                "accepted_total": self.accepted_total,
                "evicted_exposure": dict(self.evicted_exposure),
                "evicted_by_h0": [[h, c, m] for (h, c), m in self.evicted_by_h0.items()],
                "last_add": dict(self.last_add)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.drought_steps = int(state["drought_steps"])
        self.steps_since_ingress = int(state["steps_since_ingress"])
        self.ingress_total = int(state["ingress_total"])
        self.scanned_total = int(state["scanned_total"])
        self.accepted_total = int(state["accepted_total"])
        self.evicted_exposure = {int(k): int(v) for k, v in state["evicted_exposure"].items()}
        # absent in states saved before this counter existed
        self.evicted_by_h0 = {(float(h), int(c)): int(m)
                              for h, c, m in state.get("evicted_by_h0", [])}
        self._h0 = {}  # the buffer's groups are new objects now
        self.last_add = {str(k): float(v) for k, v in state["last_add"].items()}
