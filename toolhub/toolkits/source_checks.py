"""Static checks of an uploaded toolkit file: `parse_toolkit_source` and what it returns.

The file is only read as text and through `ast`: nothing imports, compiles or runs the uploaded code,
because its author is treated as hostile. The checks are in three modules: the frontmatter and its
`requirements:` line (`source_frontmatter`), the imports (`source_imports`), and here the decoding,
the toolkit class, its tools, the counts and the names. Their messages use Django's gettext, so a
page and the API answer in the reader's language (line numbers and names are placeholders); nothing
else of Django is used, and no database. `licence` in the frontmatter becomes `license` in
`ParsedToolkit.manifest` only.

The names other modules use are importable from here.
"""

from __future__ import annotations

import ast
import hashlib
import re
import unicodedata
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from toolhub.packages.import_names import distribution_for, name_provides, needs_distribution
from toolhub.toolkits.source_frontmatter import (
    MAX_NAME_CHARS,
    MAX_REQUIREMENTS,
    MAX_SPECIFIER_CHARS,
    Requirement,
    SourceError,
    frontmatter_entries,
    openwebui_frontmatter,
    parse_frontmatter,
    parse_requirements,
)
from toolhub.toolkits.source_imports import (
    OPEN_WEBUI_PACKAGE,
    ImportSite,
    InferredRequirement,
    import_sites,
    import_sites_in,
    imported_names,
    literal_string,
)

__all__ = [
    "MAX_HOSTS", "MAX_IMPORTS", "MAX_NAME_CHARS", "MAX_REQUIREMENTS", "MAX_SOURCE_BYTES", "MAX_SPECIFIER_CHARS",
    "MAX_TOOLS", "OPEN_WEBUI_PACKAGE", "ImportSite", "InferredRequirement", "ParsedToolkit", "Requirement",
    "SourceError", "ToolkitSourceInvalid", "import_sites_in", "openwebui_frontmatter", "parse_frontmatter",
    "parse_toolkit_source", "slugify",
]

MAX_SOURCE_BYTES = 512 * 1024
# Counts a toolkit may not exceed (the requirements' and names' limits are in source_frontmatter).
MAX_IMPORTS = 300
MAX_HOSTS = 300
MAX_TOOLS = 200

_KEY_ALIASES = {"licence": "license"}
_URL_IN_TEXT = re.compile(r"https?://[^\s'\"<>\\]+", re.IGNORECASE)
_PROPERTIES = {"property", "cached_property", "setter", "getter", "deleter"}
_Function = ast.FunctionDef | ast.AsyncFunctionDef


class ToolkitSourceInvalid(Exception):
    """Every problem found: those without a line first, then in line order."""

    def __init__(self, errors: list[SourceError]) -> None:
        self.errors = sorted(errors, key=lambda e: (e.line or 0, e.column or 0))
        super().__init__("; ".join(e.message for e in self.errors))


