"""A safe arithmetic evaluator for the ``calculator`` tool: parsed with :mod:`ast`, never ``eval``'d.

Accepted: int and float literals, ``+ - * / // % **``, unary ``+``/``-``, parentheses, and the functions
``abs``, ``round``, ``min``, ``max``, ``sqrt``. Integer arithmetic stays exact; ``/`` gives a float.
Guards against runaway work: exponents above :data:`MAX_EXPONENT` and integers longer than
:data:`MAX_DIGITS` digits are errors, as are expressions longer than :data:`MAX_LENGTH` characters.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from rlvr_gym.toolcall import ToolError

MAX_LENGTH = 500
MAX_EXPONENT = 1000
MAX_DIGITS = 300

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {"abs": abs, "round": round, "min": min, "max": max, "sqrt": math.sqrt}


def evaluate_expression(expression: str) -> int | float:
    """Evaluates an arithmetic expression.

    Args:
        expression: e.g. ``"(48213 - 1289) * 37 / 2"``.

    Returns:
        The value (int when every step was integral, else float).

    Raises:
        ToolError: on syntax the calculator does not accept, division by zero, or a guard limit, with a
            message saying which.
    """
    if len(expression) > MAX_LENGTH:
        raise ToolError(f"expression longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ToolError(f"cannot parse {expression!r} as arithmetic") from None
    try:
        return _eval(tree.body)
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except (OverflowError, RecursionError, MemoryError):
        raise ToolError("result too large") from None
    except (TypeError, ValueError) as error:
        raise ToolError(f"invalid arithmetic: {error}") from None


def format_number(value: float) -> str:
    """Formats a result: integers exactly; floats with up to 12 significant digits (``2.5``, ``0.333333333333``)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value) if isinstance(value, int) else f"{value:.12g}"


def _eval(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ToolError(f"exponent {right} is above the limit of {MAX_EXPONENT}")
        return _check_size(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
        if node.keywords:
            raise ToolError(f"{node.func.id}() takes positional arguments only")
        return _check_size(_FUNCTIONS[node.func.id](*(_eval(arg) for arg in node.args)))
    raise ToolError(f"unsupported element {ast.unparse(node)!r}; use numbers, + - * / // % ** and {sorted(_FUNCTIONS)}")


def _check_size(value: Any) -> Any:
    if isinstance(value, complex):
        raise ToolError("the result is a complex number")
    if isinstance(value, int) and value.bit_length() > MAX_DIGITS * 3.33:
        raise ToolError(f"integer result longer than {MAX_DIGITS} digits")
    return value
