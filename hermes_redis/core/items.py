"""A message's structured payload (``item``): any JSON value a framework stores next to the
text, kept exactly (key order, types, text) as JSON text in both tiers; and its rendering,
the short text that stands in for ``content`` when a message has none.

The item is never cut. Tokens, search and summaries read ``content`` (the rendering), which
the usual caps may shorten; a framework reads the item back whole.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hermes_redis.core.errors import ValidationError
from hermes_redis.core.models import MAX_JSON_DEPTH, check_json_depth

MAX_DEPTH = MAX_JSON_DEPTH  # nesting levels an item may have (one limit with tool_calls)
_TEXT_KEYS = ("text", "content", "output", "summary", "refusal", "result", "input", "tool_calls")


def check_item(item: object, max_bytes: int) -> str:
    """The item as compact JSON text ("" for None); a ValidationError for what JSON cannot
    hold exactly (non-string keys, NaN, sets, objects) or an item over ``max_bytes``."""
    if item is None:
        return ""
    check_json_depth(item, "item")  # issue 35: iterative, before anything recurses into it
    _check_json(item, "item", 0)
    try:
        text = json.dumps(item, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValidationError("item holds invalid UTF-8 (a lone surrogate): send text") from None
    if size > max_bytes:
        raise ValidationError(f"item is {size} bytes as JSON, over the limit of {max_bytes} "
                              "(limits.max_content_bytes)")
    return text


def _check_json(value: object, where: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ValidationError(f"item nests deeper than {MAX_DEPTH} levels at {where}")
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(f"{where} is {value}: JSON holds finite numbers only")
        return
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _check_json(v, f"{where}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValidationError(f"{where} has the key {k!r}: JSON object keys are text")
            _check_json(v, f"{where}.{k}", depth + 1)
        return
    raise ValidationError(f"{where} is a {type(value).__name__}: an item holds JSON values only "
                          "(objects, arrays, text, numbers, true/false, null)")


def render(item: Any, max_chars: int) -> str:
    """A short readable text for ``item``: its text fields (``text``, ``content``, ``output``,
    a call's name and arguments…) in order, else its JSON, cut to ``max_chars``; never blank."""
    parts: list[str] = []
    _texts(item, parts, 0)
    text = "\n".join(p for p in parts if p.strip())
    if not text.strip():
        kind = item.get("type") if isinstance(item, dict) else None
        text = f"[{kind}]" if isinstance(kind, str) and kind.strip() else \
            json.dumps(item, ensure_ascii=False)
    if not text.strip():
        text = "[item]"
    return text if len(text) <= max_chars else text[: max(1, max_chars - 1)] + "…"


def _texts(value: Any, out: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        return
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, list | tuple):
        for v in value:
            _texts(v, out, depth + 1)
    elif isinstance(value, dict):
        name, args = value.get("name"), value.get("arguments", value.get("args"))
        if isinstance(name, str) and args is not None:  # a function call: name(arguments)
            shown = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            out.append(f"{name}({shown})")
            return
        for key in _TEXT_KEYS:
            if key in value:
                _texts(value[key], out, depth + 1)
        if "data" in value and isinstance(value["data"], dict):  # langchain's messages_to_dict
            _texts(value["data"], out, depth + 1)