@dataclass(frozen=True)
class ParsedToolkit:
    """What the static checks learnt. `kind` is "openwebui" (`class Tools`), "ragflow" or "agent_strategy"; `tool_names`
    are the public methods of `Tools` in source order, or a plugin's literal metadata name (else its
    class name in snake case); `imports` and `hosts` (of http(s) URLs in non-docstring literals) are
    hints for reviewing network egress, not a guarantee."""

    kind: str
    source: str
    sha256: str
    manifest: dict[str, str]
    title: str
    description: str
    author: str
    version: str
    requirements: list[Requirement]
    tool_names: list[str]
    has_valves: bool
    has_user_valves: bool
    class_name: str
    plugin_version: str | None
    imports: list[str]
    hosts: list[str]
    suggested_slug: str
    # The source line of each manifest key (after aliasing), so pages can point at it.
    manifest_lines: dict[str, int] = field(default_factory=dict)
    # Every import with its line, in line order (`imports` has the top-level names only).
    import_sites: list[ImportSite] = field(default_factory=list)

    @property
    def open_webui_imports(self) -> list[ImportSite]:
        return [site for site in self.import_sites if site.top == OPEN_WEBUI_PACKAGE]

    @property
    def inferred_requirements(self) -> list[InferredRequirement]:
        return self.infer_requirements()

    def infer_requirements(self, mappings: Mapping[str, str] | None = None) -> list[InferredRequirement]:
        """Each distribution the code imports that `requirements:` does not name (`mappings`:
        module -> distribution chosen by an admin). Optional imports (in `try`/`except
        ImportError`, under `if TYPE_CHECKING:`) ask for nothing."""
        declared = {requirement.name for requirement in self.requirements}
        found: dict[str, InferredRequirement] = {}
        for site in self.import_sites:
            if site.optional or not needs_distribution(site.top, kind=self.kind):
                continue
            name = distribution_for(site.module, mappings)
            # A declared requirement whose name says it provides the module wins over the
            # table's guess (`honcho-ai` declared, `import honcho`).
            if name is None or any(name_provides(d, site.top) for d in declared):
                continue
            if name not in declared and name not in found:
                found[name] = InferredRequirement(name, site.top, site.line)
        return list(found.values())

    def optional_requirements(self, mappings: Mapping[str, str] | None = None) -> list[InferredRequirement]:
        """The distributions of imports guarded by `try`/`except ImportError` that nothing
        else asks for: the toolkit loads without them, so they are offered to admins as
        optional packages (never under `if TYPE_CHECKING:`, which never runs)."""
        asked = {requirement.name for requirement in self.requirements}
        asked |= {requirement.name for requirement in self.infer_requirements(mappings)}
        found: dict[str, InferredRequirement] = {}
        for site in self.import_sites:
            if not (site.optional and site.runs) or not needs_distribution(site.top, kind=self.kind):
                continue
            name = distribution_for(site.module, mappings)
            if name is None or name in asked or name in found or any(name_provides(d, site.top) for d in asked):
                continue
            found[name] = InferredRequirement(name, site.top, site.line)
        return list(found.values())


@dataclass(frozen=True)
class _Found:
    kind: str
    cls: ast.ClassDef
    tool_names: list[str]
    plugin_version: str | None = None
    plugin_description: str = ""


class _Report:
    """Collects errors and turns `ast` positions into the columns people count."""

    def __init__(self, source: str) -> None:
        self.lines = source.split("\n")
        self.errors: list[SourceError] = []

    def add(self, code: str, message: str, node: ast.stmt | None = None) -> None:
        line = column = None
        if node is not None:
            # `ast` counts columns in UTF-8 bytes; an editor counts characters.
            line, prefix = node.lineno, self.lines[node.lineno - 1].encode()
            column = len(prefix[: node.col_offset].decode("utf-8", "ignore")) + 1
        self.errors.append(SourceError(message, line, column, code=code))


# -- Decoding and parsing -----------------------------------------------------------------


