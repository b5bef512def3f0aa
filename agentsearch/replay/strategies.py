"""Replay strategies: one small Protocol, a registry, and ``make_replay``.

The trainer only needs ``add``, ``select``, ``metrics``, ``state_dict`` and
``load_state_dict``; any object with those is a ``ReplayStrategy``. The built-in kinds are
all one ``HeadroomDriftBuffer`` configured with a scan order and a gate, so they share
every line of ingress, eviction, scanning, statistics and checkpointing:

- ``none``: no replay (stores nothing, selects nothing);
- ``naive``: k_rep groups uniformly from the buffer, no gate, no scoring;
- ``recency``: the newest k_rep groups, no gate, no scoring;
- ``headroom_only``: HDR's order (cached headroom, descending), no gate;
- ``drift_only``: HDR's gate, random order;
- ``hdr``: Headroom-Drift Replay. Variants by argument: ``drift_kind="l1"`` (the L1
  gate baseline), ``headroom_weighting="advantage"``;
- ``success_only``: ``naive``'s choice (k_rep groups uniformly, no gate, no scoring), but
  only the groups' *successful* responses are replayed, with their stored (positive)
  advantages: success-only replay in the manner of RLEP (arXiv 2507.07451) and
  self-imitation; the failed responses stay in the buffer, unused;
- ``per``: prioritized replay over groups: k_rep groups drawn without replacement in
  proportion to (mean |A|)^``per_alpha``, no gate, no scoring;
- ``fresh_per``: FreshPER (arXiv 2604.16918): ``per``'s draw with each priority discounted
  by exp(-age / ``age_tau``) (age in steps since the group was generated);
- ``recycle``: query recycling (arXiv 2606.10709): nothing is stored or replayed; the tasks
  whose group had zero reward variance go back into the prompt order, to be drawn again
  ``recycle_after`` steps later (``recycled()``, which the trainer hands to its sampler).

Example::

    buf = make_replay("hdr", capacity=512, k_rep=128, tau=1e-3)
    buf = make_replay("naive", capacity=512, k_rep=128, seed=1)

Every kind, built-in or not, is an entry of one registry: register your own with
``register_replay("mine", factory)`` (or ``@register_replay("mine")``); ``factory(**kwargs)``
must return a ``ReplayStrategy``, and ``replay.kind=mine`` in a config then selects it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from agentsearch.core.registry import Registry
from agentsearch.replay.buffer import HeadroomDriftBuffer, ScoreFn, Selection
from agentsearch.replay.groups import ReplayGroup

__all__ = ["ReplayStrategy", "make_replay", "register_replay", "unregister_replay", "replay_kinds",
           "BUILTIN_KINDS"]


@runtime_checkable
class ReplayStrategy(Protocol):
    """What the trainer calls on a replay strategy each step."""

    def add(self, groups: Sequence[ReplayGroup], step: int) -> int:
        """Offer this step's groups after the update; return how many were admitted."""
        ...

    def select(self, score_fn: ScoreFn | None, step: int, *, extra: int = 0) -> Selection:
        """Choose groups to replay at ``step``, before the update (``extra`` more than usual:
        the trainer passes it only when it is > 0, so a strategy without top-up may omit it)."""
        ...

    def metrics(self) -> dict[str, float]:
        """Buffer-level ``replay/...`` metrics."""
        ...

    def state_dict(self) -> dict[str, Any]:
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ...

    def __len__(self) -> int:
        ...


# kind -> (scan order, gate)
BUILTIN_KINDS: dict[str, tuple[str, bool]] = {
    "none": ("recency", False),
    "naive": ("random", False),
    "recency": ("recency", False),
    "headroom_only": ("headroom", False),
    "drift_only": ("random", True),
    "hdr": ("headroom", True),
    "per": ("priority", False),
    "fresh_per": ("priority", False),
}

SIGNAL_ATOL = 1e-8  # as agentsearch.algorithms.advantages.SIGNAL_ATOL (a test keeps them equal)

