"""Run health: ``health/*`` counters and one-line alarms for a run that learns nothing.

``HealthMonitor.update(step, metrics)`` reads the step's logged metrics (the dict the loop
passes to ``MetricsLogger.log``) and counts *consecutive* bad steps per check:

- ``health/zero_reward_steps``: no answer reward and no correct answer
  (``reward/answer``, else ``reward/total``, <= 0 and ``rollout/answer_correct`` <= 0);
- ``health/all_zero_variance_steps``: every fresh group has zero reward variance
  (``groups/zero_variance_frac`` >= 1), so fresh groups give GRPO no signal;
- ``health/no_signal_steps``: the update was skipped for lack of signal, replay included
  (``train/skipped_no_signal``);
- ``health/tool_error_streak``: tools were called and at least ``tool_error_rate`` of the
  calls failed (``rollout/tool_calls``, ``rollout/tool_error_rate``);
- ``health/replay_drought_steps``: replay is active and the buffer is empty
  (``replay/buffer_size`` 0) or nothing was replayed (``replay/accepted`` 0); always 0 for
  replay kind ``none``;
- ``health/nonfinite_steps``: the update hit a non-finite loss or gradient
  (``train/nonfinite``);
- ``health/logprob_gap_jumps``: the sampler's logprobs left the trainer's on the same tokens
  (``rollout/logprob_gap`` above ``gap_jump`` times the median of the last healthy steps'
  gaps, above ``gap_tail`` times their largest, and above ``gap_floor``): the generation
  engine is not serving the current weights,
  the symptom of a weight or adapter sync that silently failed;
- ``health/alarms``: how many of the checks above are in alarm now.

A check is in alarm once its counter reaches its threshold (a threshold of 0 turns the
alarm off; the counter is still reported) and leaves it at the first good step. Each
alarm yields one warning line when it starts, and again only if it clears and comes
back. A step whose metrics lack a check's keys (or hold NaN) says nothing about that
check: its counter is left as it was. Pure Python, checkpointable::

    health = HealthMonitor(replay_kind=cfg.replay.kind)
    counters, warnings = health.update(step, metrics)
    state["health"] = health.state_dict()   # ... health.load_state_dict(state["health"])
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["HealthMonitor", "CHECKS", "GAP_HISTORY"]

# check name -> its health/* key
CHECKS = {
    "zero_reward": "health/zero_reward_steps",
    "zero_variance": "health/all_zero_variance_steps",
    "no_signal": "health/no_signal_steps",
    "tool_errors": "health/tool_error_streak",
    "replay_drought": "health/replay_drought_steps",
    "nonfinite": "health/nonfinite_steps",
    "sampler_sync": "health/logprob_gap_jumps",
}
GAP_HISTORY = 16
"""Healthy steps' gaps the sampler-sync check takes its median and largest over. 8 was too
few for a bf16 engine's heavy tail: SmolLM2 run rl-v4-seed1 (every sync made) called 9 of its
200 steps jumps against the last 8, none against the last 16."""


def _get(metrics: Mapping[str, Any], key: str) -> float | None:
    """The metric as a float; None when absent or NaN (no evidence either way)."""
    v = metrics.get(key)
    if v is None:
        return None
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


class HealthMonitor:
    """Consecutive-bad-step counters and alarms over the logged metrics (module doc).

    Args:
        zero_reward_steps, zero_variance_steps, no_signal_steps, tool_error_streak,
        drought_steps, nonfinite_steps: consecutive bad steps that raise each alarm
            (0: never alarm).
        tool_error_rate: share of failed tool calls that makes a step bad for the tool check.
        gap_steps: consecutive steps whose logprob gap jumped that raise the sampler-sync
            alarm (1: a failed sync shows at once).
        gap_jump, gap_floor: a gap is a jump above ``gap_jump`` x the median of the last
            ``GAP_HISTORY`` healthy gaps and above ``gap_floor`` nats per token (fp32 engines
            agree to ~1e-6; one missed LoRA sync after an lr 1e-4 step moves ~1e-2).
        gap_tail: ... and above ``gap_tail`` x the largest of those healthy gaps. A bf16
            engine's per-step gap is heavy-tailed (SmolLM2 run rl-v2-seed0: 1e-4 to 8e-3 over
            64 steps, median 1.4e-3), so 10x a median of 8 steps alone alarmed twice on
            rounding (steps 39, 42); a jump must also clear the recent worst. Under such an
            engine ``build_health`` (trainer/setup.py) sets ``gap_steps`` to 2. For an fp32
            engine the largest healthy gap is ~1e-6 and ``gap_floor`` decides.
        gap_first_max: the first gap (no history yet) is a jump only above this: the first
            step's engine holds the weights the trainer starts from, so its gap is the
            engine's own rounding, the level later steps are judged against. A bf16 engine's
            rounding depends on the policy's entropy: 0.035 nats on SmolLM2's first-turn
            samples at T=1 (bench_real_lm), less once RL has made the policy sure of its
            tokens; a sync missed for many steps, or wrong weights, still shows.
        replay_kind: the run's replay kind; ``None``, ``"none"`` or ``"recycle"`` (query
            recycling: its tasks go back to the prompt order) disables the drought check
            (nothing is ever stored, so an empty buffer is expected).
    """

    def __init__(self, zero_reward_steps: int = 5, zero_variance_steps: int = 5,
                 no_signal_steps: int = 5, tool_error_streak: int = 3, drought_steps: int = 10,
                 nonfinite_steps: int = 3, *, tool_error_rate: float = 0.5,
                 replay_kind: str | None = "hdr", gap_steps: int = 1, gap_jump: float = 10.0,
                 gap_floor: float = 1e-3, gap_tail: float = 2.0,
                 gap_first_max: float = 0.2) -> None:
        self.thresholds = {"zero_reward": zero_reward_steps, "zero_variance": zero_variance_steps,
                           "no_signal": no_signal_steps, "tool_errors": tool_error_streak,
                           "replay_drought": drought_steps, "nonfinite": nonfinite_steps,
                           "sampler_sync": gap_steps}
        self.gap_jump, self.gap_floor = float(gap_jump), float(gap_floor)
        self.gap_tail = float(gap_tail)
        self.gap_first_max = float(gap_first_max)
        self.gaps: list[float] = []  # the last healthy steps' logprob gaps
        if any(int(t) < 0 for t in self.thresholds.values()):
            raise ValueError(f"health thresholds must be >= 0, got {self.thresholds}")
        self.thresholds = {k: int(t) for k, t in self.thresholds.items()}
        self.tool_error_rate = float(tool_error_rate)
        self.replay_active = replay_kind not in (None, "none", "recycle")
        self.counts = dict.fromkeys(CHECKS, 0)
        self.active: set[str] = set()

    # ------------------------------------------------------------------ checks
    def _bad(self, m: Mapping[str, Any]) -> dict[str, tuple[bool, str] | None]:
        """Per check: None (no evidence), or (bad?, what was seen for the warning)."""
        out: dict[str, tuple[bool, str] | None] = dict.fromkeys(CHECKS)
        reward = _get(m, "reward/answer")
        reward_key = "reward/answer"
        if reward is None:
            reward, reward_key = _get(m, "reward/total"), "reward/total"
        correct = _get(m, "rollout/answer_correct")
        seen = [(k, v) for k, v in ((reward_key, reward), ("rollout/answer_correct", correct))
                if v is not None]
        if seen:
            out["zero_reward"] = (all(v <= 0 for _, v in seen),
                                  ", ".join(f"{k}={v:.3g}" for k, v in seen))
        if (zv := _get(m, "groups/zero_variance_frac")) is not None:
            out["zero_variance"] = (zv >= 1.0, f"groups/zero_variance_frac={zv:.3g}")
        if (ns := _get(m, "train/skipped_no_signal")) is not None:
            out["no_signal"] = (ns > 0, "train/skipped_no_signal=1")
        if (rate := _get(m, "rollout/tool_error_rate")) is not None:
            calls = _get(m, "rollout/tool_calls")
            bad = rate >= self.tool_error_rate and calls != 0  # no calls: nothing failed
            out["tool_errors"] = (bad, f"rollout/tool_error_rate={rate:.3g} of {calls or 0:.0f} "
                                       "calls")
        if self.replay_active:
            size, accepted = _get(m, "replay/buffer_size"), _get(m, "replay/accepted")
            seen = [(k, v) for k, v in (("replay/buffer_size", size), ("replay/accepted", accepted))
                    if v is not None]
            if seen:
                out["replay_drought"] = (any(v <= 0 for _, v in seen),
                                         ", ".join(f"{k}={v:.0f}" for k, v in seen))
        if (nf := _get(m, "train/nonfinite")) is not None:
            out["nonfinite"] = (nf > 0, "non-finite loss or gradient, update skipped")
        if (gap := _get(m, "rollout/logprob_gap")) is not None:
            limit = max(self.gap_floor, self.gap_jump * _median(self.gaps),
                        self.gap_tail * max(self.gaps)) if self.gaps \
                else max(self.gap_floor, self.gap_first_max)
            jumped = gap > limit
            if not jumped:
                self.gaps = [*self.gaps, gap][-GAP_HISTORY:]
            out["sampler_sync"] = (jumped, f"rollout/logprob_gap={gap:.3g} > {limit:.3g}: is the "
                                           "generation engine serving the current weights?")
        return out

    _WHAT = {"zero_reward": "zero reward", "zero_variance": "every group has zero reward variance",
             "no_signal": "update skipped for lack of signal", "tool_errors": "tool calls failing",
             "replay_drought": "replay drought (empty buffer or nothing replayed)",
             "nonfinite": "non-finite updates",
             "sampler_sync": "the sampler's logprobs jumped away from the trainer's"}

    def update(self, step: int, metrics: Mapping[str, Any]) -> tuple[dict[str, float], list[str]]:
        """Fold in one step's metrics; returns the ``health/*`` counters and the warnings
        of alarms that start at this step (one line each; usually none)."""
        warnings = []
        for name, verdict in self._bad(metrics).items():
            if verdict is None:
                continue
            bad, seen = verdict
            self.counts[name] = self.counts[name] + 1 if bad else 0
            threshold = self.thresholds[name]
            if bad and threshold and self.counts[name] >= threshold:
                if name not in self.active:
                    self.active.add(name)
                    warnings.append(f"health alarm at step {step}: {self._WHAT[name]} for "
                                    f"{self.counts[name]} consecutive steps ({seen}); "
                                    f"{CHECKS[name]}")
            else:
                self.active.discard(name)
        out = {CHECKS[name]: float(n) for name, n in self.counts.items()}
        out["health/alarms"] = float(len(self.active))
        return out, warnings

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "active": sorted(self.active),
                "gaps": list(self.gaps)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore counters; tolerates an empty or older state (unknown checks are dropped)."""
        counts = state.get("counts", {})
        self.counts = {name: int(counts.get(name, 0)) for name in CHECKS}
        self.active = {name for name in state.get("active", ()) if name in CHECKS}
        self.gaps = [float(g) for g in state.get("gaps", ())][-GAP_HISTORY:]


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
