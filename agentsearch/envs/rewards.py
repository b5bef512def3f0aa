"""Answer scoring and reward components, kept apart from parsing and dynamics.

Every reward is a sum of named components, logged on their own:

- ``reward/answer``: the answer's score at the step that answers (for search QA the
  registered answer reward named by ``answer_metric``: exact match ``"em"`` by default, token
  F1 ``"f1"``, or one added with ``register_answer_reward``; for math 1.0 if the checker
  finds it equivalent), else 0;
- ``reward/format``: ``-format_penalty`` on every malformed turn, else 0.

``answer_correct`` depends on the answer alone (never on format): exact match for
search, equivalence for math. Text QA normalisation is SQuAD's (lower case, strip
punctuation and articles, collapse whitespace), as in Search-R1's ``qa_em``.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import importlib.util
import logging
import os
import re
import string
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from agentsearch.core.registry import Registry
from agentsearch.envs.math_grader import MathGrader

__all__ = ["AnswerScore", "normalize_answer", "exact_match", "f1_score", "qa_score",
           "math_equal", "math_grade", "MathGrade", "GRADING_TIMEOUT_S", "step_rewards",
           "grade_off_loop",
           "REWARD_KEYS", "register_answer_reward", "unregister_answer_reward", "answer_reward",
           "answer_rewards"]

REWARD_KEYS = ("reward/answer", "reward/format")


@dataclass
class AnswerScore:
    """How good one final answer is: ``correct`` (the success bit), ``score`` (the reward)."""

    correct: bool
    score: float
    metrics: dict[str, float] = field(default_factory=dict)


_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """SQuAD normalisation: lower, drop punctuation, drop a/an/the, collapse whitespace."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_match(prediction: str, golden_answers: list[str]) -> float:
    p = normalize_answer(prediction)
    return float(any(p == normalize_answer(g) for g in golden_answers))


def f1_score(prediction: str, golden_answers: list[str]) -> float:
    """Best token-level F1 (SQuAD) over the golden answers."""
    pred = normalize_answer(prediction).split()
    best = 0.0
    for g in golden_answers:
        gold = normalize_answer(g).split()
        common = sum((Counter(pred) & Counter(gold)).values())
        if not pred or not gold:
            best = max(best, float(pred == gold))
        elif common:
            prec, rec = common / len(pred), common / len(gold)
            best = max(best, 2 * prec * rec / (prec + rec))
    return best


# ---------------------------------------------------------------- answer rewards by name
AnswerReward = Callable[[str, list[str]], float]
"""``fn(prediction, golden_answers) -> reward`` of one final answer."""

_ANSWER_REWARDS: Registry[AnswerReward] = Registry(
    "answer_metric", "agentsearch.envs.rewards.register_answer_reward")


def register_answer_reward(name: str, fn: AnswerReward | None = None, *, overwrite: bool = False,
                           _builtin: bool = False):
    """Register ``fn(prediction, golden_answers) -> float`` as the answer reward ``name``
    (``SearchEnv(answer_metric=name)``, ``env_kwargs.answer_metric=name``). A call or a
    decorator (``@register_answer_reward("mine")``); returns ``fn``. Built-in names ("em",
    "f1") are reserved; a taken name needs ``overwrite=True``."""
    return _ANSWER_REWARDS.register(name, fn, overwrite=overwrite, builtin=_builtin)


def unregister_answer_reward(name: str) -> None:
    """Remove a registered (non-built-in) answer reward."""
    _ANSWER_REWARDS.remove(name)


def answer_rewards() -> list[str]:
    """Every registered answer reward name: the built-ins, then the user's."""
    return _ANSWER_REWARDS.names()


def answer_reward(name: str) -> AnswerReward:
    """The answer reward registered as ``name``; unknown names are a ValueError listing
    the known."""
    return _ANSWER_REWARDS.get(name)


register_answer_reward("em", exact_match, _builtin=True)
register_answer_reward("f1", f1_score, _builtin=True)


def qa_score(answer: str, golden_answers: list[str], metric: str = "em") -> AnswerScore:
    """Search QA: ``correct`` = exact match; ``score`` = the answer reward ``metric`` (EM, F1 or a
    registered one); ``metrics`` has EM, F1 and, for another reward, its value under its name."""
    fn = answer_reward(metric)
    em, f1 = exact_match(answer, golden_answers), f1_score(answer, golden_answers)
    metrics = {"em": em, "f1": f1}
    if metric not in metrics:
        metrics[metric] = float(fn(answer, golden_answers))
    return AnswerScore(correct=em == 1.0, score=metrics[metric], metrics=metrics)


# ---------------------------------------------------------------- math equivalence
_MAX_MATH_CHARS = 400
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)(/\d+)?")
_INTEGER = re.compile(r"[-+]?\d+")
GRADING_TIMEOUT_S = 5.0
"""How long ``math_grade`` waits for the math checker on one answer; past it the answer
counts as not equal and ``MathGrade.timed_out`` is set."""

_warned = False
_grader: MathGrader | None = None
_grader_lock = threading.Lock()


