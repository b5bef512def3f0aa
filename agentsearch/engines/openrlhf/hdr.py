"""Headroom-Drift Replay inside OpenRLHF: an experience maker and a sample generator.

OpenRLHF's step (``PPOTrainer.fit``): ``SamplesGenerator.generate_samples`` plays prompts x
``n_samples_per_prompt``; ``train_step`` hands them to
``RemoteExperienceMaker.make_experience_batch`` (actor/reference forwards, then the group
advantages), the actor trains, weights go to vLLM. With replay the step is the local
trainer's (``trainer/loop.py``), under one config:

1. **generate** ``prompts_per_step`` fresh prompts' groups (``HDRSamplesGenerator``: always
   that many, whatever the scan accepts), ``rollout.batch_size = prompts_per_step + k_rep``
   being the step's group *slots*;
2. **make experience**: fresh rows through OpenRLHF's own ``make_experience``;
3. **scan** (``HDRExperienceMaker.scan``): our replay strategy (``agentsearch.replay``:
   ``hdr`` or any registered kind) scores the groups stored before this step with the
   actor's own teacher-forced forward (``forward`` on the actor group, policy tokens only)
   and accepts up to ``k_rep`` whole groups (Headroom order, Drift gate);
4. replayed rows are deep copies of the stored ones, with their stored generation-time
   ``action_log_probs`` (the old policy of the PPO ratio), reference logprobs, raw rewards
   and ``info`` keys; fresh + replayed (whole, contiguous groups) go through OpenRLHF's own
   ``compute_advantages_and_returns``: group estimators (``GROUP_ESTIMATORS``) give replayed
   rows exactly their stored advantages, because they see the same raw rewards of the same
   group; a batch-wide estimator would let replayed groups move fresh advantages: refused;
5. **padding**: the ``k_rep - k`` empty slots become 2-token rows whose ``action_mask`` is 0.
   OpenRLHF's ``aggregate_loss`` drops fully masked sequences from both loss modes and
   their normalisers, so they change nothing, and every step hands the actors exactly
   ``train.batch_size`` rows: one optimizer step per rollout, as locally, with OpenRLHF's
   fixed DeepSpeed accumulation;
6. **ingress**: this step's fresh groups, with their behaviour logprobs and advantages,
   are offered to the buffer (mixed-outcome groups are kept).

``replay/*`` and ``time/replay_scan`` go to the step's logs (``ppo_trainer.py``).

Alignment: OpenRLHF's ``action_mask`` and ``action_log_probs`` are ``[B, T-1]`` (position
``j`` scores token ``j+1``); a ``ReplayGroup`` is ``[n, T]`` aligned with ``token_ids``, so
column 0 (never a policy token) is prepended.
"""

from __future__ import annotations

import copy
import time
from dataclasses import fields

import torch

from agentsearch.engines.openrlhf.compat import import_openrlhf

import_openrlhf()
from openrlhf.trainer.ppo_utils.experience import Experience  # noqa: E402
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker  # noqa: E402
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator  # noqa: E402
from openrlhf.trainer.ray.vllm_engine import batch_vllm_engine_call  # noqa: E402

from agentsearch.replay import ReplayGroup  # noqa: E402

__all__ = ["HDRExperienceMaker", "HDRSamplesGenerator", "rows_to_group", "padding_row",
           "scan_batches", "GROUP_ESTIMATORS", "check_estimator"]

GROUP_ESTIMATORS = ("group_norm", "rloo", "dr_grpo")
"""Advantage estimators computed within a prompt's group only: replay needs one (a replayed
group's advantages are then recomputed exactly from its raw rewards, and fresh groups'
are untouched by replayed ones). ``reinforce_baseline`` also subtracts the group mean, but
then whitens over the whole batch: refused."""


def check_estimator(estimator: str) -> None:
    if estimator not in GROUP_ESTIMATORS:
        raise ValueError("replay on OpenRLHF needs a group advantage estimator "
                         f"{GROUP_ESTIMATORS}, got {estimator!r} (it normalises over the whole "
                         "batch, so replayed groups would change fresh groups' advantages)")


