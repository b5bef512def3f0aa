"""Math tasks: a seeded generator of multi-step word problems, and CHAMP as a held-out set.

``synthetic_math(split, n, seed)`` writes problems from ten templates (arithmetic chains,
rates, remainders, percentages, consecutive integers, ...) with exact answers; the same
seed and split give the same rows, and dev/test never repeat a train question.
``champ_tasks()`` returns the 270 CHAMP competition problems with their free-form answers
split into alternatives (``"C(10, 5), or equivalently 252"`` -> both).
"""

from __future__ import annotations

import random
import re
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache

__all__ = ["synthetic_math", "champ_tasks", "champ_alternatives", "SPLIT_SIZES"]

SPLIT_SIZES = {"train": 5000, "dev": 500, "test": 500}
_NAMES = ["Ada", "Bruno", "Chiara", "Dmitri", "Esi", "Farid", "Greta", "Hiro", "Ines", "Jonas"]


def _fmt(x: Fraction) -> str:
    """Exact decimal text (the generator only makes fractions with denominators 2^a 5^b)."""
    if x.denominator == 1:
        return str(x.numerator)
    text = format(Decimal(x.numerator) / Decimal(x.denominator), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _t_boxes(r):
    d = r.randint(3, 12)
    while True:
        a, b, c = r.randint(3, 30), r.randint(4, 24), r.randint(1, 200)
        rest = a * b - c
        if rest > 0 and rest % d == 0:
            break
    q = (f"A bakery bakes {a} trays of {b} muffins. It sells {c} muffins and packs the rest "
         f"into boxes of {d}. How many boxes does it fill?")
    return q, Fraction(rest // d), 3, f"( {a} * {b} - {c} ) / {d}"


def _t_chain(r):
    a, b, c, d = (r.randint(2, 99) for _ in range(4))
    return (f"Compute ({a} + {b}) * {c} - {d}.", Fraction((a + b) * c - d), 3,
            f"({a} + {b}) * {c} - {d}")


def _t_marbles(r):
    name = r.choice(_NAMES)
    while True:
        a, b, c = r.randint(1, 60), r.randint(2, 9), r.randint(3, 25)
        if (a + b * c) % 3 == 0:
            break
    total = a + b * c
    q = (f"{name} has {a} marbles and buys {b} bags of {c} marbles each. Then {name} gives "
         "away a third of all the marbles. How many marbles are left?")
    return q, Fraction(total - total // 3), 4, f"( {a} + {b} * {c} ) * 2 / 3"


def _t_train(r):
    v, t, w, s = r.randint(30, 140), r.randint(1, 9), r.randint(30, 140), r.randint(1, 9)
    q = (f"A train travels at {v} km/h for {t} hours and then at {w} km/h for {s} hours. "
         "How many kilometres does it travel in total?")
    return q, Fraction(v * t + w * s), 3, f"{v} * {t} + {w} * {s}"


def _t_square(r):
    while True:
        a, b = r.randint(2, 60), r.randint(2, 60)
        if (a + b) % 2 == 0:
            break
    q = (f"A rectangle is {a} cm by {b} cm. A square has the same perimeter as the rectangle. "
         "What is the area of the square in square centimetres?")
    return q, Fraction(((a + b) // 2) ** 2), 3, f"( ( {a} + {b} ) / 2 ) ^ 2"


def _t_powmod(r):
    a, b, m = r.randint(2, 19), r.randint(5, 60), r.randint(3, 23)
    return (f"What is the remainder when {a}^{b} is divided by {m}?", Fraction(pow(a, b, m)), 2,
            f"( {a} ^ {b} ) % {m}")


def _t_consecutive(r):
    k = r.randint(-50, 400)
    s = 3 * k + 3
    return (f"The sum of three consecutive integers is {s}. What is the largest of them?",
            Fraction(k + 2), 2, f"{s} / 3 + 1")


def _t_discount(r):
    p, d, t = (r.choice([20, 40, 50, 80, 120, 200, 250, 400]), r.choice([10, 20, 25, 50]),
               r.choice([5, 10, 20]))
    final = Fraction(p) * (100 - d) / 100 * (100 + t) / 100
    q = (f"A shop discounts a {p}-dollar coat by {d}% and then adds {t}% sales tax to the "
         "discounted price. What is the final price in dollars?")
    return q, final, 3, f"{p} * ( 100 - {d} ) / 100 * ( 100 + {t} ) / 100"


def _t_products(r):
    a, b, c, d, e = (r.randint(11, 999) for _ in range(5))
    return (f"Evaluate {a} * {b} - {c} * {d} + {e}.", Fraction(a * b - c * d + e), 3,
            f"{a} * {b} - {c} * {d} + {e}")


def _t_multiples(r):
    k, lo, hi = r.randint(3, 17), r.randint(1, 200), r.randint(300, 5000)
    q = f"How many multiples of {k} are there from {lo} to {hi}, inclusive?"
    return q, Fraction(hi // k - (lo - 1) // k), 2, f"{hi} // {k} - ( {lo} - 1 ) // {k}"


TEMPLATES = {"boxes": _t_boxes, "chain": _t_chain, "marbles": _t_marbles, "train": _t_train,
             "square": _t_square, "powmod": _t_powmod, "consecutive": _t_consecutive,
             "discount": _t_discount, "products": _t_products, "multiples": _t_multiples}


def _generate(split: str, n: int, seed: int, exclude: frozenset[str]) -> list[dict]:
    r = random.Random(f"agentsearch-math-{seed}-{split}")
    names = sorted(TEMPLATES)
    rows, seen = [], set(exclude)
    while len(rows) < n:
        kind = names[r.randrange(len(names))]
        q, ans, steps, expression = TEMPLATES[kind](r)
        if q in seen:
            continue
        seen.add(q)
        rows.append({"id": f"math-{split}-{len(rows):05d}", "question": q,
                     "golden_answers": [_fmt(ans)], "type": kind, "steps": steps,
                     "expression": expression})
    return rows


@lru_cache(maxsize=16)
def _cached(split: str, n: int, seed: int) -> tuple[dict, ...]:
    exclude: frozenset[str] = frozenset()
    if split != "train":
        exclude = frozenset(t["question"] for t in _cached("train", SPLIT_SIZES["train"], seed))
    return tuple(_generate(split, n, seed, exclude))


def synthetic_math(split: str = "train", n: int | None = None, seed: int = 0) -> list[dict]:
    """Seeded word problems: rows ``{id, question, golden_answers, type, steps, expression}``
    (``expression``: one calculator expression that computes the answer, its numbers written
    as in the question, a space before each, so that they tokenize alike)."""
    if split not in SPLIT_SIZES:
        raise ValueError(f"synthetic math splits are {sorted(SPLIT_SIZES)} (or 'champ'), got "
                         f"{split!r}")
    return [dict(row) for row in _cached(split, n or SPLIT_SIZES[split], seed)]


def champ_alternatives(answer: str) -> list[str]:
    """Golden alternatives of a CHAMP answer: ``"X, or equivalently Y"`` -> [X, Y]; a
    trailing ``(i.e., …)`` remark and phrasings like ``"3 is the only possible value"``
    also yield the bare value. The original string is kept first."""
    out = [answer.strip()]
    for part in re.split(r",?\s*or equivalently\s*", answer):
        part = part.strip().rstrip(".")
        bare = re.sub(r"\s*\(i\.e\.,?[^)]*\)\s*$", "", part).strip()
        bare = re.sub(r"\s+is the only possible value$", "", bare).strip()
        for cand in (part, bare):
            if cand and cand not in out:
                out.append(cand)
    return out


@lru_cache(maxsize=1)
def _champ() -> tuple[dict, ...]:
    from agentsearch.data.loaders import math_problems

    rows = []
    for p in math_problems():
        gold = p["golden_answers"][0]
        rows.append({"id": f"champ-{p['id']}", "question": p["question"],
                     "golden_answers": champ_alternatives(gold), "category": p.get("category")})
    return tuple(rows)


def champ_tasks() -> list[dict]:
    """The 270 CHAMP problems (needs the ``champ-dataset`` wheel)."""
    return [dict(r, golden_answers=list(r["golden_answers"])) for r in _champ()]
