"""The rules between ToolHub's parts (docs/architecture.md), read from the source with `ast`:
every import counts, also one inside a function."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "toolhub"

# Project-level modules wire the apps together; they are not part of any app.
PROJECT_MODULES = {"toolhub", "toolhub.settings", "toolhub.settings_test", "toolhub.urls", "toolhub.wsgi",
                   "toolhub.asgi", "toolhub.celery"}
# Parts that never import Django, and the other parts of ToolHub each of them may import.
DJANGO_FREE = {
    "toolhub.runtime": set(),
    "toolhub.sandbox": {"toolhub.messages"},
    "toolhub.vault": set(),
    "toolhub.messages": set(),
    "toolhub.packages.envbuild": {
        "toolhub.packages.build_runner", "toolhub.packages.locks", "toolhub.sandbox.build", "toolhub.messages"
    },
    "toolhub.packages.locks": {"toolhub.packages.build_runner", "toolhub.sandbox.build", "toolhub.messages"},
    "toolhub.packages.build_runner": {"toolhub.sandbox.build", "toolhub.messages"},
    "toolhub.packages.index_client": set(),
}


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str, root: Path = ROOT) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imports(path: Path, root: Path = ROOT) -> set[str]:
    """Every module of toolhub/ and every top-level package this file imports, anywhere in it."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                # `from toolhub.x import y` imports the module toolhub.x.y when there is one.
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate.startswith("toolhub") and _is_module(candidate, root) else base)
    return found


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.parts or "demo" in path.parts:
            continue
        graph[_module_name(path)] = _imports(path)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan), and self-loops."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _part(module: str) -> str | None:
    """The app (toolhub.<app>) a module belongs to, or None for project-level modules."""
    if module in PROJECT_MODULES or not module.startswith("toolhub."):
        return None
    return ".".join(module.split(".")[:2])


def test_no_module_imports_one_that_imports_it_back():
    assert _cycles(_graph()) == []


def test_no_two_apps_import_each_other():
    apps: dict[str, set[str]] = defaultdict(set)
    for module, targets in _graph().items():
        source = _part(module)
        if source is None:
            continue
        apps[source]  # noqa: B018 - every app is a node, also one that imports no other
        for target in targets:
            part = _part(target)
            if part is not None and part != source:
                apps[source].add(part)
    assert _cycles(dict(apps)) == []


@pytest.mark.parametrize("part", sorted(DJANGO_FREE))
def test_the_django_free_parts_import_neither_django_nor_the_apps(part):
    allowed = DJANGO_FREE[part]
    for module, targets in _graph().items():
        if module != part and not module.startswith(part + "."):
            continue
        for target in targets:
            assert target.split(".")[0] not in ("django", "celery", "ninja"), f"{module} imports {target}"
            if target.startswith("toolhub") and not (target == part or target.startswith(part + ".")):
                assert target in allowed, f"{module} imports {target}"


def test_the_check_sees_function_local_imports(tmp_path):
    package = tmp_path / "toolhub"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from toolhub import b\n")
    (package / "b.py").write_text("import toolhub.a\n")
    graph = {f"toolhub.{n}": _imports(package / f"{n}.py", tmp_path) for n in ("a", "b")}
    assert _cycles(graph) == [["toolhub.a", "toolhub.b"]]


# Modules stay small enough to read in one sitting (docs/architecture.md). Test modules are
# exempt: each is a flat list of independent cases, read one test at a time, and a module per
# subject reads better than the same cases cut at an arbitrary length. Migrations are generated.
MAX_MODULE_LINES = 800
SIZED = ("toolhub", "scripts", "bench")


def _long_modules(root: Path = ROOT) -> dict[str, int]:
    found = {}
    for top in SIZED:
        for path in (root / top).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            lines = len(path.read_text().splitlines())
            if lines > MAX_MODULE_LINES:
                found[str(path.relative_to(root))] = lines
    return found


def test_no_module_is_longer_than_800_lines():
    assert _long_modules() == {}


def test_the_length_check_sees_a_long_module(tmp_path):
    (tmp_path / "toolhub" / "migrations").mkdir(parents=True)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "bench").mkdir()
    (tmp_path / "toolhub" / "long.py").write_text("x = 1\n" * 801)
    (tmp_path / "toolhub" / "short.py").write_text("x = 1\n" * 800)
    (tmp_path / "toolhub" / "migrations" / "0001_initial.py").write_text("x = 1\n" * 2000)
    assert _long_modules(tmp_path) == {"toolhub/long.py": 801}


# The repository stands alone: nothing in it may point at a path outside it, such as the
# folder of specifications it was written from or the machine it was developed on.
OUTSIDE_PATTERNS = ("../" + "shared", "/" + "work/")
CHECKED_FILES = ("README.md", "Makefile", "docs/**/*.md", "bench/**/*", "toolhub/**/*", "scripts/**/*",
                 "tests/**/*.py", "templates/**/*.html", ".ci/*")


def _outside_references(root: Path = ROOT) -> list[str]:
    found = []
    for pattern in CHECKED_FILES:
        for path in sorted(root.glob(pattern)):
            if not path.is_file() or "__pycache__" in path.parts or path.suffix in (".mo", ".png", ".pyc"):
                continue
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue
            for number, line in enumerate(text.splitlines(), 1):
                for outside in OUTSIDE_PATTERNS:
                    if outside in line:
                        found.append(f"{path.relative_to(root)}:{number}: {outside}")
    return found


def test_nothing_refers_to_a_path_outside_the_repository():
    assert _outside_references() == []


def test_the_outside_path_check_sees_a_reference(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "toolhub").mkdir()
    (tmp_path / "docs" / "a.md").write_text("See ../" + "shared/API.md.\n")
    (tmp_path / "toolhub" / "b.py").write_text('PATH = "/' + 'work/main/x"\n')
    (tmp_path / "toolhub" / "c.py").write_text('PATH = "docs/api.md"\n')
    shared, work = OUTSIDE_PATTERNS
    assert _outside_references(tmp_path) == [f"docs/a.md:1: {shared}", f"toolhub/b.py:1: {work}"]


# Code, tests and docs say what something is for, not which issue or finding asked for it:
# that history lives in git.
HISTORY = re.compile(r"\b(?:[Ii]ssue|[Ff]indings?) \d+")


def _history_references(root: Path = ROOT) -> list[str]:
    found = []
    for pattern in ("README.md", "docs/**/*.md", "bench/**/*.py", "bench/README.md", "toolhub/**/*.py", "tests/**/*.py"):
        for path in sorted(root.glob(pattern)):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if HISTORY.search(line):
                    found.append(f"{path.relative_to(root)}:{number}")
    return found


def test_nothing_names_the_issue_or_finding_it_came_from():
    assert _history_references() == []


def test_the_history_check_sees_a_reference(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text('"""Fair use (iss' + 'ue 15)."""\n')
    (tmp_path / "tests" / "test_b.py").write_text('"""Fair use: one tissue 15 paper."""\n')
    assert _history_references(tmp_path) == ["tests/test_a.py:1"]