def _pad_left_col(x: torch.Tensor) -> torch.Tensor:
    """[n, T-1] -> [n, T] with a zero column 0 (OpenRLHF's action axis -> token axis)."""
    return torch.cat([x.new_zeros(x.shape[0], 1), x], dim=1)


def _width(batch: Experience, r: int) -> int:
    """Row ``r``'s own action-axis length in a right-padded micro-batch (its tokens - 1)."""
    return int(batch.attention_mask[r].sum()) - 1


def _rows_batch(rows: list[Experience], pad_token_id: int) -> Experience:
    return Experience.concat_experiences(rows, pad_token_id)


def scan_batches(rows: list, size: int, actors: int) -> tuple[list[list], int]:
    """``rows`` in micro-batches for one ``forward`` over an actor group of ``actors`` data
    ranks, and how many of them are real. OpenRLHF's ``async_run_method_batch`` refuses fewer
    batches than ranks ("Insufficient batch size"), so a short list is spread one row per
    batch and then padded with repeats of the last batch (their results are dropped)."""
    size = max(1, size)
    if -(-len(rows) // size) < actors:
        size = max(1, -(-len(rows) // actors))
    batches = [rows[i:i + size] for i in range(0, len(rows), size)]
    real = len(batches)
    batches += [batches[-1]] * max(0, actors - real)
    return batches, real


def padding_row(like: Experience, index: int) -> Experience:
    """A 2-token row with nothing to learn (``action_mask`` all 0, advantages 0), shaped like
    row 0 of ``like`` (same fields and ``info`` keys): an empty replay slot. OpenRLHF's
    ``aggregate_loss`` excludes fully masked sequences from the loss and its normalisers."""
    kw = {}
    for f in fields(Experience):
        v = getattr(like, f.name)
        if isinstance(v, torch.Tensor):
            v = v[:1]
            if Experience.is_step_tensor_field(f.name):
                v = v[:, : 2 if f.name in ("sequences", "attention_mask") else 1]
            v = v.clone()
        elif isinstance(v, dict):
            v = {k: (t[:1].clone() if isinstance(t, torch.Tensor) else t[:1]) for k, t in v.items()}
        elif isinstance(v, list) and f.name != "index":
            v = v[:1]
        kw[f.name] = v
    row = Experience(**kw)
    row.index = [index]
    row.attention_mask = torch.ones_like(row.attention_mask)
    row.action_mask = torch.zeros_like(row.action_mask, dtype=torch.bool)
    for name in ("advantages", "returns"):
        if getattr(row, name) is not None:
            setattr(row, name, torch.zeros_like(getattr(row, name)))
    if row.total_length is not None:
        row.total_length = torch.full_like(row.total_length, 2)
    if row.response_length is not None:
        row.response_length = torch.zeros_like(row.response_length)
    return row


def rows_to_group(key: str, rows: list[Experience], advantages: torch.Tensor,
                  step: int) -> ReplayGroup:
    """A ``ReplayGroup`` from one group's per-sample rows (each ``Experience`` with batch 1,
    ``action_log_probs`` = behaviour logprobs) and its per-row advantages ``[n]``."""
    batch = _rows_batch(rows, 0)
    mask = _pad_left_col(batch.action_mask.bool())                       # [n, T]
    lp = _pad_left_col(batch.action_log_probs.float())                   # [n, T]
    correct = [r.info.get("answer_correct") for r in rows]
    return ReplayGroup(prompt_id=key, token_ids=batch.sequences, action_mask=mask, gen_logprobs=lp,
                       advantages=advantages, rewards=torch.cat([r.rewards.float() for r in rows]),
                       answer_correct=None if any(c is None for c in correct)
                       else torch.cat([c.bool() for c in correct]), born_step=step)


class HDRExperienceMaker(RemoteExperienceMaker):
    """OpenRLHF's experience maker with a cross-step replay buffer (module doc)."""

    def __init__(self, *args, replay=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.replay = replay
        self.rows: dict[str, list[Experience]] = {}   # group key -> stored per-sample rows
        self.step = 0
        self.pending: list[str] = []                   # accepted at the last scan
        self.metrics: dict[str, float] = {}
        self.n_fresh = 0                               # fresh rows of the last batch (0..n_fresh-1)
        self._scanned_at = -1                          # the step the last scan was for

    # -- scan ---------------------------------------------------------------------------
    def _actor_logprobs(self, rows: list[Experience]) -> list[torch.Tensor]:
        """Current-policy logprobs of each row's tokens, ``[1, T_i - 1]`` each (one batched
        ``forward`` per micro-batch on the actor group)."""
        group = self.actor_model_group
        actors = max(1, len(getattr(group, "_actor_handlers", [None]))
                     // max(1, getattr(group, "duplicate_actors", 1)))
        chunks, real = scan_batches(rows, int(self.args.rollout.micro_batch_size), actors)
        batches = [_rows_batch(c, self.tokenizer.pad_token_id) for c in chunks]
        dup = self.args.ds.ring_attn_size * self.args.ds.tensor_parallel_size
        refs = group.async_run_method_batch(
            method_name="forward", sequences=[b.sequences for b in batches],
            action_mask=[b.action_mask for b in batches],
            attention_mask=[b.attention_mask for b in batches])
        out = []
        for b, lp in zip(batches[:real], self._flatten_results(refs, dup)[:real], strict=True):
            out += [lp[i:i + 1, : _width(b, i)] for i in range(lp.shape[0])]
        return out

    def score_fn(self, groups: list[ReplayGroup]) -> list[torch.Tensor]:
        """``ScoreFn`` for ``select``: ``[n, T]`` current logprobs per group (column 0 = 0)."""
        rows = [r for g in groups for r in self.rows[g.prompt_id]]
        lps = self._actor_logprobs(rows)
        out, i = [], 0
        for g in groups:
            n = g.n
            T = g.token_ids.shape[1]
            block = torch.zeros(n, T)
            for j in range(n):
                lp = lps[i + j][0].float()
                block[j, 1:1 + lp.numel()] = lp
            out.append(block)
            i += n
        return out

    def scan(self) -> int:
        """Select this step's replayed groups (only groups stored before it); returns how many."""
        t0 = time.perf_counter()
        sel = self.replay.select(self.score_fn, self.step)
        self._scanned_at = self.step
        self.pending = [g.prompt_id for g in sel.accepted]
        self.metrics = {**sel.stats, "time/replay_scan": time.perf_counter() - t0}
        return len(self.pending)

    # -- experience ---------------------------------------------------------------------
    def make_experience_batch(self, rollout_samples) -> list[Experience]:
        n = self.args.rollout.n_samples_per_prompt
        slots = self.args.rollout.batch_size * n
        fresh_rows = [copy.deepcopy(s) for s in rollout_samples]      # raw rewards, before shaping
        fresh = self.make_experience(self.split_rollout_samples(rollout_samples))
        behaviour = self._per_row(fresh, ("action_log_probs", "base_action_log_probs", "kl"))
        if self._scanned_at != self.step:  # normally here; a caller may have scanned already
            self.scan()
        replayed = [copy.deepcopy(r) for key in self.pending for r in self.rows[key]]
        if len(rollout_samples) + len(replayed) > slots:
            raise ValueError(f"{len(rollout_samples)} fresh + {len(replayed)} replayed rows exceed "
                             f"the step's {slots} slots (rollout.batch_size x "
                             "n_samples_per_prompt)")
        for i, r in enumerate(replayed):
            r.index = [len(rollout_samples) + i]
        size = max(1, int(self.args.rollout.micro_batch_size))
        replay_batches = [_rows_batch(replayed[i:i + size], self.tokenizer.pad_token_id)
                          for i in range(0, len(replayed), size)]
        experiences = self.compute_advantages_and_returns(fresh + replay_batches)
        advantages = self._per_row(experiences, ("advantages",))
        first = len(rollout_samples) + len(replayed)
        pads = [padding_row(experiences[0], first + i) for i in range(slots - first)]
        experiences += [_rows_batch(pads[i:i + size], self.tokenizer.pad_token_id)
                        for i in range(0, len(pads), size)]
        for row, extra in zip(fresh_rows, behaviour, strict=True):
            row.action_log_probs, row.kl = extra["action_log_probs"], extra["kl"]
            row.base_action_log_probs = extra["base_action_log_probs"]
            row.info = {**row.info, **extra["info"]}   # the keys make_experience adds
        self._ingress(fresh_rows, [a["advantages"] for a in advantages[: len(fresh_rows)]], n)
        self.metrics.update({"replay/rows": float(len(replayed)),
                             "replay/fresh_rows": float(len(fresh_rows)),
                             "replay/padding_rows": float(len(pads)), **self.replay.metrics()})
        self.n_fresh = len(fresh_rows)
        self.pending = []
        self.step += 1
        return experiences

    @staticmethod
    def _per_row(batches: list[Experience], names: tuple[str, ...]) -> list[dict]:
        """Per-sample slices (by ``index``) of step tensors of micro-batched experiences, plus
        ``info['kl']``/``info['logprobs_diff']`` when asked for ``kl``."""
        out: dict[int, dict] = {}
        for b in batches:
            for r, idx in enumerate(b.index):
                width = _width(b, r)
                row = {}
                for name in names:
                    t = getattr(b, name)
                    row[name] = None if t is None else t[r:r + 1, :width].clone()
                if "kl" in names:
                    row["info"] = {k: b.info[k][r:r + 1].clone() for k in ("kl", "logprobs_diff")}
                out[idx] = row
        return [out[i] for i in sorted(out)]

    def _ingress(self, rows: list[Experience], advantages: list[torch.Tensor], n: int) -> None:
        """Offer this step's fresh groups (rows with behaviour logprobs; advantages
        ``[1, A_i]`` per row, constant over a row's action tokens for group estimators)."""
        groups = []
        for g in range(len(rows) // n):
            key = f"{self.step}:{g}"
            block = rows[g * n:(g + 1) * n]
            adv = torch.stack([advantages[g * n + j][0][block[j].action_mask[0].bool()][0]
                               if block[j].action_mask.any() else torch.tensor(0.0)
                              for j in range(n)])
            self.rows[key] = block
            groups.append(rows_to_group(key, block, adv, self.step))
        self.metrics["replay/ingress"] = float(self.replay.add(groups, self.step))
        live = ({g.prompt_id for g in self.replay.groups} if hasattr(self.replay, "groups")
                else set(self.rows))
        self.rows = {k: v for k, v in self.rows.items() if k in live}

    # -- checkpoint ---------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"replay": self.replay.state_dict(), "rows": self.rows, "step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.replay.load_state_dict(state["replay"])
        self.rows, self.step = state["rows"], int(state["step"])


class HDRSamplesGenerator(SamplesGenerator):
    """OpenRLHF's sample generator playing ``fresh`` prompts per step (``prompts_per_step``)
    whatever the replay accepts; ``rollout.batch_size`` counts the step's slots."""

    fresh: int = 0

    def generate_samples(self, **generate_kwargs):
        if getattr(self, "_dataloader_iter", None) is None:
            self._dataloader_iter = iter(self.prompts_dataloader)
        if self.args.vllm.enable_sleep:
            batch_vllm_engine_call(self.vllm_engines, "wake_up")
        experiences, consumed, exhausted = self._generate_vllm(
            dataloader_iter=self._dataloader_iter,
            num_prompts=self.fresh or self.args.rollout.batch_size,
            dynamic_filtering=False, **generate_kwargs)
        if self.args.vllm.enable_sleep:
            batch_vllm_engine_call(self.vllm_engines, "sleep")
        if exhausted:
            self._dataloader_iter = None
        return experiences, None, consumed, exhausted
