"""Warm start for ``agentsearch/Vision-v0``: SFT on a scripted population's trajectories.

The population (``VISION_STRATEGIES``) differs in whether it *looks*, and how closely:

- ``look``: answers with the task's gold answer (the picture decides it);
- ``crop``: first zooms in (``<crop> REGION </crop>``, the quarter the question names, or
  ``full``), then answers with the gold answer (the enlarged region decides it);
- ``guess``: answers without looking closely: for "which is bigger, the green square or
  the blue square?" the first colour named; for a ``quarter`` question one of the picture's
  colours at random (a glance shows the colours, not where they are); otherwise a fixed
  plausible answer per question kind ("3" for counts, the most common colour, the first
  bar label).

All play the real env through ``ScriptedBackend`` (so the token layout is exactly a
sampled one: prompt, turns, observations) and the loss covers policy tokens only, with the
episode's images encoded (``ImageTextTokenizer.pixel_values``). A policy imitating the mix
answers some questions by looking closely and some at a glance; RL has to find that looking
closely pays.
The search warm start (``sft.py``) is separate because its functions are part of the
shipped base's fingerprint.
"""

from __future__ import annotations

import random
import re

import torch

from agentsearch.envs.vision_tasks import QUARTERS
from agentsearch.rollout import Episode, EventLoop, SamplingParams, ScriptedBackend, rollout
from agentsearch.trainer.logprobs import batch_pixels, token_logprobs
from agentsearch.trainer.losses import sft_loss
from agentsearch.trainer.update import Row, pad_rows

__all__ = ["VISION_STRATEGIES", "guess_answer", "crop_region", "vision_oracle_episodes", "vision_sft_train",
           "vision_warm_start"]

VISION_STRATEGIES = ("look", "crop", "guess")
_GUESS = {"count": "3", "left_of": "red"}


def guess_answer(task: dict, rng: random.Random | None = None) -> str:
    """The ``guess`` agent's answer: from the question alone, or for ``quarter`` a colour of the
    picture drawn with ``rng`` (default: seeded by the task id)."""
    kind = task.get("type")
    if kind == "quarter":
        rng = rng or random.Random(str(task.get("id")))
        return rng.choice([o["colour"] for o in task["spec"]["shapes"]])
    if kind == "bigger":
        m = re.search(r"the (\w+) \w+ or", str(task["question"]))
        if m:
            return m.group(1)
    if kind == "bar":
        return "A"
    return _GUESS.get(kind, "3")


def crop_region(task: dict) -> str:
    """The region the ``crop`` agent zooms into: the quarter a ``quarter`` question names."""
    q = str(task.get("question", ""))
    return next((r for r in QUARTERS if f"the {r} quarter" in q), "full")


def _script(strategy: str, task: dict, rng: random.Random, turn_format: str = "tags"):
    """``policy(conversation) -> turn`` of one agent on one task (one episode: it is called
    once per turn)."""
    if strategy == "guess":
        answer = f"<answer> {guess_answer(task, rng)} </answer>"
        return lambda conversation: answer
    answer = f"<answer> {task['golden_answers'][0]} </answer>"
    if strategy == "look":
        return lambda conversation: answer
    region = crop_region(task)
    crop = (f'<tool_call>{{"name": "crop", "arguments": {{"box": "{region}"}}}}</tool_call>'
            if turn_format == "json" else f"<crop> {region} </crop>")
    turns = iter([crop])
    return lambda conversation: next(turns, answer)


