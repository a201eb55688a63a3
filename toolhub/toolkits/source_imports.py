"""Which modules an uploaded toolkit imports, read from its syntax tree: every import with its
line and whether it is optional (inside `try`/`except ImportError`, under `if TYPE_CHECKING:`).
Nothing is imported; the names feed inferred requirements, Open WebUI warnings and the review of
network egress."""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass

from toolhub.packages.import_names import is_namespace


@dataclass(frozen=True)
class ImportSite:
    """One module an import statement names. `module` is the dotted name as written
    (`open_webui.models.users`); `optional` when the statement can fail without the
    toolkit failing: inside a `try` whose handlers catch `ImportError` (or a base of it),
    or under `if TYPE_CHECKING:`, which never runs."""

    module: str
    line: int
    optional: bool = False
    # False under `if TYPE_CHECKING:`: the import never runs, so it asks for nothing at all.
    runs: bool = True

    @property
    def top(self) -> str:
        return self.module.split(".")[0]


# The top-level package of Open WebUI itself, which no environment can provide.
OPEN_WEBUI_PACKAGE = "open_webui"


@dataclass(frozen=True)
class InferredRequirement:
    """A distribution a toolkit imports without declaring it: `name` (canonical) from the
    import of `module` on `line` (its first import that is not optional)."""

    name: str
    module: str
    line: int


def literal_string(node: ast.expr | None) -> str | None:
    """The value of a string literal, or None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def imported_names(nodes: list[ast.AST]) -> list[str]:
    """Top-level module names imported anywhere, also dynamically by a literal name."""
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and node.args:
            func, name = node.func, literal_string(node.args[0])
            dynamic = (isinstance(func, ast.Name) and func.id == "__import__") or (
                isinstance(func, ast.Attribute) and func.attr == "import_module"
            )
            if dynamic and name and not name.startswith("."):
                names.add(name.split(".")[0])
    return sorted(names)


_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def _catches_import_error(handlers: list[ast.ExceptHandler]) -> bool:
    for handler in handlers:
        if handler.type is None:
            return True  # a bare `except:`
        caught = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        for node in caught:
            name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
            if name in _IMPORT_ERRORS:
                return True
    return False


def _is_type_checking(test: ast.expr) -> bool:
    name = test.attr if isinstance(test, ast.Attribute) else getattr(test, "id", "")
    return name == "TYPE_CHECKING"


def import_sites(tree: ast.Module) -> list[ImportSite]:
    """Every module imported, with its line and whether the import is optional.

    Walked with an explicit stack (like `ast.walk`), so deeply nested code that parsed
    cannot exhaust the recursion limit here.
    """
    sites: list[ImportSite] = []
    stack: list[tuple[ast.AST, bool, bool]] = [(tree, False, True)]
    while stack:
        node, optional, runs = stack.pop()
        if isinstance(node, ast.Import):
            sites.extend(ImportSite(alias.name, node.lineno, optional, runs) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if is_namespace(node.module):
                # `from google.cloud import storage` imports google.cloud.storage.
                names = [alias.name for alias in node.names if alias.name != "*"] or [""]
                modules = [f"{node.module}.{name}".rstrip(".") for name in names]
                sites.extend(ImportSite(module, node.lineno, optional, runs) for module in modules)
            else:
                sites.append(ImportSite(node.module, node.lineno, optional, runs))
        elif isinstance(node, ast.Call) and node.args:
            func, name = node.func, literal_string(node.args[0])
            dynamic = (isinstance(func, ast.Name) and func.id == "__import__") or (
                isinstance(func, ast.Attribute) and func.attr == "import_module"
            )
            if dynamic and name and not name.startswith("."):
                sites.append(ImportSite(name, node.lineno, optional, runs))
        if isinstance(node, ast.Try | ast.TryStar):
            guarded = optional or _catches_import_error(node.handlers)
            stack.extend((child, guarded, runs) for child in node.body)
            rest = [*node.handlers, *node.orelse, *node.finalbody]
            stack.extend((child, optional, runs) for child in rest)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend((child, True, False) for child in node.body)
            stack.extend((child, optional, runs) for child in node.orelse)
        else:
            stack.extend((child, optional, runs) for child in ast.iter_child_nodes(node))
    return sorted(sites, key=lambda site: (site.line, site.module))


def import_sites_in(source: str) -> list[ImportSite]:
    """The import sites of source that passed the checks before (stored revisions)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, MemoryError, RecursionError, ValueError):
        return []
    return import_sites(tree)
