"""Systematic wrong variants of a correct program, for ``Task.wrong`` and verifier tests.

Each operator changes one thing in the body of the target function (the first place it applies, in
breadth-first order of the syntax tree, docstrings skipped):

* ``off_by_one``: the first integer constant ``n`` becomes ``n + 1``;
* ``flip_compare``: the first comparison flips (``<`` to ``<=``, ``==`` to ``!=``, ...);
* ``swap_arith``: the first ``+`` becomes ``-`` (or ``-`` becomes ``+``, ``*`` becomes ``+``);
* ``return_none``: the function body becomes ``return None``.

Callers check that a mutant actually fails the tests before using it as a wrong answer (some mutants are
equivalent to the original).
"""

from __future__ import annotations

import ast
from collections.abc import Callable

MUTATION_KINDS = ("off_by_one", "flip_compare", "swap_arith", "return_none")
_FLIP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
         ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add}


def mutate(source: str, function: str, kind: str) -> str | None:
    """Returns ``source`` with one ``kind`` mutation inside ``function``, or None when it does not apply.

    Raises:
        ValueError: on an unknown ``kind``.
        SyntaxError: when ``source`` does not parse.
    """
    if kind not in MUTATION_KINDS:
        raise ValueError(f"unknown mutation {kind!r}; choose one of {', '.join(MUTATION_KINDS)}")
    tree = ast.parse(source)
    # the last definition is the one that counts when a module defines the function twice (stub + solution)
    target = next((n for n in reversed(list(ast.walk(tree))) if isinstance(n, ast.FunctionDef) and n.name == function),
                  None)
    if target is None:
        return None
    if kind == "return_none":
        target.body = [ast.Return(ast.Constant(None))]
        return ast.unparse(ast.fix_missing_locations(tree))
    changed = _apply_first(target, _OPERATORS[kind])
    return ast.unparse(tree) if changed else None


def _apply_first(root: ast.AST, operator: Callable[[ast.AST], bool]) -> bool:
    for node in ast.walk(root):
        if node is not root and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # docstrings
        if operator(node):
            return True
    return False


def _off_by_one(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        node.value += 1
        return True
    return False


def _flip_compare(node: ast.AST) -> bool:
    if isinstance(node, ast.Compare) and type(node.ops[0]) in _FLIP:
        node.ops[0] = _FLIP[type(node.ops[0])]()
        return True
    return False


def _swap_arith(node: ast.AST) -> bool:
    if isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _SWAP:
        node.op = _SWAP[type(node.op)]()
        return True
    return False


_OPERATORS: dict[str, Callable[[ast.AST], bool]] = {
    "off_by_one": _off_by_one, "flip_compare": _flip_compare, "swap_arith": _swap_arith,
}
