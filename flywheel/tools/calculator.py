"""calculator: exact arithmetic on an expression, parsed with `ast` and walked by hand.

Never `eval`: only number literals, + - * / // % ** and unary signs are accepted; names,
calls, attributes and everything else are a ToolError. Integers stay exact (Python ints), so
4821 * 739 is 3562719 and not a float. Limits keep a hostile expression cheap: its length,
an exponent of at most MAX_EXPONENT, and results of at most MAX_DIGITS digits.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

from flywheel.tools.base import ToolError, required_str

MAX_CHARS = 200
MAX_EXPONENT = 64
MAX_DIGITS = 100

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _checked(value: int | float) -> int | float:
    if isinstance(value, int) and len(str(abs(value))) > MAX_DIGITS:
        raise ToolError(f"result has more than {MAX_DIGITS} digits")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("result is not a finite number")
    return value


def _value(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _checked(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ToolError(f"exponent {right} is larger than {MAX_EXPONENT}")
        try:
            return _checked(_BINARY[type(node.op)](left, right))
        except (ZeroDivisionError, OverflowError) as error:
            raise ToolError(str(error)) from None
    raise ToolError(f"not arithmetic: {type(node).__name__} (use numbers and + - * / // % **)")


def evaluate(expression: str) -> int | float:
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ToolError(f"cannot parse expression {expression!r}") from None
    return _value(tree.body)


class Calculator:
    name = "calculator"
    description = ("Evaluate an arithmetic expression exactly (integers of any size up to "
                   "100 digits; + - * / // % ** and parentheses).")
    parameters = {"type": "object", "required": ["expression"],
                  "properties": {"expression": {"type": "string",
                                                "description": "e.g. 4821 * 739"}}}

    def run(self, arguments: dict[str, Any]) -> str:
        value = evaluate(required_str(arguments, "expression", MAX_CHARS))
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            return str(int(value))
        return str(value)


def build() -> Calculator:
    return Calculator()
