"""TRL's side of ``scripts/bench_vs_trl.py`` (issue 51): agentsearch's search task as a TRL
``environment_factory`` environment, its reward, a ``GRPOTrainer`` on the same policy, and the
check that both systems put the same tokens in front of the model and mask the same ones.

TRL 1.16 comes from the ``peers`` extra (``pip install -e .[peers]``); nothing in the
``agentsearch`` package imports it. What the two systems share, so that a difference in speed is
a difference in the trainers:

- the policy: ``agentsearch.models.load_model`` (SmolLM2 with agentsearch's ChatML tool template
  as its ``chat_template``), the same warm-start adapter merged in;
- the prompt: the env's own ``instructions(task)`` messages, rendered by TRL with the tool schema
  TRL derives from ``SearchTaskEnv.search``'s signature and docstring (written to equal the
  ``search`` tool's schema; the equivalence check proves it does);
- the tool: the env's ``search`` tool itself (same retriever, same result formatting and
  truncation), called through ``TextEnv._call_tool``;
- the reward: the env's parser and scorer on the final turn (``reward/answer`` exact match, minus
  ``format_penalty`` for a malformed final turn; ``answer_reward``).

What differs, by design of each trainer: TRL ends a conversation at the first turn that makes no
parseable tool call (agentsearch answers a malformed turn with an error observation and goes on),
and runs an episode's tool calls one after another on the main thread.

TRL's tool-call parser is picked by ``add_response_schema`` from a list of known chat templates;
agentsearch's ChatML template writes Qwen's ``<tool_call>\\n{json}\\n</tool_call>``, so the
tokenizer is given TRL's Qwen3 ``response_template`` up front (``tool_parsing_tokenizer``).
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentsearch.envs.rewards import step_rewards
from agentsearch.envs.text_env import run_sync
from agentsearch.envs.tools.latency import lognormal_s
from agentsearch.trainer.metrics import memory_metrics

__all__ = ["SearchTaskEnv", "env_factory", "answer_reward", "task_rows",
           "tool_parsing_tokenizer", "split_turns", "trl_config", "save_merged", "build_trainer",
           "run_trl"]


class SearchTaskEnv:
    """One TRL rollout's environment: an agentsearch ``TextEnv`` (a JSON-format search env) whose
    ``search`` tool TRL calls. ``reset(**row)`` starts the row's task and adds nothing to the
    prompt (the row's ``prompt`` is already the env's instructions). ``latency``
    (``{"mean_s", "sigma"}``): each call also waits a log-normal delay, as a remote search API
    would make TRL's (synchronous) tool call wait."""

    def __init__(self, env, latency: dict | None = None, seed: int = 0,
                 clock: dict | None = None) -> None:
        self.env, self.latency, self.clock = env, latency, clock
        self.rng = random.Random(seed)

    def reset(self, **row) -> None:
        self.env.reset(options={"task": {k: row[k] for k in ("id", "question", "golden_answers",
                                                             "type") if k in row}})
        return None

    def search(self, query: str):
        """Search the encyclopedia. Returns the most relevant passages for a query.

        Args:
            query: the search query
        """
        t0 = time.perf_counter()
        try:  # a call that raises still spent its seconds in the tool
            if self.latency:
                time.sleep(lognormal_s(self.rng, self.latency["mean_s"], self.latency["sigma"]))
            out, _latency, _error = run_sync(
                self.env._call_tool("search", {"query": query}, {"infra_errors": 0}))
        finally:
            if self.clock is not None:
                self.clock["env"] = self.clock.get("env", 0.0) + time.perf_counter() - t0
        return out


def env_factory(env_id: str, latency: dict | None = None, clock: dict | None = None,
                **env_kwargs):
    """A zero-argument factory of ``SearchTaskEnv`` over ``make_env(env_id, **env_kwargs)``
    (TRL's ``environment_factory``); each instance draws its latencies from its own seed and
    adds its tool seconds to ``clock["env"]``."""
    import agentsearch

    made = [0]

    def make() -> SearchTaskEnv:
        made[0] += 1
        return SearchTaskEnv(agentsearch.make_env(env_id, **env_kwargs), latency, seed=made[0],
                             clock=clock)

    return make


