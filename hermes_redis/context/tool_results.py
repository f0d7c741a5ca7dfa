"""Oversized tool results, replaced in the hot tier and the context by a summary that fits
the kind of output (the seed's ``tool_result_summarize``); the full text stays in the archive.

- JSON: its shape, with the values of short scalar fields;
- code: its outline (imports, classes, functions with their signatures);
- logs: the first and last lines, and every line that reports an error;
- any other text: its head and tail.

``summarize(text, limit, tokenizer, where)`` guarantees at most ``limit`` tokens and says what
it is and where the full text is.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hermes_redis.core.tokens import Tokenizer

_CODE_LINE = re.compile(
    r"^\s*(?:(?:export\s+)?(?:async\s+)?(?:def|class|function|func|fn|interface|struct|enum|trait|impl|"
    r"module|package)\b|(?:public|private|protected|static)\s[^=;]*\(|import\b|from\s+\S+\s+import\b|"
    r"#include\b|using\s+\S+;|(?:const|let|var)\s+\w+\s*=\s*(?:async\s*)?(?:\(|function))")
_CODE_HINT = re.compile(r"^\s*(?:def |class |import |from \S+ import |function |#include |package |"
                        r"func |fn |public |const \w+ = )", re.M)
_ERROR = re.compile(r"\b(?:error|exception|traceback|fatal|fail(?:ed|ure)?|panic|critical|warn(?:ing)?)\b",
                    re.I)
_LOG_HINT = re.compile(r"^\s*(?:\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d|\[?\d\d:\d\d:\d\d|\[?(?:INFO|DEBUG|WARN|"
                       r"WARNING|ERROR|TRACE)\b)", re.M)


def kind_of(text: str) -> str:
    """``json``, ``code``, ``log`` or ``text``."""
    stripped = text.strip()
    if stripped[:1] in "[{":
        try:
            json.loads(stripped)
            return "json"
        except ValueError:
            pass
    lines = max(1, text.count("\n") + 1)
    if len(_LOG_HINT.findall(text)) >= max(3, lines // 4):
        return "log"
    if len(_CODE_HINT.findall(text)) >= max(2, lines // 40):
        return "code"
    return "text"


def summarize(text: str, limit: int, tokenizer: Tokenizer, where: str) -> str:
    """A summary of the tool result ``text`` within ``limit`` tokens (see the module doc)."""
    kind = kind_of(text)
    total = tokenizer.count(text)
    head = f"[tool result: {kind}, {total} tokens, summarized; full text in {where}]\n"
    if kind == "json":
        body = _json_shape(json.loads(text))
    elif kind == "code":
        body = "\n".join(line.rstrip() for line in text.splitlines() if _CODE_LINE.match(line))
    elif kind == "log":
        body = _log_lines(text.splitlines())
    else:
        return tokenizer.cap(text, limit, where)
    out = head + body
    if tokenizer.count(out) > limit:
        out = head + tokenizer.cap(body, max(16, limit - tokenizer.count(head) - 2), where)
    return out if tokenizer.count(out) <= limit else tokenizer.cap(out, limit, where)


def _json_shape(value: Any, indent: str = "", depth: int = 0) -> str:
    """Keys and types, arrays by their length and first item, short scalars by value."""
    pad = indent + "  "
    if isinstance(value, dict):
        if depth > 4:
            return "{…}"
        parts = [f"{pad}{k}: {_json_shape(v, pad, depth + 1)}" for k, v in list(value.items())[:40]]
        more = f"\n{pad}… {len(value) - 40} more keys" if len(value) > 40 else ""
        return "{\n" + "\n".join(parts) + more + f"\n{indent}}}"
    if isinstance(value, list):
        if not value:
            return "[]"
        return f"[{len(value)} items, first: {_json_shape(value[0], indent, depth + 1)}]"
    if isinstance(value, str):
        return json.dumps(value if len(value) <= 60 else value[:57] + "…", ensure_ascii=False)
    return json.dumps(value)


def _log_lines(lines: list[str], ends: int = 5, errors: int = 40) -> str:
    """The first and last ``ends`` lines and up to ``errors`` error lines between, in order."""
    keep = set(range(min(ends, len(lines)))) | set(range(max(0, len(lines) - ends), len(lines)))
    keep |= {i for i, line in enumerate(lines) if _ERROR.search(line)}
    chosen = sorted(keep)
    if len(chosen) > 2 * ends + errors:  # too many errors: the first ones and the end
        chosen = chosen[: ends + errors] + chosen[-ends:]
    out, last = [], -1
    for i in chosen:
        if i != last + 1:
            out.append(f"[… {i - last - 1} lines …]")
        out.append(lines[i])
        last = i
    return "\n".join(out)
