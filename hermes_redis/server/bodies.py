"""Request bodies: strict JSON of valid text. JSON that Python would accept but JSON forbids
(NaN, Infinity) or cannot hold (1e400), and lone surrogate escapes, are refused before they
reach storage; the library checks everything else, so its messages are the API's."""

import codecs
import json
import math
from typing import Any

from hermes_redis.core.errors import ValidationError
from hermes_redis.core.models import MAX_JSON_DEPTH  # issue 35
from hermes_redis.server.errors import NOT_JSON, ApiError


def check_text(value: Any, where: str = "request body") -> Any:
    """``value`` unchanged if every string in it is text. JSON may escape a lone surrogate
    (``"\\ud800"``): not text, and neither Redis nor SQLite can store it."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValidationError(f"{where} is not valid UTF-8 (a lone surrogate escape): "
                                  "send text") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(key, where)
            check_text(item, str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_text(item, f"{where}[{i}]")
    return value


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValidationError(f"number {text[:40]} is out of range: send finite numbers")
    return value


def _not_json(name: str) -> Any:
    raise ValidationError(f"{name} is not a JSON number: send finite numbers")


DEEP = (f"request body nests deeper than {MAX_JSON_DEPTH} levels of objects and arrays: "
        "flatten it")  # issue 35
_BODY = json.JSONDecoder(parse_float=_finite, parse_constant=_not_json)


def json_body(raw: bytes) -> Any:
    """The parsed body (400 ``malformed_json`` when it is not JSON). Strict UTF-8 with no
    ``\\u`` escape holds no lone surrogate, so only other bodies are walked by ``check_text``."""
    try:
        text = (raw.decode("utf-8-sig" if raw.startswith(codecs.BOM_UTF8) else "utf-8")
                if b"\x00" not in raw else None)  # NULs: UTF-16 or UTF-32
    except UnicodeDecodeError:
        text = None  # json decides: surrogates encoded as bytes are not text
    try:
        data = (_BODY.decode(text) if text is not None
                else json.loads(raw, parse_float=_finite, parse_constant=_not_json))
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "malformed_json", NOT_JSON) from None
    except RecursionError:  # issue 35: nested past Python's stack: a 422, never a 500
        raise ValidationError(DEEP) from None
    try:
        return data if text is not None and "\\u" not in text else check_text(data)
    except RecursionError:  # issue 35
        raise ValidationError(DEEP) from None


def oversized(items: list[Any], limit: int) -> bool:
    """Whether any item's content is over ``limit`` UTF-8 bytes (the library says so; the
    server only chooses 413 for it)."""
    for item in items:
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, str) and len(content) > limit // 4 and \
                len(content.encode("utf-8", "surrogatepass")) > limit:
            return True
    return False
