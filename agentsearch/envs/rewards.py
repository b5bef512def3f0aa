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

import logging
import re
import string
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from agentsearch.core.registry import Registry

__all__ = ["AnswerScore", "normalize_answer", "exact_match", "f1_score", "qa_score",
           "math_equal", "step_rewards", "REWARD_KEYS", "register_answer_reward",
           "unregister_answer_reward", "answer_reward", "answer_rewards"]

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
    """The answer reward registered as ``name``; unknown names are a ValueError listing the known."""
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
_warned = False


def _mv():
    """math-verify's (parse, verify), or None when it is not installed."""
    try:
        from math_verify import parse, verify
    except ImportError:
        return None
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    return parse, verify


def _as_latex(s: str) -> str:
    s = s.strip()
    s = re.sub(r"\bC\((\d+),\s*(\d+)\)", r"\\binom{\1}{\2}", s)  # C(n, k) -> binomial
    return s if "$" in s or "\\boxed" in s else f"${s}$"


def _sympy_equal(a: str, b: str) -> bool:
    import sympy
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    tr = standard_transformations + (implicit_multiplication_application, convert_xor)
    try:
        ea, eb = parse_expr(a, transformations=tr), parse_expr(b, transformations=tr)
        return bool(sympy.simplify(ea - eb) == 0)
    except Exception:  # noqa: BLE001 - unparsable math text is simply not equal
        return False


def math_equal(prediction: str, golden_answers: list[str]) -> bool:
    """Whether ``prediction`` equals any golden answer: normalised text, then math-verify.

    math-verify (with sympy) compares expressions, fractions, sets and equations; its
    timeout uses ``signal.alarm``, so off the main thread it runs without one and very
    long strings (> 400 characters) are compared as text only. Without math-verify,
    sympy's ``simplify(a - b) == 0`` is the fallback.
    """
    global _warned
    if any(normalize_answer(prediction) == normalize_answer(g) for g in golden_answers):
        return True
    if len(prediction) > _MAX_MATH_CHARS:
        return False
    mv = _mv()
    if mv is None:
        if not _warned:
            logging.getLogger(__name__).warning(
                "math-verify is not installed; using sympy for math answers "
                "(pip install 'agentsearch[math]' for the stronger checker)")
            _warned = True
        return any(_sympy_equal(prediction, g) for g in golden_answers if len(g) <= _MAX_MATH_CHARS)
    parse, verify = mv
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        pred = parse(_as_latex(prediction), parsing_timeout=timeout)
        if not pred:
            return False
        for g in golden_answers:
            if len(g) > _MAX_MATH_CHARS:
                continue
            gold = parse(_as_latex(g), parsing_timeout=timeout)
            if gold and verify(gold, pred, timeout_seconds=timeout):
                return True
    except Exception:  # noqa: BLE001 - math-verify raises on pathological input: not equal
        return False
    return False


def step_rewards(*, answer: AnswerScore | None, malformed: bool,
                 format_penalty: float) -> dict[str, float]:
    """The named reward components of one step (always all keys, so means are comparable)."""
    return {"reward/answer": float(answer.score) if answer is not None else 0.0,
            "reward/format": -float(format_penalty) if malformed else 0.0}
