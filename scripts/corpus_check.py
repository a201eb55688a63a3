"""Measure ToolHub's static reading of a corpus of real toolkit files, without running them.

    .venv/bin/python scripts/corpus_check.py FOLDER [--json]

FOLDER holds public Open WebUI tool files and RAGFlow plugin files (`*.py`, read recursively;
files with neither `class Tools` at the start of a line nor an `LLMToolPlugin` subclass, such as
tests, pipes and filters, are left out); docs/compatibility.md says how to fill one in a
temporary folder. Nothing here imports, compiles
or runs those files: like an upload, they are only read as text and through `ast`. Per file it
reports whether ToolHub's upload checks accept it (else the error codes), its kind and tools,
the packages it would ask for (required, and optional for imports guarded by
`try`/`except ImportError`), the imports of namespace packages (`google.*`, `azure.*`...), the
tools whose reST `:param` descriptions run over several lines (which the rule of Open WebUI 0.12.4
reads differently from the older single-line one), and the tools with a decorator other than
`staticmethod`/`classmethod`, whose spec depends on `functools.wraps` (see the deviations in
docs/compatibility.md). The totals end the report; `--json` prints every row instead.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from django.conf import settings  # noqa: E402

# The upload checks word their errors with gettext; English, and no project settings needed.
settings.configure(USE_I18N=False)

from toolhub.packages.import_names import NAMESPACE_ROOTS  # noqa: E402
from toolhub.runtime.specs import rest_param_docs  # noqa: E402
from toolhub.toolkits.source_checks import ToolkitSourceInvalid, parse_toolkit_source  # noqa: E402

MAX_FILES = 2000
MAX_FILE_BYTES = 2 * 1024 * 1024
# The reading of Open WebUI before 0.12.4: each `:param` line on its own.
_SINGLE_LINE_PARAM = re.compile(r":param (\w+):\s*(.+)")
_PLAIN_DECORATORS = {"staticmethod", "classmethod", "property", "cached_property"}
_TOOL_FILE = re.compile(rb"^class Tools\b|LLMToolPlugin\)", re.MULTILINE)


@dataclass
class Row:
    path: str
    accepted: bool
    errors: list[str] = field(default_factory=list)
    kind: str = ""
    tools: int = 0
    required: list[str] = field(default_factory=list)
    optional: list[str] = field(default_factory=list)
    namespace_imports: dict[str, str | None] = field(default_factory=dict)
    multiline_params: list[str] = field(default_factory=list)
    decorated_tools: list[str] = field(default_factory=list)


def _single_line_docs(docstring: str) -> dict[str, str]:
    docs = {}
    for line in docstring.splitlines():
        match = _SINGLE_LINE_PARAM.match(line.strip())
        if match:
            docs[match.group(1)] = match.group(2)
    return docs


def _tool_methods(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Tools"]
    if not classes:
        return []
    return [
        node for node in classes[-1].body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_")
    ]


def _decorator_name(node: ast.expr) -> str:
    node = node.func if isinstance(node, ast.Call) else node
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def check(path: Path, folder: Path) -> Row:
    from toolhub.packages.import_names import distribution_for

    data = path.read_bytes()[:MAX_FILE_BYTES]
    row = Row(path=str(path.relative_to(folder)), accepted=False)
    try:
        parsed = parse_toolkit_source(data, filename=path.name)
    except ToolkitSourceInvalid as exc:
        row.errors = sorted({error.code or "invalid" for error in exc.errors})
        return row
    row.accepted, row.kind, row.tools = True, parsed.kind, len(parsed.tool_names)
    row.required = [r.name for r in parsed.inferred_requirements]
    row.optional = [r.name for r in parsed.optional_requirements()]
    row.namespace_imports = {
        site.module: distribution_for(site.module) for site in parsed.import_sites if site.top in NAMESPACE_ROOTS
    }
    tree = ast.parse(parsed.source)
    for method in _tool_methods(tree):
        docstring = ast.get_docstring(method, clean=False) or ""
        if rest_param_docs(docstring) != {k: v for k, v in _single_line_docs(docstring).items()}:
            row.multiline_params.append(method.name)
        if {_decorator_name(d) for d in method.decorator_list} - _PLAIN_DECORATORS:
            row.decorated_tools.append(method.name)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--json", action="store_true", help="print every row as JSON")
    args = parser.parse_args()
    folder = args.folder.resolve()
    files = sorted(path for path in folder.rglob("*.py") if path.is_file() and not path.is_symlink())[:MAX_FILES]
    # A cloned repository also holds tests, pipes and filters: only tool files are measured.
    files = [path for path in files if _TOOL_FILE.search(path.read_bytes()[:MAX_FILE_BYTES])]
    # Forks carry the same files: each content is measured once.
    seen: set[str] = set()
    distinct = []
    for path in files:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest not in seen:
            seen.add(digest)
            distinct.append(path)
    duplicates, files = len(files) - len(distinct), distinct
    if not files:
        print(f"no tool files (`class Tools` or an LLMToolPlugin) under {folder}", file=sys.stderr)
        return 2
    rows = [check(path, folder) for path in files]
    if args.json:
        print(json.dumps([asdict(row) for row in rows], indent=2))
        return 0
    for row in rows:
        if not row.accepted:
            print(f"refused   {row.path}: {', '.join(row.errors)}")
            continue
        notes = []
        if row.required:
            notes.append("asks " + ", ".join(row.required))
        if row.optional:
            notes.append("offers optional " + ", ".join(row.optional))
        if row.multiline_params:
            notes.append("multi-line :param in " + ", ".join(row.multiline_params))
        if row.decorated_tools:
            notes.append("decorated " + ", ".join(row.decorated_tools))
        print(f"{row.kind:<10}{row.path}: {row.tools} tool(s)" + ("; " + "; ".join(notes) if notes else ""))
    accepted = [row for row in rows if row.accepted]
    namespaced = [row for row in accepted if row.namespace_imports]
    print()
    print(f"tool files: {len(rows)} (and {duplicates} copies of them left out); accepted by the upload checks:"
          f" {len(accepted)}")
    for kind in sorted({row.kind for row in accepted}):
        print(f"  {kind}: {sum(row.kind == kind for row in accepted)}")
    print(f"files whose :param descriptions the 0.12.4 rule reads differently: "
          f"{sum(bool(row.multiline_params) for row in accepted)}")
    print(f"files with decorated tools (spec depends on functools.wraps): "
          f"{sum(bool(row.decorated_tools) for row in accepted)}")
    print(f"files importing namespace packages: {len(namespaced)}; imports left without a distribution: "
          f"{sum(name is None for row in namespaced for name in row.namespace_imports.values())}")
    print(f"files offering optional packages: {sum(bool(row.optional) for row in accepted)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
