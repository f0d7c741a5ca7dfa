"""The shape of the package, checked: the library never names its worker process, the faces
stay small, and docs/architecture.md lists every module (issue 29)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hermes_redis"
FACES = ("server", "cli")  # the MCP module lives in server/
MAX_FUNCTION_LINES = 60


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def dotted(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.mark.parametrize("path", modules(), ids=dotted)
def test_no_library_module_imports_or_names_the_worker_process(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = re.findall(r"\bworkers\.\w+", node.value)  # a dotted path, e.g. an RQ job name
        else:
            continue
        wrong = [n for n in names if n == "workers" or n.startswith("workers.")]
        assert not wrong, f"{dotted(path)}:{node.lineno} names {wrong}: the library must not know workers/"


def long_functions(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{dotted(path, root)}.{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno is not None
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]


def test_no_function_in_the_faces_is_longer_than_60_lines() -> None:
    found = [f for face in FACES for path in sorted((PACKAGE / face).rglob("*.py"))
             for f in long_functions(path)]
    assert not found, f"split these: {found}"


def test_the_size_check_can_fail(tmp_path: Path) -> None:
    long = tmp_path / "hermes_redis" / "x.py"
    long.parent.mkdir()
    long.write_text("def f() -> None:\n" + "    pass\n" * MAX_FUNCTION_LINES)
    assert long_functions(long, tmp_path) == ["hermes_redis.x.f (61 lines)"]


def test_the_architecture_page_lists_every_module() -> None:
    """docs/architecture.md's module table names each module by its path under hermes_redis/
    (a package's ``__init__`` only when it holds more than a docstring and re-exports)."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [str(p.relative_to(PACKAGE)) for p in modules()
               if not (p.name == "__init__.py" and len(p.read_text(encoding="utf-8").splitlines()) < 10)
               and f"`{p.relative_to(PACKAGE)}`" not in page]
    assert not missing, f"add these to docs/architecture.md's module table: {missing}"
