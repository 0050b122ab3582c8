"""The safe calculator and the exact-answer verifier."""

from __future__ import annotations

import pytest
from rlvr_gym_tools.calculator import evaluate_expression, format_number
from rlvr_gym_tools.common import normalize_answer, verify_exact_answer

from rlvr_gym.toolcall import ToolError


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("(48213 - 1289) * 37", 1_736_188),
        ("7 / 2", 3.5),
        ("7 // 2 + 7 % 2", 4),
        ("-2 ** 2", -4),
        ("2 ** 10", 1024),
        ("round(1000 * (1 + 5 / 100) ** 3, 2)", 1157.63),
        ("max(3, abs(-9), min(4, 5)) + sqrt(16)", 13.0),
        ("123456789123456789 * 987654321987654321", 121932631356500531347203169112635269),
    ],
)
def test_calculator_values(expression: str, expected: float) -> None:
    assert evaluate_expression(expression) == expected


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("__import__('os').system('true')", "unsupported element"),
        ("x + 1", "unsupported element"),
        ("1 / 0", "division by zero"),
        ("9 ** 9 ** 9", "above the limit"),
        ("10 ** 999 * 10 ** 999", "longer than 300 digits"),
        ("(", "cannot parse"),
        ("1" * 600, "longer than 500"),
        ("sqrt(-1)", "invalid arithmetic"),
        ("round(x=1)", "positional arguments only"),
        ("'a' * 3", "unsupported element"),
    ],
)
def test_calculator_rejects(expression: str, fragment: str) -> None:
    with pytest.raises(ToolError) as caught:
        evaluate_expression(expression)
    assert fragment in str(caught.value)


def test_format_number() -> None:
    assert [format_number(v) for v in (12, 12.0, 2.5, 1 / 3, -0.5)] == ["12", "12", "2.5", "0.333333333333", "-0.5"]


@pytest.mark.parametrize(
    ("gold", "answer", "ok"),
    [
        ("Vimar Group", " the vimar group. ", True),
        ("Vimar Group", "Vimar", False),
        ("1736188", "1,736,188", True),
        ("1157.63", "1157.630", True),
        ("1157.63", "1157.64", False),
        ("-12", "-12", True),
        ("-12", "12", False),
        ("Orfen", "", False),
    ],
)
def test_exact_answer(gold: str, answer: str, ok: bool) -> None:
    result = verify_exact_answer(gold, answer)
    assert result.value == float(ok) and result.components == {"exact_match": float(ok)}


def test_normalize_answer() -> None:
    assert normalize_answer("The  Capital-City, of  Orfen!") == "capital city of orfen"
    assert normalize_answer("3.50 km") == "3.50 km"
