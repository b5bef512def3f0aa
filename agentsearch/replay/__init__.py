"""Headroom-Drift Replay (arXiv 2609.03941) and its baselines, in pure torch.

Which stored groups are worth replaying? Those whose tokens still have room to move in
the direction their advantage asks for (**headroom**) and whose generation-time
logprobs are still close to the current policy's (**drift** <= tau), so the importance
ratio of the replayed tokens stays trustworthy.

    from agentsearch.replay import HeadroomDriftBuffer, ReplayGroup
    from agentsearch.models.logprobs import make_score_fn

    buf = HeadroomDriftBuffer(capacity=512, k_rep=64, tau=1e-2)
    sel = buf.select(make_score_fn(model), step)   # sel.accepted, sel.scanned, sel.stats
    ...update on fresh groups + sel.accepted...
    buf.add(groups, step)                           # ingress after the update

Modules: ``groups`` (``ReplayGroup``), ``scores`` (``headroom``, ``policy_drift``),
``buffer`` (``HeadroomDriftBuffer``, ``Selection``), ``strategies`` (``make_replay`` and
the baselines), ``stats`` (diagnostics).
"""

from __future__ import annotations

from agentsearch.replay.buffer import HeadroomDriftBuffer, ScoreFn, Selection
from agentsearch.replay.groups import ReplayGroup
from agentsearch.replay.scores import (
    headroom,
    headroom_batched,
    pad_stack,
    policy_drift,
    policy_drift_batched,
)
from agentsearch.replay.stats import ReplayStats, exposure_concentration
from agentsearch.replay.strategies import (
    ReplayStrategy,
    make_replay,
    register_replay,
    replay_kinds,
    unregister_replay,
)

__all__ = [
    "ReplayGroup", "HeadroomDriftBuffer", "Selection", "ScoreFn", "headroom", "policy_drift",
    "headroom_batched", "policy_drift_batched", "pad_stack", "ReplayStats",
    "exposure_concentration", "ReplayStrategy", "make_replay", "register_replay",
    "unregister_replay", "replay_kinds",
]
