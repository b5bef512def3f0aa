"""Math word problems with optional tools: ``agentsearch/Math-v0``."""

from __future__ import annotations

from dataclasses import dataclass

from agentsearch.envs.rewards import AnswerScore, math_grade
from agentsearch.envs.tasks.math_tasks import champ_tasks, synthetic_math
from agentsearch.envs.text_env import TextEnv
from agentsearch.envs.text_env_config import TextEnvConfig

__all__ = ["MathEnv", "MathEnvConfig"]

_TOOL_LINES = {
    "calculator": "You can use a calculator by writing <calculator> expression </calculator>; "
                  "the result comes back between <information> and </information>. ",
    "python": "You can run a Python program by writing <python> code </python>; what it prints "
              "comes back between <information> and </information>. ",
}
TAG_PROMPT = ("Solve the problem. Reason step by step inside <think> and </think>. {tools}"
              "Give the final answer inside <answer> and </answer> (or as \\boxed{{...}}), "
              "without explanation. For example, <answer> 42 </answer>. Problem: {question}\n")
JSON_SYSTEM_PROMPT = ("Solve the math problem step by step. {tools}Give the final answer inside "
                      "<answer> and </answer> (or as \\boxed{{...}}), without explanation.")


@dataclass
class MathEnvConfig(TextEnvConfig):
    """Settings of ``MathEnv`` (plus those of ``TextEnvConfig``).

    ``split``: ``train``/``dev``/``test`` (seeded synthetic problems) or ``champ`` (the 270
    CHAMP competition problems, held out). ``tools``: e.g. ``("calculator", "python")``.
    """

    task_seed: int = 0
    """Seed of the synthetic problem generator."""
    n_tasks: int | None = None
    """Synthetic problems in the split (default 5000 train, 500 dev, 500 test)."""


class MathEnv(TextEnv):
    """Solve a math word problem, optionally with a calculator and a Python runner.

    ## Action space
    One turn of text (``UnicodeText``). Tags (default): optional ``<think>…</think>`` then
    ``<answer>…</answer>``, a ``\\boxed{…}`` answer, or a tool call ``<calculator>…
    </calculator>`` / ``<python>…</python>`` when those tools are enabled. JSON format:
    ``<tool_call>{"name": "calculator", "arguments": {"expression": "…"}}</tool_call>``,
    or a final turn with ``<answer>`` or ``\\boxed{}``.

    ## Observation space
    Text. At reset: the problem with instructions (chat template applied). After a tool
    call: its result (``<information>…</information>`` for tags; a tool-response turn for
    JSON). After a malformed turn: an error message. ``""`` at the end.

    ## Rewards
    ``reward/answer``: 1.0 if the answer is equivalent to a golden answer (normalised text,
    then math-verify on LaTeX/plain expressions; sympy if math-verify is missing), else 0.
    ``reward/format``: ``-format_penalty`` per malformed turn. ``answer_correct`` is the
    equivalence alone. The check has a time limit (``rewards.GRADING_TIMEOUT_S``): an answer
    it cannot settle in time counts as wrong, with ``info["metric/grading_timeout"] = 1.0``.

    ## Episode end
    Terminated by an answer; truncated when turn ``max_turns`` (default 4) is not one.
    Without tools the first turn should answer.

    ## Version history
    - v0: initial version.
    """

    Config = MathEnvConfig
    boxed = True
    check_variants = ({}, {"tools": ("calculator", "python")})

    def load_tasks(self) -> list[dict]:
        if self.config.split == "champ":
            return champ_tasks()
        return synthetic_math(self.config.split, self.config.n_tasks, self.config.task_seed)

    def _tool_text(self) -> str:
        return "".join(_TOOL_LINES.get(n, f"You can use {n} ({t.description.rstrip('.')}) by "
                                          f"<{n}> … </{n}>. ") for n, t in self.tools.items())

    def instructions(self, task: dict) -> list[dict]:
        q = str(task["question"]).strip()
        if self.config.turn_format == "tags":
            if self.config.system_prompt:
                return [{"role": "user", "content": f"{self.config.system_prompt}Problem: {q}\n"}]
            return [{"role": "user",
                     "content": TAG_PROMPT.format(tools=self._tool_text(), question=q)}]
        tools = "Use the tools when they help. " if self.tools else ""
        system = self.config.system_prompt or JSON_SYSTEM_PROMPT.format(tools=tools)
        return [{"role": "system", "content": system}, {"role": "user", "content": q}]

    def score(self, answer: str, task: dict) -> AnswerScore:
        grade = math_grade(answer, [str(g) for g in task["golden_answers"]])
        return AnswerScore(correct=grade.equal, score=float(grade.equal),
                           metrics={"grading_timeout": float(grade.timed_out)})
