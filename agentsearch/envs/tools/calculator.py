"""The ``calculator`` tool: arithmetic through a safe evaluator (``sandbox.evaluate``, no eval)."""

from __future__ import annotations

from agentsearch.envs.tools.sandbox import CalculatorError, evaluate

__all__ = ["CalculatorTool"]


class CalculatorTool:
    """Evaluate arithmetic: ``+ - * / // % ^``, parentheses, sqrt, log, exp, comb, … (no eval)."""

    name = "calculator"
    description = ("Evaluate an arithmetic expression, e.g. (17 * 24 - 139) / 7 or sqrt(2) or "
                   "comb(10, 5).")
    parameters = {"type": "object",
                  "properties": {"expression": {"type": "string",
                                                "description": "the expression to evaluate"}},
                  "required": ["expression"]}

    def __init__(self, timeout_s: float = 5.0):
        self.timeout_s = timeout_s

    async def __call__(self, expression: str) -> str:
        try:
            value = evaluate(str(expression))
        except CalculatorError as e:
            return f"Error: {e}"
        if isinstance(value, float):
            return (str(int(value)) if value.is_integer() and abs(value) < 1e15
                    else format(value, ".12g"))
        return str(value)