def parse_toolkit_source(data: bytes | str, *, filename: str | None = None) -> ParsedToolkit:
    """Check a toolkit without running it; raise `ToolkitSourceInvalid` listing problems.

    The returned `source` is the decoded text without a leading byte order mark and with
    each `\\r\\n` or lone `\\r` turned into `\\n`. Python reads files the same way, so the
    code means the same, and a file uploaded from disk and the same text pasted in a
    browser (which submits `\\r\\n`) get the same `sha256`.
    """
    source = _decode(data)
    report = _Report(source)

    manifest: dict[str, str] = {}
    manifest_lines: dict[str, int] = {}
    requirements_entry = None
    for entry in frontmatter_entries(source):
        key = _KEY_ALIASES.get(entry.key, entry.key)
        manifest[key] = entry.value
        manifest_lines[key] = entry.line
        if key == "requirements":
            # The last `requirements:` line wins, as every duplicate key does.
            requirements_entry = entry
    requirements = []
    if requirements_entry:
        requirements = parse_requirements(requirements_entry, report.errors)

    # The class checks need a syntax tree; frontmatter errors are listed either way.
    tree = _parse_python(source, filename, report)
    found = _find_toolkit_class(tree, report) if tree else None
    if report.errors or tree is None or found is None:
        raise ToolkitSourceInvalid(report.errors)

    cls = found.cls
    # One walk serves every list: walking a 512 KiB file's tree takes most of a second.
    nodes = list(ast.walk(tree))
    imports, hosts = imported_names(nodes), _hosts(nodes)
    _check_counts(cls, found, nodes, imports, hosts, report)
    if report.errors:
        raise ToolkitSourceInvalid(report.errors)
    stem = _filename_stem(filename)
    title = manifest.get("title") or stem or cls.name
    # A `$t:` title is a translation key, a poor slug; the file or class name is better.
    slug_source = (stem or cls.name) if title.startswith("$t:") else title
    nested = {node.name for node in cls.body if isinstance(node, ast.ClassDef)}
    return ParsedToolkit(
        kind=found.kind,
        source=source,
        sha256=hashlib.sha256(source.encode("utf-8")).hexdigest(),
        manifest=manifest,
        title=title,
        description=manifest.get("description") or found.plugin_description,
        author=manifest.get("author", ""),
        version=manifest.get("version") or found.plugin_version or "",
        requirements=requirements,
        tool_names=found.tool_names,
        has_valves="Valves" in nested,
        has_user_valves="UserValves" in nested,
        class_name=cls.name,
        plugin_version=found.plugin_version,
        imports=imports,
        hosts=hosts,
        suggested_slug=slugify(slug_source),
        manifest_lines=manifest_lines,
        import_sites=import_sites(tree),
    )


def _check_counts(
    cls: ast.ClassDef, found: _Found, nodes: list[ast.AST], imports: list[str], hosts: list[str], report: _Report
) -> None:
    """Tools, their names, imported modules and hosts are stored and listed: each is bounded."""
    methods = {node.name: node for node in cls.body if isinstance(node, _Function)}
    if len(found.tool_names) > MAX_TOOLS:
        name = found.tool_names[MAX_TOOLS]
        message = ngettext(
            "`%(name)s` has %(count)s tool; a toolkit may have at most %(limit)s.",
            "`%(name)s` has %(count)s tools; a toolkit may have at most %(limit)s.",
            len(found.tool_names),
        ) % {
            "name": cls.name, "count": len(found.tool_names), "limit": MAX_TOOLS
        }
        report.add("too_many_tools", message, methods.get(name, cls))
    for name in found.tool_names:
        if len(name) > MAX_NAME_CHARS:
            where = methods.get(name, cls)
            message = ngettext(
                "The tool name on line %(line)s is %(count)s character long; at most %(limit)s.",
                "The tool name on line %(line)s is %(count)s characters long; at most %(limit)s.",
                len(name),
            ) % {
                "line": where.lineno, "count": len(name), "limit": MAX_NAME_CHARS
            }
            report.add("tool_name_too_long", message, where)
    if len(imports) > MAX_IMPORTS:
        extra = imports[MAX_IMPORTS]
        node = _first_import_of(nodes, extra)
        message = ngettext(
            "The file imports %(count)s different module; a toolkit may import at most %(limit)s.",
            "The file imports %(count)s different modules; a toolkit may import at most %(limit)s.",
            len(imports),
        ) % {
            "count": len(imports), "limit": MAX_IMPORTS
        }
        report.add("too_many_imports", message, node)
    if len(hosts) > MAX_HOSTS:
        message = ngettext(
            "The file names %(count)s different host in URLs; a toolkit may name at most %(limit)s.",
            "The file names %(count)s different hosts in URLs; a toolkit may name at most %(limit)s.",
            len(hosts),
        ) % {
            "count": len(hosts), "limit": MAX_HOSTS
        }
        report.add("too_many_hosts", message)


def _first_import_of(nodes: list[ast.AST], module: str) -> ast.stmt | None:
    for node in nodes:
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == module for a in node.names):
            return node
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == module:
            return node
    return None