def vision_oracle_episodes(env_factory, tok, tasks: list[dict], *, strategies: dict[str, float],
                           seed: int = 0, max_turns: int = 2, max_seq_len: int = 1024,
                           turn_format: str = "tags") -> list[Episode]:
    """One scripted episode per task, by an agent (``look``/``crop``/``guess``) drawn by
    ``strategies``; ``info["strategy"]`` says which. ``turn_format``: the env's (``tags``:
    ``<crop> … </crop>``; ``json``: a ``<tool_call>``)."""
    unknown = set(strategies) - set(VISION_STRATEGIES)
    if unknown or abs(sum(strategies.values()) - 1) > 1e-6:
        raise ValueError(f"sft.strategies for vision must be shares of {VISION_STRATEGIES} summing "
                         f"to 1, got {strategies}")
    rng = random.Random(seed)
    names, weights = list(strategies), list(strategies.values())
    episodes = []
    with EventLoop() as loop:  # one loop for all the per-task rollouts, not one each
        for task in tasks:
            strategy = rng.choices(names, weights)[0]
            backend = ScriptedBackend(tok, _script(strategy, task, rng, turn_format))
            (ep,), _ = rollout(env_factory, [task], backend, SamplingParams(max_new_tokens=64),
                               max_turns=max_turns, max_seq_len=max_seq_len, loop=loop)
            ep.info["strategy"] = strategy
            episodes.append(ep)
    return episodes


def vision_sft_train(model, tok, episodes: list[Episode], *, steps: int, lr: float, batch_size: int,
                     seed: int = 0, log=None) -> dict[str, float]:
    """``steps`` AdamW steps of NLL on policy tokens of random batches, images encoded."""
    device = next(model.parameters()).device
    rows = [Row(torch.tensor(e.token_ids), torch.tensor(e.action_mask, dtype=torch.bool),
                torch.zeros(len(e.token_ids)), 0.0, False,
                tok.pixel_values(e.info["images"]) if e.info.get("images") else None) for e in episodes]
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.9, 0.99))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(steps // 10, 1)) * max(0.1, 1 - s / max(steps, 1)))
    rng = random.Random(seed)
    model.train()
    loss_v = float("nan")
    for step in range(steps):
        batch = rng.sample(rows, min(batch_size, len(rows)))
        mb = pad_rows(batch, device)
        pixels = batch_pixels(model, mb["ids"], [r.pixel_values for r in batch], device)
        lp = token_logprobs(model, mb["ids"], mb["attn"], target_mask=mb["mask"], pixel_values=pixels)
        loss = sft_loss(lp, mb["mask"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        loss_v = loss.item()
        if log is not None:
            log(step, loss_v)
    return {"sft/loss": loss_v, "sft/episodes": float(len(episodes)), "sft/steps": float(steps)}


def vision_warm_start(cfg, model, tok, envs) -> dict[str, float]:
    """The ``sft`` section for a vision env, in up to two stages of SFT on scripted episodes of
    the train split: ``sft.pretrain_steps`` on ``sft.pretrain_episodes`` episodes of the
    population ``sft.pretrain_strategies`` (e.g. half of them cropping: perception is learnt
    here), then ``sft.steps`` on ``sft.episodes`` episodes of ``sft.strategies`` (the mix the
    RL run starts from). Shares are of ``look``/``crop``/``guess``."""
    from agentsearch.trainer.sft import _progress

    s = cfg.sft
    env = envs[0]
    out: dict[str, float] = {}
    stages = [("pretrain", s.pretrain_steps, s.pretrain_episodes, s.pretrain_strategies or s.strategies,
               s.pretrain_lr or s.lr, s.pretrain_batch_size or s.batch_size, cfg.seed + 1),
              ("sft", s.steps, s.episodes, s.strategies, s.lr, s.batch_size, cfg.seed)]
    for name, steps, n_episodes, shares, lr, batch_size, seed in stages:
        if steps <= 0:
            continue
        tasks = random.Random(seed).sample(env.tasks, min(n_episodes, len(env.tasks)))
        eps = vision_oracle_episodes(lambda: env, tok, tasks, strategies=dict(shares), seed=seed,
                                     max_turns=cfg.max_turns, max_seq_len=cfg.max_seq_len,
                                     turn_format=env.config.turn_format)
        res = vision_sft_train(model, tok, eps, steps=steps, lr=lr, batch_size=batch_size, seed=seed,
                               log=_progress(name, steps, s.log_every))
        prefix = "sft/pretrain_" if name == "pretrain" else "sft/"  # the search warm start's keys
        out.update({prefix + k.split("/", 1)[1]: v for k, v in res.items()})
        for strategy in VISION_STRATEGIES:
            out[f"{prefix}{strategy}_share"] = sum(e.info["strategy"] == strategy for e in eps) / max(len(eps), 1)
    return out