def _final_text(completion: list[dict]) -> tuple[str, bool]:
    """The last assistant message's text and whether it (still) calls a tool."""
    for message in reversed(completion):
        if message.get("role") == "assistant":
            content = message.get("content") or ""
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content), bool(message.get("tool_calls"))
    return "", False


def answer_reward(completions: list[list[dict]], environments: list[SearchTaskEnv],
                  **_: Any) -> list[float]:
    """Each rollout's reward as agentsearch's env gives its last turn: ``reward/answer`` (exact
    match of the ``<answer>``) plus ``reward/format`` (``-format_penalty`` when the final turn is
    neither an answer nor a tool call). A rollout that ends still calling a tool (out of turns)
    gets 0, as a truncated agentsearch episode does."""
    out = []
    for completion, wrapper in zip(completions, environments, strict=True):
        env = wrapper.env
        text, calls = _final_text(completion)
        if calls:
            out.append(0.0)
            continue
        turn = env.parser.parse(text)
        answer = env.score(turn.answer, env.task) if turn.kind == "answer" else None
        rewards = step_rewards(answer=answer, malformed=turn.kind == "error",
                               format_penalty=env.config.format_penalty)
        out.append(float(sum(rewards.values())))
    return out


def task_rows(env, tasks: list[dict]) -> list[dict]:
    """TRL dataset rows: the env's own prompt messages for each task, and the task's fields
    (which TRL passes to ``reset`` and to the reward)."""
    rows = []
    for task in tasks:
        row = {"prompt": env.instructions(task), "id": str(task.get("id", "")),
               "question": str(task["question"]),
               "golden_answers": [str(g) for g in task["golden_answers"]]}
        if "type" in task:
            row["type"] = str(task["type"])
        rows.append(row)
    return rows


def tool_parsing_tokenizer(tok):
    """``tok`` with TRL's Qwen3 tool-call parser (``response_template``, or the legacy
    ``response_schema`` on an older transformers): agentsearch's ChatML template is not among
    the templates ``add_response_schema`` recognises, but writes calls the way Qwen does."""
    from trl import chat_template_utils as ctu

    if getattr(ctu, "_SUPPORTS_RESPONSE_TEMPLATE", True):
        tok.response_template = ctu.qwen3_template
    else:
        tok.response_schema = ctu.qwen3_schema
    return tok


def split_turns(completion_ids: list[int], tool_mask: list[int]) -> list[list[int]]:
    """The model's turns in a TRL completion: the runs of ``tool_mask`` 1 (tool results are 0)."""
    turns: list[list[int]] = []
    prev = 0
    for tid, m in zip(completion_ids, tool_mask, strict=True):
        if m:
            if not prev:
                turns.append([])
            turns[-1].append(tid)
        prev = m
    return turns