@dataclass(frozen=True)
class MathGrade:
    """``math_grade``'s verdict: ``equal``, and whether the checker ran out of time (the
    answer then counts as not equal; envs report it as ``metric/grading_timeout``)."""

    equal: bool
    timed_out: bool = False


def _get_grader() -> MathGrader:
    global _grader
    with _grader_lock:
        if _grader is None:
            _grader = MathGrader()
            atexit.register(_grader.close)
        return _grader


def _forget_grader() -> None:  # a forked child must not share its parent's checker process
    global _grader, _grader_lock, _grading_thread
    _grader, _grader_lock, _grading_thread = None, threading.Lock(), None  # nor its threads


_grading_thread: concurrent.futures.ThreadPoolExecutor | None = None


async def grade_off_loop(score: Callable[[str, dict], AnswerScore], answer: str,
                         task: dict) -> tuple[AnswerScore, float]:
    """``score(answer, task)`` on the process's grading thread, and the seconds it took
    there (not counting its wait for the thread): a slow grade (the math checker takes up to
    ``GRADING_TIMEOUT_S``, plus a restart) never blocks the event loop the other episodes run
    on (``TextEnv`` grades every answer so). One thread: grades run one at a time, as the
    checker takes them, and a ``score`` need not be thread-safe with other grades."""
    global _grading_thread
    with _grader_lock:
        if _grading_thread is None:
            _grading_thread = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="agentsearch-grade")

    def timed() -> tuple[AnswerScore, float]:
        t0 = time.perf_counter()
        return score(answer, task), time.perf_counter() - t0

    return await asyncio.get_running_loop().run_in_executor(_grading_thread, timed)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_grader)


def _number(s: str) -> Fraction | None:
    s = s.strip()
    if not _NUMBER.fullmatch(s):
        return None
    try:
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None


def _fast_verdict(prediction: str, golds: list[str]) -> bool | None:
    """Plain numbers decide on their own: an equal one is equal; integers that all differ
    are not equal. ``None``: the checker must decide."""
    p = _number(prediction)
    if p is None:
        return None
    if any(_number(g) == p for g in golds):
        return True
    if _INTEGER.fullmatch(prediction.strip()) and all(_INTEGER.fullmatch(g.strip()) for g in golds):
        return False
    return None


def math_grade(prediction: str, golden_answers: list[str], *,
               timeout_s: float | None = None) -> MathGrade:
    """Whether ``prediction`` equals any golden answer: normalised text, plain numbers, then
    math-verify (sympy's ``simplify(a - b) == 0`` without it).

    math-verify (with sympy) compares expressions, fractions, sets and equations. It runs in
    a child process (``agentsearch.envs.math_grader``) with a time limit, ``timeout_s``
    (default ``GRADING_TIMEOUT_S``), on the main thread, off it and inside a running event
    loop alike: an answer it cannot settle in time (e.g. ``9^{9^{9^{9}}}``) is not equal,
    ``timed_out=True``, and a warning is logged. The common cases (equal text, numbers) never
    reach it. Strings over 400 characters are compared as text only.

    A checker that fails (its process cannot start, or dies) raises ``InfraError``
    (``agentsearch.core.reliability``): no verdict, the answer is graded again once the
    checker is back (``TextEnv`` waits for it as for a dead retriever).
    """
    global _warned
    if any(normalize_answer(prediction) == normalize_answer(g) for g in golden_answers):
        return MathGrade(True)
    golds = [g for g in golden_answers if len(g) <= _MAX_MATH_CHARS]
    if len(prediction) > _MAX_MATH_CHARS or not golds:
        return MathGrade(False)
    fast = _fast_verdict(prediction, golds)
    if fast is not None:
        return MathGrade(fast)
    if not _warned and importlib.util.find_spec("math_verify") is None:
        logging.getLogger(__name__).warning(
            "math-verify is not installed; using sympy for math answers "
            "(pip install 'agentsearch[math]' for the stronger checker)")
        _warned = True
    timeout = GRADING_TIMEOUT_S if timeout_s is None else float(timeout_s)
    equal = _get_grader().equal(prediction, golds, timeout)
    if equal is None:
        logging.getLogger(__name__).warning(
            "math grading gave up after %.1f s on the answer %r; counted as not equal",
            timeout, prediction[:80])
        return MathGrade(False, timed_out=True)
    return MathGrade(equal)


def math_equal(prediction: str, golden_answers: list[str], *,
               timeout_s: float | None = None) -> bool:
    """``math_grade(...).equal``: whether ``prediction`` equals any golden answer (an answer
    the checker cannot settle within the time limit is not equal; a failed checker raises
    ``InfraError``)."""
    return math_grade(prediction, golden_answers, timeout_s=timeout_s).equal


def step_rewards(*, answer: AnswerScore | None, malformed: bool,
                 format_penalty: float) -> dict[str, float]:
    """The named reward components of one step (always all keys, so means are comparable)."""
    return {"reward/answer": float(answer.score) if answer is not None else 0.0,
            "reward/format": -float(format_penalty) if malformed else 0.0}
