"""Reading the Berkeley Function Calling Leaderboard data shipped in the ``bfcl-eval`` wheel (Apache-2.0).

Files (JSON lines): ``bfcl_eval/data/BFCL_v4_<category>.json`` with ``{"id", "question", "function", ...}``
and ``bfcl_eval/data/possible_answer/BFCL_v4_<category>.json`` with ``{"id", "ground_truth"}``. Function
docs use BFCL's own type names (``dict``, ``float``, ``tuple``, ``any``); :func:`to_json_schema` turns them
into JSON schema for ``info["tools"]``. The package is located without importing it (its ``__init__`` is
light, but its declared dependencies are not installed here).

Categories and their support in rlvr_gym (``SUPPORTED`` / ``UNSUPPORTED``):
    single-turn, Python: simple_python, multiple, parallel, parallel_multiple, irrelevance, live_simple,
    live_multiple, live_parallel, live_parallel_multiple, live_irrelevance (AST match / no call);
    multi-turn: multi_turn_base, multi_turn_miss_func, multi_turn_miss_param, multi_turn_long_context
    (back-end state and execution-result checks).
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from typing import Any

SINGLE_TURN = (
    "simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance",
    "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance",
)  # fmt: skip
MULTI_TURN = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
SUPPORTED = SINGLE_TURN + MULTI_TURN
UNSUPPORTED = {
    "simple_java": "Java argument strings need BFCL's Java type converter; our matcher checks Python values only",
    "simple_javascript": "JavaScript argument strings need BFCL's JS type converter; Python values only here",
    "live_relevance": "scored as 'any call is right' with no possible answers: nothing to verify beyond format",
    "memory": "needs prerequisite conversations and an embedding model (memory_vector) to build its state",
    "web_search": "needs live web search (SerpAPI) at run time",
    "format_sensitivity": "a prompt-format robustness study over other categories, not tasks of its own",
}
_TYPE_MAP = {
    "dict": "object", "float": "number", "double": "number", "tuple": "array", "integer": "integer",
    "long": "integer", "string": "string", "char": "string", "boolean": "boolean", "array": "array",
}  # fmt: skip


def data_dir() -> Path:
    """The ``bfcl_eval/data`` folder of the installed wheel.

    Raises:
        ModuleNotFoundError: when ``bfcl-eval`` is not installed (install it with
            ``pip install --no-deps bfcl-eval==2026.3.23``, as ``.ci/setup`` does).
    """
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "tools/BFCL needs the bfcl-eval wheel: pip install --no-deps bfcl-eval==2026.3.23", name="bfcl_eval"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@functools.cache
def load_category(category: str) -> tuple[dict[str, Any], ...]:
    """The entries of one category, each with its ``ground_truth`` merged in (None for irrelevance) and
    ``category`` set. Cached: treat the entries as read-only.

    Raises:
        ValueError: for a category rlvr_gym does not support, with the reason.
    """
    if category not in SUPPORTED:
        reason = UNSUPPORTED.get(category, "no such category")
        raise ValueError(f"BFCL category {category!r} is not supported ({reason}); supported: {SUPPORTED}")
    entries = _read_jsonl(data_dir() / f"BFCL_v4_{category}.json")
    answer_path = data_dir() / "possible_answer" / f"BFCL_v4_{category}.json"
    answers = {a["id"]: a["ground_truth"] for a in _read_jsonl(answer_path)} if answer_path.is_file() else {}
    return tuple({**entry, "category": category, "ground_truth": answers.get(entry["id"])} for entry in entries)


@functools.cache
def _index(category: str) -> dict[str, dict[str, Any]]:
    return {entry["id"]: entry for entry in load_category(category)}


def resolve(data: dict[str, Any]) -> dict[str, Any]:
    """The wheel's entry a task refers to: task data is ``{"category": ..., "bfcl_id": ...}`` (suites keep
    references, not copies, of the 2-10 MB categories).

    Raises:
        KeyError: when the installed wheel has no such entry (a different bfcl-eval version).
    """
    entries = _index(data["category"])
    if data["bfcl_id"] not in entries:
        raise KeyError(f"no BFCL entry {data['bfcl_id']!r} in {data['category']}; is bfcl-eval==2026.3.23 installed?")
    return entries[data["bfcl_id"]]


@functools.lru_cache(maxsize=32)
def class_function_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    """The function docs of one multi-turn back-end class (``multi_turn_func_doc/<file>.json``)."""
    from_file = {
        "GorillaFileSystem": "gorilla_file_system", "MathAPI": "math_api", "MessageAPI": "message_api",
        "TwitterAPI": "posting_api", "TicketAPI": "ticket_api", "TradingBot": "trading_bot",
        "TravelAPI": "travel_booking", "VehicleControlAPI": "vehicle_control",
    }  # fmt: skip
    return tuple(_read_jsonl(data_dir() / "multi_turn_func_doc" / f"{from_file[class_name]}.json"))


def to_json_schema(parameters: dict[str, Any]) -> dict[str, Any]:
    """Converts a BFCL parameter doc to JSON schema: ``dict`` -> ``object``, ``float`` -> ``number``,
    ``tuple`` -> ``array``, ``any`` -> no type constraint, a null ``default`` adds ``"null"`` to the type;
    ``properties``, ``items`` and ``required`` are kept, as are ``description``, ``enum`` and ``default``."""
    schema: dict[str, Any] = {}
    bfcl_type = str(parameters.get("type", "any"))
    if bfcl_type.lower() in _TYPE_MAP:
        schema["type"] = _TYPE_MAP[bfcl_type.lower()]
        if "default" in parameters and parameters["default"] is None:  # live docs: a null default = nullable
            schema["type"] = [schema["type"], "null"]
    for key in ("description", "enum", "default"):
        if key in parameters:
            schema[key] = parameters[key]
    if isinstance(schema.get("enum"), list) and "default" in parameters and parameters["default"] is None:
        schema["enum"] = [*schema["enum"], None]
    if isinstance(parameters.get("properties"), dict):
        schema["properties"] = {k: to_json_schema(v) for k, v in parameters["properties"].items()}
    if isinstance(parameters.get("items"), dict):
        schema["items"] = to_json_schema(parameters["items"])
    if parameters.get("required"):
        schema["required"] = list(parameters["required"])
    if schema.get("type") == "object" and "properties" not in schema and bfcl_type == "dict":
        schema["properties"] = {}
    return schema