_REGISTRY: Registry[Callable[..., ReplayStrategy]] = Registry(
    "replay kind", "agentsearch.replay.register_replay")


def register_replay(name: str, factory: Callable[..., ReplayStrategy] | None = None, *,
                    overwrite: bool = False, _builtin: bool = False):
    """Make ``make_replay(name, **kwargs)`` (and ``replay.kind=name`` in a config) call
    ``factory(**kwargs)``. Use as a call, ``register_replay("mine", factory)``, or as a
    decorator, ``@register_replay("mine")``; returns the factory.

    The trainer (``build_replay``) passes ``capacity``, ``k_rep``, ``tau``, ``scan_chunk``,
    ``headroom_weighting``, ``drift_kind``, ``success_threshold``, ``per_alpha``, ``age_tau``
    and ``seed`` (``recycle_after`` only to ``recycle``), so a factory should take
    ``**kwargs``. Built-in names are reserved; registering a taken name again needs
    ``overwrite=True``. ``unregister_replay(name)`` removes it.
    """
    return _REGISTRY.register(name, factory, overwrite=overwrite, builtin=_builtin)


def unregister_replay(name: str) -> None:
    """Remove a registered (non-built-in) replay kind."""
    _REGISTRY.remove(name)


def replay_kinds() -> list[str]:
    """Every name ``make_replay`` accepts: the built-ins, then the registered ones."""
    return _REGISTRY.names()


def make_replay(kind: str, **kwargs: Any) -> ReplayStrategy:
    """A replay strategy by name: ``factory(**kwargs)`` of the registered ``kind``.

    Built-in kinds take ``HeadroomDriftBuffer``'s arguments: ``capacity`` and ``k_rep``
    (required, except for ``none``), ``tau`` (required for the gated kinds ``hdr`` and
    ``drift_only``; ignored otherwise), and optionally ``scan_chunk``,
    ``headroom_weighting``, ``drift_kind``, ``success_threshold``, ``seed``,
    ``drought_steps``, ``per_alpha``, ``age_tau`` (``per`` fixes it at inf). ``order`` and
    ``gate`` are fixed by the kind.
    """
    if kind != "recycle":  # its own knob: other kinds (a user's too) never see it
        kwargs.pop("recycle_after", None)
    return _REGISTRY.get(kind)(**kwargs)


def _builtin(kind: str) -> Callable[..., ReplayStrategy]:
    """The factory of a built-in kind: one ``HeadroomDriftBuffer`` with the kind's order and
    gate."""
    order, gate = BUILTIN_KINDS[kind]

    def factory(**kwargs: Any) -> ReplayStrategy:
        for fixed in ("order", "gate"):
            if fixed in kwargs:
                raise ValueError(f"replay kind {kind!r} fixes {fixed}; pick the kind that has the "
                                 f"{fixed} you want ({BUILTIN_KINDS})")
        if kind == "none":
            kwargs.update(capacity=0, k_rep=0)
        missing = [k for k in ("capacity", "k_rep") if k not in kwargs]
        if gate and "tau" not in kwargs:
            missing.append("tau")
        if missing:
            raise ValueError(f"replay kind {kind!r} needs {missing} (e.g. capacity=512, k_rep=64, "
                             "tau=1e-2 as in the paper's search setting)")
        kwargs.setdefault("tau", math.inf)
        if kind == "per":
            kwargs["age_tau"] = math.inf  # plain PER: no freshness discount
        return HeadroomDriftBuffer(order=order, gate=gate, name=kind, **kwargs)

    factory.__name__ = factory.__qualname__ = f"make_{kind}"
    return factory