def _refuse(code: str, message: str, line: int | None = None, column: int | None = None) -> ToolkitSourceInvalid:
    return ToolkitSourceInvalid([SourceError(message, line, column, code=code)])


def _line_column(text: str, index: int) -> tuple[int, int]:
    """1-based line and column of a character index in text whose lines end with `\\n`."""
    return text.count("\n", 0, index) + 1, index - text.rfind("\n", 0, index)


def _decode(data: bytes | str) -> str:
    if isinstance(data, str):
        # Lone surrogates cannot come from a real file; `surrogatepass` lets the UTF-8
        # check below report them like any other bad byte instead of crashing here.
        data = data.encode("utf-8", "surrogatepass")
    size = len(data)
    if size > MAX_SOURCE_BYTES:
        message = _("The file is %(size)s bytes (%(kib)s KiB); the limit is 512 KiB (%(limit)s bytes).") % {
            "size": f"{size:,}", "kib": f"{size / 1024:.1f}", "limit": f"{MAX_SOURCE_BYTES:,}"
        }
        raise _refuse("too_large", message)
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = _normalise(data[: exc.start].decode("utf-8").removeprefix("\ufeff"))
        line, column = _line_column(before, len(before))
        bad = data[exc.start]
        message = _(
            "The file is not valid UTF-8: byte %(byte)s at byte offset %(offset)s (line %(line)s, column %(column)s)"
            " cannot be decoded. Save the file as UTF-8 and upload it again."
        ) % {"byte": f"{bad:#04x}", "offset": exc.start, "line": line, "column": column}
        raise _refuse("not_utf8", message, line, column) from None
    source = _normalise(source.removeprefix("\ufeff"))
    if "\x00" in source:
        line, column = _line_column(source, source.index("\x00"))
        message = _("The file contains a NUL byte at line %(line)s, column %(column)s; Python source cannot.") % {
            "line": line, "column": column
        }
        raise _refuse("nul_byte", message, line, column)
    return source