def trl_config(s: dict, out: Path, seed: int, **over):
    """``GRPOConfig`` for the shared settings ``s`` (``bench_vs_trl.SETTINGS``), every one that
    differs from TRL's default given explicitly: one optimizer step per ``prompts x group``
    generation batch, constant lr, Adam betas (0.9, 0.999), clip 0.2 both ways, ``dapo``
    (token-level) loss, no KL, fp32 on the CPU, TRL's default gradient checkpointing (without
    it the TRL process reached 24.2 GB of anonymous memory in its fourth step, 8 prompts x 8,
    and the kernel killed it: 2026-12-07, this 24 GB machine), the dataset's order kept (the
    rows are already in agentsearch's sampler order)."""
    from trl import GRPOConfig

    kw = dict(
        output_dir=str(out), use_cpu=True, bf16=False, report_to=[], seed=seed,
        per_device_train_batch_size=s["group"], gradient_accumulation_steps=s["prompts"],
        num_generations=s["group"], shuffle_dataset=False,
        max_completion_length=s["max_seq_len"] - s["prompt_allowance"],
        generation_kwargs={"max_new_tokens": s["max_new_tokens"]},
        max_tool_calling_iterations=s["max_turns"] - 1, temperature=s["temperature"],
        top_p=1.0, learning_rate=s["lr"], lr_scheduler_type="constant", warmup_steps=0,
        adam_beta1=0.9, adam_beta2=0.999, weight_decay=0.0, max_grad_norm=1.0,
        epsilon=s["clip"], epsilon_high=s["clip"], loss_type="dapo", beta=0.0,
        scale_rewards="group", gradient_checkpointing=True, logging_steps=1,
        save_strategy="steps", save_steps=s["eval_every"], max_steps=s["max_steps"])
    kw.update(over)
    return GRPOConfig(**kw)


def save_merged(model, tok, folder: Path) -> Path:
    """The policy as one plain model (the LoRA so far merged into a copy) in ``folder``, for
    ``agentsearch eval init_from=folder``."""
    merged = copy.deepcopy(model).merge_and_unload()
    merged.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


def time_phases(trainer, clock: dict) -> None:
    """Add the seconds of TRL's rollout parts to ``clock`` as they run: ``generate`` (the
    multi-turn generation, tool calls included), ``reward``, ``rollout`` (generation, rewards
    and the old-policy logprobs: ``_generate_and_score_completions``). TRL itself reports them
    only to W&B/MLflow (``profiling_context``)."""
    for method, key in (("_generate", "generate"), ("_calculate_rewards", "reward"),
                        ("_generate_and_score_completions", "rollout")):
        inner = getattr(trainer, method)

        def timed(*args, _inner=inner, _key=key, **kwargs):
            t0 = time.perf_counter()
            try:
                return _inner(*args, **kwargs)
            finally:
                clock[_key] = clock.get(_key, 0.0) + time.perf_counter() - t0

        setattr(trainer, method, timed)


def step_phases(clock: dict, step_s: float) -> dict:
    """One optimizer step's seconds by phase, named as agentsearch's (``time/*``), from the
    ``clock`` of ``time_phases`` and the tools: ``generate`` without the tool calls, ``env``
    (tool calls), ``reward``, ``logprobs`` (the rest of the rollout: old-policy logprobs),
    ``update`` (the step past the rollout: forward, backward, optimizer)."""
    get = lambda k: clock.get(k, 0.0)  # noqa: E731
    return {"time/step": step_s, "time/generate": get("generate") - get("env"),
            "time/env": get("env"), "time/reward": get("reward"),
            "time/logprobs": get("rollout") - get("generate") - get("reward"),
            "time/update": step_s - get("rollout")}


