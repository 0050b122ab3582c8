"""Wire format of values crossing the sandbox boundary, as one JSON document per line.

Only builtin value types cross: None, bool, int, float (NaN and infinities included), str, bytes, complex,
list, tuple, set, frozenset, dict. JSON scalars encode themselves; containers and the rest are one-key
objects: ``{"l": [...]}`` list, ``{"t": [...]}`` tuple, ``{"s": [...]}`` set, ``{"f": [...]}`` frozenset,
``{"d": [[k, v], ...]}`` dict, ``{"b": "<base64>"}`` bytes, ``{"c": [re, im]}`` complex.

:func:`decode` builds values of exactly these builtin types, whatever the sender wrote: an object from the
candidate's process can never arrive with a custom ``__eq__`` (the "always-equal object" hack). It refuses
other shapes, nesting deeper than :data:`MAX_DEPTH`, and integers with more than 4300 digits.

This module is stdlib-only: its source is shipped into the sandbox and run by the call worker there.
"""

from __future__ import annotations

import base64
import json
from typing import Any

MAX_DEPTH = 64


class CodecError(ValueError):
    """A value cannot be encoded, or a message does not decode to builtin values."""


def encode(value: Any, depth: int = 0) -> Any:
    """Turns a builtin value into its JSON-ready form. Raises CodecError on any other type."""
    if depth > MAX_DEPTH:
        raise CodecError(f"value nested deeper than {MAX_DEPTH}")
    kind = type(value)
    if value is None or kind in (bool, str, float):
        return value
    if kind is int:
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return {"b": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, complex):
        return {"c": [value.real, value.imag]}
    if isinstance(value, dict):
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    for tag, types in (("l", list), ("t", tuple), ("f", frozenset), ("s", set)):
        if isinstance(value, types):
            return {tag: [encode(item, depth + 1) for item in value]}
    raise CodecError(f"cannot send a value of type {type(value).__name__} across the sandbox boundary")


def decode(data: Any, depth: int = 0) -> Any:
    """Rebuilds a value from its JSON form using builtin types only. Raises CodecError on anything else."""
    if depth > MAX_DEPTH:
        raise CodecError(f"value nested deeper than {MAX_DEPTH}")
    kind = type(data)
    if data is None or kind in (bool, int, float, str):
        return data
    if kind is not dict or len(data) != 1:
        raise CodecError(f"malformed value: expected a scalar or a one-key tagged object, got {kind.__name__}")
    ((tag, body),) = data.items()
    if tag == "b" and type(body) is str:
        return base64.b64decode(body.encode("ascii"), validate=True)
    if tag == "c" and type(body) is list and len(body) == 2 and all(type(x) in (int, float) for x in body):
        return complex(body[0], body[1])
    if type(body) is not list:
        raise CodecError(f"malformed value: tag {tag!r} needs a list")
    if tag == "d":
        pairs = [_pair(item, depth) for item in body]
        return dict(pairs)
    builders = {"l": list, "t": tuple, "s": set, "f": frozenset}
    if tag not in builders:
        raise CodecError(f"malformed value: unknown tag {tag!r}")
    try:
        return builders[tag](decode(item, depth + 1) for item in body)
    except TypeError as error:  # an unhashable member of a set
        raise CodecError(f"malformed value: {error}") from None


def _pair(item: Any, depth: int) -> tuple[Any, Any]:
    if type(item) is not list or len(item) != 2:
        raise CodecError("malformed value: dict items must be [key, value] pairs")
    key = decode(item[0], depth + 1)
    try:
        hash(key)
    except TypeError:
        raise CodecError(f"malformed value: unhashable dict key of type {type(key).__name__}") from None
    return key, decode(item[1], depth + 1)


def dumps(message: dict[str, Any]) -> bytes:
    """One message as a UTF-8 JSON line (with its newline)."""
    return (json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8")


def loads(line: bytes) -> dict[str, Any]:
    """Parses one message line. Raises CodecError when it is not a JSON object."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as error:
        raise CodecError(f"malformed message: {str(error)[:200]}") from None
    if type(message) is not dict:
        raise CodecError("malformed message: not a JSON object")
    return message
