"""Extract a Verilog design from an agent's action and lint it before any simulator sees it.

The judge compiles the candidate together with a trusted testbench, so anything in the candidate that can
reach the testbench is a way to fake a pass. The lint (built on ``pyslang``, a full SystemVerilog front end)
rejects every construct a design under test has no business containing. The rules, and why:

* **System tasks and functions**: only a whitelist of pure functions is allowed (:data:`ALLOWED_SYSTEM_NAMES`:
  ``$signed``, ``$clog2``, ``$bits``, ...). Everything else is rejected: simulation control (``$finish``,
  ``$stop``, ``$fatal``: an early ``$finish`` ends the run with 0 mismatches), all output (``$display``,
  ``$write``, ``$strobe``, ``$monitor``, ...: printed lines can imitate the testbench's verdict and flood the
  judge), files (``$fopen``, ``$readmemh``, ``$fscanf``, ``$dumpfile``, ...: the testbench and the reference
  lie in the same work dir), ``$system``, and ``$random``/``$urandom`` (they share the testbench's seed and so
  change its stimulus). A design needs none of them; the agent is told to remove debug prints.
* **Reaching outside the design**: hierarchical names that do not resolve inside the candidate elaborated
  alone with ``TopModule`` as its only top (``tb.stats1.errors``, ``$root.tb``, upward names such as
  ``stim1.x``), dotted names starting with a testbench instance or module name, ``bind``, ``force`` /
  ``release``, ``defparam``, and driving an input port from inside (Icarus accepts it without a warning, and
  the net driven is the testbench's own, which the reference reads too).
* **Blocks that run outside the clocked world**: ``final`` blocks (they run before the testbench's own
  ``final`` block prints its verdict), ``program``/``class``/``interface``/``checker``/``config``
  declarations, DPI imports, ``specify`` blocks.
* **Compiler directives**: ``include`` (reads files), ``undef``/``undefineall``/``resetall``, ``line``,
  ``pragma``/``protect``, conditional compilation (``ifdef`` ... : the simulator sees macros the lint does
  not, such as the testbench's and ``__ICARUS__``, so a conditional region could hide code from the lint),
  and any ``define`` of a macro the testbench or reference defines. ``timescale``, ``default_nettype``,
  ``celldefine`` and new local ``define`` s are allowed: the judge compiles the candidate *after* the
  testbench and the reference, so its directives cannot reach them, and LLM answers often carry them.
* **Names**: a module, package or primitive named like a testbench-side module or instance (``tb``,
  ``stimulus_gen``, ``RefModule``, ``stim1``, ``good1``), or instantiating one (copying the reference), is
  rejected; ``inout`` ports are rejected.
* **Interface**: ``TopModule`` must exist and have exactly the reference's ports (names, directions, widths).

Syntax errors found by pyslang are reported too, so the lint always sees the same code the simulator does,
and so are designs beyond slang's elaboration limits (generate loops, constant functions, instance depth),
which would only burn the simulator's time limit. Other semantic errors are left to Icarus, the judge of
record.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Any

import pyslang
from pyslang import ast, parsing, syntax

TOP_MODULE = "TopModule"
"""The module name every candidate must define (VerilogEval's convention)."""

ALLOWED_SYSTEM_NAMES = frozenset({
    "$signed", "$unsigned", "$clog2", "$bits", "$size", "$left", "$right", "$low", "$high", "$increment",
    "$dimensions", "$unpacked_dimensions", "$countones", "$countbits", "$onehot", "$onehot0", "$isunknown",
    "$itor", "$rtoi", "$bitstoreal", "$realtobits", "$shortrealtobits", "$bitstoshortreal",
    "$typename", "$ln", "$log10", "$exp", "$sqrt", "$pow", "$floor", "$ceil", "$sin", "$cos", "$tan", "$asin",
    "$acos", "$atan", "$atan2", "$hypot", "$sinh", "$cosh", "$tanh", "$asinh", "$acosh", "$atanh",
})
"""System functions a design may call: pure, constant-foldable, no I/O, no effect on the simulation."""

_ALLOWED_DIRECTIVES = {
    syntax.SyntaxKind.TimeScaleDirective, syntax.SyntaxKind.DefaultNetTypeDirective,
    syntax.SyntaxKind.CellDefineDirective, syntax.SyntaxKind.EndCellDefineDirective,
    syntax.SyntaxKind.DefineDirective, syntax.SyntaxKind.MacroUsage,
}
_FORBIDDEN_NODES = {
    syntax.SyntaxKind.FinalBlock: "`final` blocks are not allowed in a design (they run at the end of "
    "simulation and can tamper with the testbench)",
    syntax.SyntaxKind.ProceduralForceStatement: "`force` is not allowed in a design",
    syntax.SyntaxKind.ProceduralReleaseStatement: "`release` is not allowed in a design",
    syntax.SyntaxKind.DefParam: "`defparam` is not allowed; use parameter overrides `#(...)`",
    syntax.SyntaxKind.BindDirective: "`bind` is not allowed in a design",
    syntax.SyntaxKind.SpecifyBlock: "`specify` blocks are not allowed in a design",
    syntax.SyntaxKind.DPIImport: "DPI imports are not allowed",
    syntax.SyntaxKind.DPIExport: "DPI exports are not allowed",
    syntax.SyntaxKind.ProgramDeclaration: "`program` blocks are not allowed",
    syntax.SyntaxKind.ClassDeclaration: "classes are not allowed in a design",
    syntax.SyntaxKind.InterfaceDeclaration: "interfaces are not allowed; use plain module ports",
    syntax.SyntaxKind.CheckerDeclaration: "checkers are not allowed",
    syntax.SyntaxKind.ConfigDeclaration: "`config` blocks are not allowed",
}
_TOP_LEVEL_OK = {
    syntax.SyntaxKind.ModuleDeclaration, syntax.SyntaxKind.UdpDeclaration, syntax.SyntaxKind.PackageDeclaration,
    syntax.SyntaxKind.TypedefDeclaration, syntax.SyntaxKind.ParameterDeclarationStatement,
    syntax.SyntaxKind.EmptyMember, syntax.SyntaxKind.TimeUnitsDeclaration,
    syntax.SyntaxKind.PackageImportDeclaration, syntax.SyntaxKind.FunctionDeclaration,
    syntax.SyntaxKind.TaskDeclaration,
}
_NAME_ERRORS = {
    "UndeclaredIdentifier", "CouldNotResolveHierarchicalPath", "UnknownModule", "UnknownPackage",
    "UnknownClassOrPackage", "UnknownMember", "UndeclaredButFoundPackage", "HierarchicalFromPackage",
    "UnknownInterface", "UnknownPrimitive", "TypoIdentifier",
}
_LIMIT_ERRORS = {
    "ConstEvalExceededMaxCallDepth", "ConstEvalExceededMaxSize", "ConstEvalExceededMaxSteps",
    "MaxGenerateStepsExceeded", "MaxInstanceArrayExceeded", "MaxInstanceDepthExceeded", "ValueExceedsMaxBitWidth",
}
_INCREMENT_OPS = {"Preincrement", "Predecrement", "Postincrement", "Postdecrement"}
_FENCE = re.compile(r"```[ \t]*([A-Za-z]*)(.*?)(?:```|\Z)", re.DOTALL)
_RAW_START = re.compile(r"^[ \t]*(?:module\s+[A-Za-z_]|package\s|`[a-z_]+)", re.MULTILINE)
_RAW_START_ANYWHERE = re.compile(r"\bmodule\s+[A-Za-z_]")
_VERILOG_TAGS = {"", "verilog", "systemverilog", "sv", "v", "vlog"}


@dataclasses.dataclass(frozen=True)
class Port:
    """One module port: name, direction (``"In"``, ``"Out"``, ``"InOut"``, ``"Ref"``) and width in bits."""

    name: str
    direction: str
    width: int

    def describe(self) -> str:
        """Text like ``output [3:0] q`` (widths as ``[W-1:0]``)."""
        kind = {"In": "input", "Out": "output", "InOut": "inout"}.get(self.direction, self.direction.lower())
        return f"{kind} {f'[{self.width - 1}:0] ' if self.width > 1 else ''}{self.name}"


@dataclasses.dataclass(frozen=True)
class HarnessNames:
    """Names on the trusted side of the harness, which a candidate must not define or reference.

    Attributes:
        modules: module names defined by the testbench and the reference (``tb``, ``stimulus_gen``,
            ``RefModule``).
        instances: instance names inside those modules (``stim1``, ``good1``, ``top_module1``).
        macros: macro names they define (``OK``, ``INCORRECT``).
    """

    modules: frozenset[str]
    instances: frozenset[str]
    macros: frozenset[str]


def extract_code(action: str) -> str | None:
    """Returns the Verilog design in an agent's action, or None when there is none.

    The last fenced block tagged ``verilog``/``systemverilog``/``sv``/``v`` (or untagged) that contains
    ``module`` wins; the tag may be spaced from the fence and the code may follow it on the same line, and a
    block left open runs to the end of the text (word-level tokenizers and truncated generations produce
    both). Without fences: the text from the first line that starts a design (``module``, ``package``, a
    compiler directive), or else from the first ``module <name>``, to the last ``endmodule``.
    """
    blocks = []
    for tag, body in _FENCE.findall(action):
        if tag.lower() == "module":  # an untagged block whose code starts on the fence's line
            tag, body = "", "module" + body
        if tag.lower() in _VERILOG_TAGS and "module" in body:
            blocks.append(body)
    if blocks:
        return blocks[-1].strip() + "\n"
    start = _RAW_START.search(action) or _RAW_START_ANYWHERE.search(action)
    end = action.rfind("endmodule")
    if start is None or end < start.start():
        return None
    return action[start.start(): end + len("endmodule")] + "\n"


def harness_names(*sources: str) -> HarnessNames:
    """Collects the module, instance and macro names defined by trusted sources (testbench, reference)."""
    modules, instances, macros = set(), set(), set()
    for source in sources:
        tree = syntax.SyntaxTree.fromText(source)

        def visit(node: Any) -> ast.VisitAction:
            if isinstance(node, parsing.Token):
                for trivia in node.trivia:
                    directive: Any = trivia.syntax() if trivia.kind == parsing.TriviaKind.Directive else None
                    if directive is not None and directive.kind == syntax.SyntaxKind.DefineDirective:
                        macros.add(directive.name.valueText)
            elif node.kind == syntax.SyntaxKind.ModuleDeclaration:
                modules.add(node.header.name.valueText)
            elif node.kind == syntax.SyntaxKind.HierarchicalInstance and node.decl is not None:
                instances.add(node.decl.name.valueText)
            return ast.VisitAction.Advance

        tree.root.visit(visit)
    return HarnessNames(frozenset(modules), frozenset(instances), frozenset(macros))


def has_dotted_names(code: str) -> bool:
    """Whether ``code`` contains a dotted name (``a.b``: a hierarchical reference or a struct member)."""
    found = False

    def visit(node: Any) -> ast.VisitAction:
        nonlocal found
        if not isinstance(node, parsing.Token) and node.kind == syntax.SyntaxKind.ScopedName \
                and str(node.separator).strip() == ".":
            found = True
            return ast.VisitAction.Interrupt
        return ast.VisitAction.Advance

    syntax.SyntaxTree.fromText(code).root.visit(visit)
    return found


def module_ports(source: str, module: str) -> list[Port] | None:
    """The ports of ``module`` in ``source`` (elaborated by pyslang), or None when it is not defined."""
    compilation = _compile(source, module)
    for instance in compilation.getRoot().topInstances:
        if instance.body.name == module:
            return [Port(p.name, str(p.direction).split(".")[-1], int(p.type.bitWidth)) for p in instance.body.portList]
    return None


def lint_candidate(code: str, expected_ports: list[Port] | None, harness: HarnessNames) -> list[str]:
    """Checks a candidate design; returns the problems found (empty when it may be simulated).

    Args:
        code: the candidate's Verilog/SystemVerilog source.
        expected_ports: the reference's ports, or None to skip the interface check.
        harness: the trusted side's names (see :func:`harness_names`).

    Returns:
        Human-readable problems, each one line, written for the agent to act on. Never raises on bad input.
    """
    tree = syntax.SyntaxTree.fromText(code)
    problems = _syntax_problems(tree, harness)
    if problems:
        return problems
    compilation = _compile_tree(tree, TOP_MODULE)
    problems += _semantic_problems(compilation)
    top = next((i for i in compilation.getRoot().topInstances if i.body.name == TOP_MODULE), None)
    if top is None:
        return [*problems, f"no module named `{TOP_MODULE}`; the design's top module must be `{TOP_MODULE}`"]
    problems += _driven_inputs(compilation)
    if expected_ports is not None:
        problems += _interface_problems(top, expected_ports)
    return _unique(problems)


def _syntax_problems(tree: syntax.SyntaxTree, harness: HarnessNames) -> list[str]:
    problems = [f"syntax error (line {_line(tree, d.location)}): {_diag_text(d)}" for d in tree.diagnostics if d.isError()]

    def visit(node: object) -> ast.VisitAction:
        if isinstance(node, parsing.Token):
            problems.extend(_directive_problems(node, harness))
        else:
            problems.extend(_node_problems(node, harness))
        return ast.VisitAction.Advance

    tree.root.visit(visit)
    root: Any = tree.root
    members = root.members if root.kind == syntax.SyntaxKind.CompilationUnit else [root]
    for member in members:
        if member.kind not in _TOP_LEVEL_OK and member.kind not in _FORBIDDEN_NODES:
            problems.append(f"only modules, primitives, packages, types, parameters and functions may appear at "
                            f"the top level, not "
                            f"`{str(member).strip().splitlines()[0][:60]}`")
    return _unique(problems)


def _node_problems(node: Any, harness: HarnessNames) -> list[str]:
    """Problems with one syntax node (forbidden kinds, system names, dotted names, module names)."""
    kind = node.kind
    if kind in _FORBIDDEN_NODES:
        return [_FORBIDDEN_NODES[kind]]
    if kind == syntax.SyntaxKind.SystemName:
        name = node.systemIdentifier.valueText
        if name == "$root":
            return ["`$root` names are not allowed: a design may only use its own signals"]
        if name not in ALLOWED_SYSTEM_NAMES:
            return [(f"system task/function `{name}` is not allowed in a design (no printing, simulation "
                     "control, files or random numbers); remove it")]
    elif kind == syntax.SyntaxKind.ScopedName and str(node.separator).strip() == ".":
        first = str(node).strip().split(".")[0].strip()
        if first == "$root":
            return ["`$root` names are not allowed: a design may only use its own signals"]
        if first in harness.modules | harness.instances:
            return [f"hierarchical reference `{str(node).strip()}` reaches outside the design"]
    elif kind in (syntax.SyntaxKind.ModuleDeclaration, syntax.SyntaxKind.PackageDeclaration):
        return _reserved_name(node.header.name.valueText, harness)
    elif kind == syntax.SyntaxKind.UdpDeclaration:
        return _reserved_name(node.name.valueText, harness)
    elif kind == syntax.SyntaxKind.HierarchyInstantiation and node.type.valueText in harness.modules:
        return [f"instantiating `{node.type.valueText}` is not allowed: it belongs to the testbench"]
    elif kind in (syntax.SyntaxKind.PortDeclaration, syntax.SyntaxKind.ImplicitAnsiPort) and "inout" in str(
        node.header if hasattr(node, "header") else node
    ).split():
        return ["`inout` ports are not allowed in a design here"]
    return []


def _directive_problems(token: parsing.Token, harness: HarnessNames) -> list[str]:
    problems = []
    for trivia in token.trivia:
        if trivia.kind != parsing.TriviaKind.Directive:
            continue
        node: Any = trivia.syntax()
        if node.kind not in _ALLOWED_DIRECTIVES:
            problems.append(f"compiler directive `{str(node).strip().split()[0]}` is not allowed in a design")
        elif node.kind == syntax.SyntaxKind.DefineDirective and node.name.valueText in harness.macros:
            problems.append(f"`define {node.name.valueText}` redefines a testbench macro; pick another name")
    return problems


def _reserved_name(name: str, harness: HarnessNames) -> list[str]:
    if name in harness.modules or name in harness.instances:
        return [f"module name `{name}` is reserved by the testbench; rename it"]
    return []


def _semantic_problems(compilation: ast.Compilation) -> list[str]:
    problems = []
    for diag in compilation.getAllDiagnostics():
        code = str(diag.code).removeprefix("DiagCode(").removesuffix(")")
        if diag.isError() and code in _NAME_ERRORS:
            problems.append(f"unresolved name ({code}): {_diag_text(diag)}; a design may only use its own "
                            f"modules and signals, with `{TOP_MODULE}` as its top")
        elif diag.isError() and code in _LIMIT_ERRORS:
            problems.append(f"the design exceeds elaboration limits ({code}); make it smaller")
    return problems


def _driven_inputs(compilation: ast.Compilation) -> list[str]:
    """Names of input ports that some assignment, increment or output connection drives from inside."""
    inputs: set[tuple[str, int]] = set()
    driven: list[object] = []

    def visit(node: object) -> ast.VisitAction:
        if isinstance(node, ast.InstanceBodySymbol):
            inputs.update(_key(p.internalSymbol) for p in node.portList
                          if str(p.direction).endswith("In") and p.internalSymbol is not None)
        elif isinstance(node, ast.AssignmentExpression):
            driven.extend(_named_values(node.left))
        elif isinstance(node, ast.UnaryExpression) and str(node.op).split(".")[-1] in _INCREMENT_OPS:
            driven.extend(_named_values(node.operand))
        return ast.VisitAction.Advance

    compilation.getRoot().visit(visit)
    return [f"input port `{s.name}` is driven inside the design; inputs are read-only"  # type: ignore[attr-defined]
            for s in driven if _key(s) in inputs]


def _named_values(expression: object) -> list[object]:
    found: list[object] = []

    def visit(node: object) -> ast.VisitAction:
        if isinstance(node, ast.NamedValueExpression):
            found.append(node.symbol)
        return ast.VisitAction.Advance

    expression.visit(visit)  # type: ignore[attr-defined]
    return found


def _key(symbol: object) -> tuple[str, int]:
    return (symbol.name, symbol.location.offset)  # type: ignore[attr-defined]


def _interface_problems(top: ast.InstanceSymbol, expected: list[Port]) -> list[str]:
    actual = [Port(p.name, str(p.direction).split(".")[-1], int(p.type.bitWidth)) for p in top.body.portList]
    if actual == expected or sorted(actual, key=lambda p: p.name) == sorted(expected, key=lambda p: p.name):
        return []
    want = ", ".join(p.describe() for p in expected)
    got = ", ".join(p.describe() for p in actual)
    return [f"`{TOP_MODULE}` has the wrong interface: expected ports ({want}), got ({got})"]


def _compile(source: str, top: str) -> ast.Compilation:
    return _compile_tree(syntax.SyntaxTree.fromText(source), top)


def _compile_tree(tree: syntax.SyntaxTree, top: str) -> ast.Compilation:
    options = ast.CompilationOptions()
    options.topModules = {top}
    compilation = ast.Compilation(pyslang.Bag([options]))
    compilation.addSyntaxTree(tree)
    return compilation


def _diag_text(diag: pyslang.Diagnostic) -> str:
    code = str(diag.code).removeprefix("DiagCode(").removesuffix(")")
    args = ", ".join(str(a) for a in diag.args)
    return f"{code}{f' ({args})' if args else ''}"


def _line(tree: syntax.SyntaxTree, location: pyslang.SourceLocation) -> int:
    try:
        return int(tree.sourceManager.getLineNumber(location))
    except Exception:  # noqa: BLE001 - a location outside the buffer (macro expansion) has no line
        return 0


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