def _eval_callback(out: Path, s: dict, evaluate: Callable[[Any, int], dict],
                   clock: dict | None = None):
    """A ``TrainerCallback`` that keeps ``out/metrics.jsonl`` as agentsearch's runs do: each
    optimizer step's TRL logs and ``time/train_cumulative`` (wall clock of the steps, without
    the evals and checkpoint saves), every ``eval_every`` steps ``evaluate(model, step)``; it
    stops training once ``time_budget_s`` of training time is spent, or after the first eval
    whose ``eval/mean_at_n`` reaches ``stop_at`` (agentsearch's ``eval.stop_at``)."""
    every, budget, stop_at = s["eval_every"], s["time_budget_s"], s.get("stop_at")
    from transformers import TrainerCallback

    class EvalCallback(TrainerCallback):
        def __init__(self) -> None:
            self.train_s, self.mark, self.pending = 0.0, None, None

        def _log(self, rec: dict) -> None:
            with open(out / "metrics.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(rec) + "\n")

        def on_train_begin(self, args, state, control, model=None, **kw):
            prior = [json.loads(x) for x in (out / "metrics.jsonl").open()] \
                if (out / "metrics.jsonl").exists() else []
            done = [r for r in prior if r.get("step", 0) <= state.global_step]
            self.train_s = max((r.get("time/train_cumulative", 0.0) for r in done), default=0.0)
            if state.global_step == 0 and not any(r.get("step") == 0 for r in done):
                self._log({"step": 0, **evaluate(model, 0)})
            self.mark = time.perf_counter()

        def on_step_end(self, args, state, control, model=None, **kw):
            step_s = time.perf_counter() - self.mark
            self.train_s += step_s
            control.should_training_stop = self.train_s >= budget
            self.pending = {"step": state.global_step, "time/train_cumulative": self.train_s,
                            **memory_metrics()}
            if clock is not None:  # this step's phases (time_phases)
                self.pending.update(step_phases(clock, step_s))
                clock.clear()
            if state.global_step % every == 0 or control.should_training_stop:
                self.pending.update(evaluate(model, state.global_step))
                em = self.pending.get("eval/mean_at_n", float("-inf"))
                if stop_at is not None and em >= stop_at:
                    control.should_training_stop = True
            self.mark = time.perf_counter()

        def on_log(self, args, state, control, logs=None, **kw):
            # the step's own logs come after on_step_end (logging_steps=1)
            if self.pending is not None:
                self._log({**self.pending, **{f"trl/{k}": v for k, v in (logs or {}).items()
                                              if isinstance(v, (int, float))}})
                self.pending = None
            self.mark = time.perf_counter()

        def on_save(self, args, state, control, **kw):
            self.mark = time.perf_counter()  # the save is not training time

    return EvalCallback()


def build_trainer(s: dict, args, rows: list[dict], model, tok, *, env_id: str,
                  env_kwargs: dict, callbacks=(), latency: dict | None = None,
                  clock: dict | None = None):
    """TRL's ``GRPOTrainer`` over ``rows`` with the env's tool, ``answer_reward`` and the LoRA
    of the shared settings ``s``: a fresh one on a plain ``model``, or ``model``'s own when it
    is a peft model already (the warm-start adapter trained on, as agentsearch's
    ``init_from=ADAPTER`` does; TRL takes a pretrained adapter as is when ``beta`` is 0)."""
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOTrainer

    lora = s["lora"]
    fresh = LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=0.0,
                       target_modules=lora["targets"], task_type="CAUSAL_LM")
    trainer = GRPOTrainer(
        model=model, reward_funcs=[answer_reward], args=args,
        train_dataset=Dataset.from_list(rows), processing_class=tool_parsing_tokenizer(tok),
        environment_factory=env_factory(env_id, latency, clock, **env_kwargs),
        peft_config=None if hasattr(model, "peft_config") else fresh, callbacks=list(callbacks))
    if clock is not None:
        time_phases(trainer, clock)
    return trainer


def run_trl(out: Path, s: dict, rows: list[dict], model, tok, *, seed: int,
            evaluate: Callable[[Any, int], dict], env_id: str, env_kwargs: dict,
            latency: dict | None = None) -> None:
    """TRL's ``GRPOTrainer`` on ``rows`` (one step's prompts after another) into ``out``,
    resuming from its last checkpoint there, until ``s["time_budget_s"]`` of training time;
    ``evaluate`` scores the policy at step 0 and every ``s["eval_every"]`` steps."""
    from transformers.trainer_utils import get_last_checkpoint

    out.mkdir(parents=True, exist_ok=True)
    clock: dict = {}  # the step's seconds by phase (time_phases, step_phases)
    trainer = build_trainer(s, trl_config(s, out / "trl", seed), rows, model, tok,
                            env_id=env_id, env_kwargs=env_kwargs, latency=latency, clock=clock,
                            callbacks=[_eval_callback(out, s, evaluate, clock)])
    last = get_last_checkpoint(str(out / "trl")) if (out / "trl").exists() else None
    trainer.train(resume_from_checkpoint=last)