class SuccessOnlyReplay:
    """``success_only``: a ``naive`` buffer whose selections keep only the successful
    responses of each chosen group (module docstring). Everything else (ingress, eviction,
    metrics, checkpoints) is the buffer's."""

    def __init__(self, **kwargs: Any):
        self.buffer = _builtin("naive")(**kwargs)
        self.buffer.name = "success_only"

    def add(self, groups: Sequence[ReplayGroup], step: int) -> int:
        return self.buffer.add(groups, step)

    def select(self, score_fn: ScoreFn | None, step: int, *, extra: int = 0) -> Selection:
        sel = self.buffer.select(score_fn, step, extra=extra)
        kept = [_successful_rows(g, self.buffer.success_threshold) for g in sel.accepted]
        sel.accepted = [g for g in kept if g is not None]
        sel.stats["replay/success_rows"] = float(sum(g.token_ids.shape[0] for g in sel.accepted))
        return sel

    def metrics(self) -> dict[str, float]:
        return self.buffer.metrics()

    def state_dict(self) -> dict[str, Any]:
        return self.buffer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state)

    def __len__(self) -> int:
        return len(self.buffer)


def _successful_rows(g: ReplayGroup, threshold: float) -> ReplayGroup | None:
    """A new group of ``g``'s successful responses only (their stored advantages and
    logprobs), or None when it has none. ``g`` itself, stored, is left as it is."""
    rows = g.successes(threshold).nonzero().flatten()
    if rows.numel() == 0:
        return None
    pick = lambda t: None if t is None else t[rows]  # noqa: E731
    return ReplayGroup(prompt_id=g.prompt_id, token_ids=g.token_ids[rows],
                       action_mask=g.action_mask[rows], gen_logprobs=g.gen_logprobs[rows],
                       advantages=g.advantages[rows], rewards=g.rewards[rows],
                       answer_correct=pick(g.answer_correct), born_step=g.born_step,
                       cached_headroom=g.cached_headroom, replay_count=g.replay_count,
                       pixel_values=None if g.pixel_values is None
                       else [g.pixel_values[int(i)] for i in rows])


class QueryRecycling:
    """``recycle``: query recycling (module docstring). ``add`` notes the tasks of the groups
    whose rewards were all equal (no GRPO advantage); ``recycled()`` hands them over once
    (the trainer puts them back into its task order, ``recycle_after`` steps ahead); nothing
    is stored or selected, so ``select`` returns an empty selection and costs nothing."""

    def __init__(self, *, recycle_after: int = 4, **_: Any):
        if recycle_after < 1:
            raise ValueError(f"recycle_after must be >= 1 step, got {recycle_after}")
        self.recycle_after = int(recycle_after)
        self._pending: list[str] = []
        self._last = self._total = 0

    def add(self, groups: Sequence[ReplayGroup], step: int) -> int:
        # rewards [n] within SIGNAL_ATOL of each other (algorithms.advantages.has_signal, which
        # sits above this layer): no GRPO advantage
        flat = [str(g.prompt_id) for g in groups
                if float(g.rewards.max() - g.rewards.min()) <= SIGNAL_ATOL]
        self._pending += flat
        self._last, self._total = len(flat), self._total + len(flat)
        return 0

    def recycled(self) -> list[str]:
        """The task ids noted since the last call (each handed over once)."""
        out, self._pending = self._pending, []
        return out

    def select(self, score_fn: ScoreFn | None, step: int, *, extra: int = 0) -> Selection:
        return Selection(stats={"replay/accepted": 0.0, "replay/candidates": 0.0})

    def metrics(self) -> dict[str, float]:
        return {"replay/recycled": float(self._last), "replay/recycled_total": float(self._total),
                "replay/buffer_size": 0.0}

    def state_dict(self) -> dict[str, Any]:
        return {"pending": list(self._pending), "last": self._last, "total": self._total}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._pending = [str(x) for x in state["pending"]]
        self._last, self._total = int(state["last"]), int(state["total"])

    def __len__(self) -> int:
        return 0


for _kind in BUILTIN_KINDS:  # the built-ins go through the same registry as a user's kinds
    register_replay(_kind, _builtin(_kind), _builtin=True)
del _kind
register_replay("success_only", SuccessOnlyReplay, _builtin=True)
register_replay("recycle", QueryRecycling, _builtin=True)