def _normalise(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _parse_python(source: str, filename: str | None, report: _Report) -> ast.Module | None:
    try:
        # Parsing may warn, e.g. about invalid escape sequences. Those are the author's
        # business: they must not fill the server log or become errors under `-W error`.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(source, filename=filename or "<toolkit>")
    except SyntaxError as exc:
        line, column = exc.lineno, exc.offset
        # Python's own description of the error stays as Python wrote it.
        if line and column:
            message = _("Syntax error at line %(line)s, column %(column)s: %(problem)s.") % {
                "line": line, "column": column, "problem": exc.msg
            }
        else:
            message = _("Syntax error: %(problem)s.") % {"problem": exc.msg}
        report.errors.append(SourceError(message, line, column, code="syntax"))
    except (MemoryError, RecursionError):
        # CPython's parser gives up on very deeply nested code with one of these.
        report.add("syntax", _("The code is nested too deeply to parse."))
    return None


# -- The toolkit class --------------------------------------------------------------------


def _is_plugin_base(base: ast.expr) -> bool:
    name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
    return name == "LLMToolPlugin"


def _find_toolkit_class(tree: ast.Module, report: _Report) -> _Found | None:
    """Find `class Tools` (Open WebUI) or an `LLMToolPlugin` subclass (RAGFlow)."""
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    tools = [node for node in classes if node.name == "Tools"]
    if tools:
        # As in Python, the last definition of the name is the one that counts.
        cls = tools[-1]
        names = _public_methods(cls)
        if not names:
            message = _(
                "`class Tools` on line %(line)s has no public methods, so the toolkit offers no tools. Each method"
                " whose name does not start with `_` is a tool."
            ) % {"line": cls.lineno}
            report.add("no_tools", message, cls)
        return _Found("openwebui", cls, names)
    plugins = [node for node in classes if any(map(_is_plugin_base, node.bases))]
    if len(plugins) > 1:
        second = plugins[1]
        message = _(
            "`class %(name)s` on line %(line)s is a second LLMToolPlugin subclass; a toolkit has one (`%(first)s`)."
        ) % {"name": second.name, "line": second.lineno, "first": plugins[0].name}
        report.add("several_plugins", message, second)
    if plugins:
        return _check_plugin(plugins[0], report)
    strategies = [node for node in classes if any(map(_is_strategy_base, node.bases))]
    if len(strategies) > 1:
        second = strategies[1]
        message = _(
            "`class %(name)s` on line %(line)s is a second AgentStrategy subclass; a strategy file has one"
            " (`%(first)s`)."
        ) % {"name": second.name, "line": second.lineno, "first": strategies[0].name}
        report.add("several_strategies", message, second)
    if strategies:
        return _check_strategy(strategies[0], report)
    _missing_tools(tree, report)
    return None


def _is_strategy_base(base: ast.expr) -> bool:
    name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
    return name == "AgentStrategy"


def _check_strategy(cls: ast.ClassDef, report: _Report) -> _Found:
    """An agent strategy (after Dify's): `_invoke(self, parameters)` must be a plain generator
    method, since the runtime iterates what it yields; it offers no tools of its own."""
    where = {"name": cls.name, "class_line": cls.lineno}
    invoke = next((node for node in cls.body if isinstance(node, _Function) and node.name == "_invoke"), None)
    if invoke is None:
        message = _(
            "Agent strategy `%(name)s` (line %(class_line)s) has no `_invoke(self, parameters)` method; it is what"
            " runs, yielding log nodes and text."
        )
        report.add("strategy_invoke", message % where, cls)
        return _strategy_found(cls)
    where["line"] = invoke.lineno
    if isinstance(invoke, ast.AsyncFunctionDef):
        message = _(
            "`_invoke` of agent strategy `%(name)s` (line %(class_line)s) on line %(line)s must be a plain `def`,"
            " not `async def`."
        )
    elif not any(isinstance(node, ast.Yield | ast.YieldFrom) for node in ast.walk(invoke)):
        message = _(
            "`_invoke` of agent strategy `%(name)s` (line %(class_line)s) on line %(line)s never yields: it must"
            " yield its log nodes and text messages (`yield self.create_text_message(answer)`)."
        )
    elif len(invoke.args.args) != 2:
        message = _(
            "`_invoke` of agent strategy `%(name)s` (line %(class_line)s) on line %(line)s takes"
            " `(self, parameters)`."
        )
    else:
        return _strategy_found(cls)
    report.add("strategy_invoke", message % where, invoke)
    return _strategy_found(cls)


def _strategy_found(cls: ast.ClassDef) -> _Found:
    description = ast.get_docstring(cls) or ""
    return _Found("agent_strategy", cls, [], None, description.split("\n\n")[0].strip())


def _missing_tools(tree: ast.Module, report: _Report) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Tools":
            message = _("`class Tools` on line %(line)s is inside another block; it must be at the top level.") % {
                "line": node.lineno
            }
            report.add("no_tools_class", message, node)
            return
    for node in tree.body:
        bound: list[str] = []
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound = [target.id for target in targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound = [alias.asname or alias.name for alias in node.names]
        if "Tools" in bound:
            message = _(
                "`Tools` on line %(line)s is not made by a class statement. ToolHub reads toolkits without running"
                " them, so it needs `class Tools:` at module level."
            ) % {"line": node.lineno}
            report.add("no_tools_class", message, node)
            return
    message = _(
        "No `class Tools` at module level, and no class deriving from `LLMToolPlugin` or `AgentStrategy`. An Open"
        " WebUI toolkit defines `class Tools:`, whose public methods are its tools."
    )
    report.add("no_tools_class", message)


def _decorator_names(function: _Function) -> set[str]:
    return {
        node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "") for node in function.decorator_list
    }


def _public_methods(cls: ast.ClassDef) -> list[str]:
    """Public method names where each first appears in the class body (as in its dict).

    Properties are left out: Open WebUI would find their value, not a callable.
    """
    names: list[str] = []
    for node in cls.body:
        if (
            isinstance(node, _Function)
            and not node.name.startswith("_")
            and not _decorator_names(node) & _PROPERTIES
            and node.name not in names
        ):
            names.append(node.name)
    return names


def _check_plugin(cls: ast.ClassDef, report: _Report) -> _Found:
    version = None
    methods: dict[str, _Function] = {}
    for node in cls.body:
        if isinstance(node, _Function):
            methods[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "_version_" for t in targets):
                version = node
    where = {"name": cls.name, "class_line": cls.lineno}
    plugin_version = literal_string(version.value) if version else None
    if version is None:
        message = _(
            'RAGFlow plugin `%(name)s` (line %(class_line)s) has no `_version_`; RAGFlow requires one, such as'
            ' `_version_ = "1.0.0"`.'
        )
        report.add("plugin_version", message % where, cls)
    elif plugin_version is None:
        message = _(
            '`_version_` of RAGFlow plugin `%(name)s` (line %(class_line)s) on line %(line)s must be a string'
            ' literal, such as `_version_ = "1.0.0"`.'
        )
        report.add("plugin_version", message % {**where, "line": version.lineno}, version)
    metadata = methods.get("get_metadata")
    if metadata is None:
        message = _("RAGFlow plugin `%(name)s` (line %(class_line)s) has no `get_metadata` classmethod.")
        report.add("plugin_metadata", message % where, cls)
    elif not _decorator_names(metadata) & {"classmethod", "staticmethod"}:
        message = _(
            "`get_metadata` of RAGFlow plugin `%(name)s` (line %(class_line)s) on line %(line)s must be a"
            " `@classmethod`: RAGFlow calls it on the class."
        )
        report.add("plugin_metadata", message % {**where, "line": metadata.lineno}, metadata)
    if "invoke" not in methods:
        message = _("RAGFlow plugin `%(name)s` (line %(class_line)s) has no `invoke` method.")
        report.add("plugin_invoke", message % where, cls)
    literals = _metadata_literals(metadata) if metadata else {}
    name = literals.get("name") or _snake_case(cls.name)
    description = literals.get("description", "")
    return _Found("ragflow", cls, [name], plugin_version, description)


def _metadata_literals(function: _Function) -> dict[str, str]:
    """String literals in the dict display that `get_metadata` returns, if it has one."""
    for node in ast.walk(function):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
            pairs = zip(node.value.keys, node.value.values, strict=True)
            literals = {literal_string(key): literal_string(value) for key, value in pairs}
            return {k: v for k, v in literals.items() if k and v is not None}
    return {}


def _snake_case(name: str) -> str:
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


# -- Facts for later review ---------------------------------------------------------------


def _hosts(nodes: list[ast.AST]) -> list[str]:
    """Hosts of http(s) URLs in string literals, except docstrings (documentation)."""
    docstrings = set()
    for node in nodes:
        if isinstance(node, ast.Module | ast.ClassDef | _Function) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    hosts = set()
    for node in nodes:
        if not isinstance(node, ast.Constant) or id(node) in docstrings:
            continue
        if not isinstance(node.value, str):
            continue
        for match in _URL_IN_TEXT.finditer(node.value):
            try:
                host = urlsplit(match.group(0)).hostname
            except ValueError:
                continue
            if host:
                hosts.add(host)
    return sorted(hosts)


# -- Names --------------------------------------------------------------------------------


def _filename_stem(filename: str | None) -> str:
    if not filename:
        return ""
    # Browsers send a bare name, but some old ones send a whole Windows path.
    name = filename.replace("\\", "/").rsplit("/", 1)[-1]
    return name.removesuffix(".py").strip()


def slugify(text: str) -> str:
    """A slug of `[a-z0-9_]`, at most 64 characters, never empty (then "toolkit")."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")
    return slug[:64].rstrip("_") or "toolkit"
