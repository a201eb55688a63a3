"""Static checks of an uploaded toolkit file.

The file is only read as text and through `ast`: nothing imports, compiles or runs the uploaded code,
because its author is treated as hostile. No Django imports, so views, the API, commands and tests can
share this module.

Frontmatter: `openwebui_frontmatter` re-implements Open WebUI's `extract_frontmatter` rule by rule
(first `splitlines` line stripped must be exactly three double quotes; later lines are read until one
*contains* them; `^\\s*([a-z_]+):\\s*(.*)\\s*$`, case-insensitive, key case kept, value stripped,
last duplicate wins). `parse_frontmatter` reads the docstring body with the same rules, so both agree
on every file Open WebUI accepts; before the opening line it also skips a BOM, a shebang, comments and
blank lines, and it accepts `'''` (then a line containing `'''` ends it). Not accepted, on
purpose: text on the opening line and string prefixes (`r\"\"\"`), because a prose docstring such as
`\"\"\"Note: slow.\"\"\"` would turn into metadata. `licence` becomes `license` in
`ParsedToolkit.manifest` only.

The messages of `SourceError` are in the active language (gettext; line numbers and names are
placeholders), so a page and the API answer in the reader's language.
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
from packaging.requirements import InvalidRequirement
from packaging.requirements import Requirement as _PackagingRequirement
from packaging.utils import canonicalize_name

from toolhub.packages.import_names import distribution_for, needs_distribution

MAX_SOURCE_BYTES = 512 * 1024
# Counts and lengths a toolkit may not exceed: each requirement becomes a package row and
# a line in the admins' queue, and every name is stored in a column of this length.
MAX_REQUIREMENTS = 100
MAX_IMPORTS = 300
MAX_HOSTS = 300
MAX_TOOLS = 200
MAX_NAME_CHARS = 200
MAX_SPECIFIER_CHARS = 200

_KEY_LINE = re.compile(r"^\s*([a-z_]+):\s*(.*)\s*$", re.IGNORECASE)
_OPENERS = ('"""', "'''")
_KEY_ALIASES = {"licence": "license"}
_URL_SCHEME = re.compile(r"^[a-z][a-z0-9+.\-]*://", re.IGNORECASE)
_PATH_START = re.compile(r"^(file:|[./\\]|~(?!=)|[a-z]:[\\/])", re.IGNORECASE)
_ARCHIVES = (".whl", ".zip", ".tar", ".gz", ".tgz", ".bz2", ".tbz", ".xz", ".txz")
_SPECIFIER_START = re.compile(r"^(===|==|!=|~=|<=|>=|<|>)")
_URL_IN_TEXT = re.compile(r"https?://[^\s'\"<>\\]+", re.IGNORECASE)
_PROPERTIES = {"property", "cached_property", "setter", "getter", "deleter"}
_Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class SourceError:
    """One problem with an uploaded file; `line` and `column` are 1-based."""

    message: str
    line: int | None = None
    column: int | None = None
    field: str = "source"
    # A stable name of the check (such as "too_large") for the API and for tests.
    code: str = ""


class ToolkitSourceInvalid(Exception):
    """Every problem found: those without a line first, then in line order."""

    def __init__(self, errors: list[SourceError]) -> None:
        self.errors = sorted(errors, key=lambda e: (e.line or 0, e.column or 0))
        super().__init__("; ".join(e.message for e in self.errors))


@dataclass(frozen=True)
class Requirement:
    name: str
    specifier: str
    text: str
    line: int | None = None


@dataclass(frozen=True)
class ImportSite:
    """One module an import statement names. `module` is the dotted name as written
    (`open_webui.models.users`); `optional` when the statement can fail without the
    toolkit failing: inside a `try` whose handlers catch `ImportError` (or a base of it),
    or under `if TYPE_CHECKING:`, which never runs."""

    module: str
    line: int
    optional: bool = False

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
            name = distribution_for(site.top, mappings)
            if name not in declared and name not in found:
                found[name] = InferredRequirement(name, site.top, site.line)
        return list(found.values())


@dataclass(frozen=True)
class _Entry:
    key: str
    value: str
    line: int
    column: int  # Where the value starts.


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


# -- Frontmatter --------------------------------------------------------------------------


def openwebui_frontmatter(source: str) -> dict[str, str]:
    """Open WebUI's frontmatter reading, rule for rule: the reference of parity tests."""
    lines = source.splitlines()
    if not lines or lines[0].strip() != '"""':
        return {}
    result: dict[str, str] = {}
    for line in lines[1:]:
        if '"""' in line:
            break
        match = _KEY_LINE.match(line)
        if match:
            result[match.group(1).strip()] = match.group(2).strip()
    return result


def parse_frontmatter(source: str) -> dict[str, str]:
    """Open WebUI's rules, plus `'''` and a BOM, shebang or comments before the docstring."""
    return {entry.key: entry.value for entry in _frontmatter_entries(source)}


def _pieces(source: str) -> list[tuple[str, int, int, bool]]:
    """Cut lines as `str.splitlines` does (like Open WebUI), keeping Python's real lines.

    `splitlines` also cuts at form feeds, `\\x1c`-`\\x1e`, NEL and U+2028/9, which end no
    line for Python or an editor. Each piece carries its real line, the column where it
    starts and whether it ends a real line, so errors point at the line a person sees.
    """
    pieces = []
    line, column = 1, 0
    for raw in source.splitlines(keepends=True):
        ends_line = raw.endswith(("\n", "\r"))
        pieces.append((raw.splitlines()[0], line, column, ends_line))
        line, column = (line + 1, 0) if ends_line else (line, column + len(raw))
    return pieces


def _frontmatter_entries(source: str) -> list[_Entry]:
    pieces = _pieces(source)
    start, in_comment = None, False
    for index, (text, _line, _column, ends_line) in enumerate(pieces):
        stripped = (text.removeprefix("\ufeff") if index == 0 else text).strip()
        if in_comment or stripped.startswith("#"):
            # A comment runs to the real end of its line, even past a form feed.
            in_comment = not ends_line
            continue
        if stripped:
            start = index if stripped in _OPENERS else None
            break
    if start is None:
        return []
    closer = pieces[start][0].strip()
    entries = []
    for text, line, column, _ends_line in pieces[start + 1 :]:
        if closer in text:
            break
        match = _KEY_LINE.match(text)
        if match:
            key, value = match.group(1).strip(), match.group(2).strip()
            entries.append(_Entry(key, value, line, column + match.start(2) + 1))
    return entries


# -- Requirements -------------------------------------------------------------------------


def _parse_requirements(entry: _Entry, errors: list[SourceError]) -> list[Requirement]:
    requirements = []
    offset = 0
    for raw in entry.value.split(","):
        token = raw.strip()
        column = entry.column + offset + len(raw) - len(raw.lstrip())
        offset += len(raw) + 1
        if not token:
            # An empty token (from `a, b,` or an empty `requirements:`) asks for
            # nothing, so it is skipped rather than refused.
            continue
        problem, code = _requirement_problem(token)
        if problem:
            message = problem % {"token": token, "line": entry.line}
            errors.append(SourceError(message, entry.line, column, code=code))
            continue
        parsed = _PackagingRequirement(token)
        name, specifier = canonicalize_name(parsed.name), str(parsed.specifier)
        if len(name) > MAX_NAME_CHARS or len(specifier) > MAX_SPECIFIER_CHARS:
            shown = token if len(token) <= 60 else token[:57] + "..."
            if len(name) > MAX_NAME_CHARS:
                too_long = _("`%(token)s` in `requirements:` on line %(line)s has a name longer than %(limit)s characters.")
            else:
                too_long = _(
                    "`%(token)s` in `requirements:` on line %(line)s has a version specifier longer than %(limit)s"
                    " characters."
                )
            limit = MAX_NAME_CHARS if len(name) > MAX_NAME_CHARS else MAX_SPECIFIER_CHARS
            message = too_long % {"token": shown, "line": entry.line, "limit": limit}
            errors.append(SourceError(message, entry.line, column, code="requirement_too_long"))
            continue
        requirements.append(Requirement(name, specifier, str(parsed), entry.line))
    distinct = {r.name for r in requirements}
    if len(distinct) > MAX_REQUIREMENTS:
        message = ngettext(
            "`requirements:` on line %(line)s lists %(count)s package; a toolkit may ask for at most %(limit)s.",
            "`requirements:` on line %(line)s lists %(count)s packages; a toolkit may ask for at most %(limit)s.",
            len(distinct),
        ) % {"line": entry.line, "count": len(distinct), "limit": MAX_REQUIREMENTS}
        errors.append(SourceError(message, entry.line, entry.column, code="too_many_requirements"))
    return requirements


def _requirement_problem(token: str) -> tuple[str, str]:
    """Why a requirements token is refused (a message with `%(token)s` and `%(line)s` left to
    fill) and the error code, or two empty strings."""
    if token.startswith("-"):
        option = _(
            "`%(token)s` in `requirements:` on line %(line)s is a pip option, not a requirement. Indexes and other"
            " pip options are settings of ToolHub, never of a toolkit."
        )
        return option, "requirement_option"
    path = _(
        "`%(token)s` in `requirements:` on line %(line)s is a file path. List packages by name and version,"
        " such as `requests>=2`."
    )
    url = _(
        "`%(token)s` in `requirements:` on line %(line)s is a URL. List packages by name and version,"
        " such as `requests>=2`."
    )
    if _PATH_START.match(token):
        return path, "requirement_path"
    if _URL_SCHEME.match(token) or "://" in token:
        return url, "requirement_url"
    if token.lower().endswith(_ARCHIVES):
        return path, "requirement_path"
    try:
        parsed = _PackagingRequirement(token)
    except InvalidRequirement as exc:
        if "/" in token or "\\" in token:
            return path, "requirement_path"
        # packaging's own explanation stays as it wrote it; %-signs in it are kept literal.
        reason = str(exc).splitlines()[0].rstrip(".").replace("%", "%%")
        if _SPECIFIER_START.match(token):
            why = _(
                "`%(token)s` in `requirements:` on line %(line)s is not a valid requirement: %(reason)s."
                " Requirements are separated by commas, so a range like `>=4,<5` is cut in two; write it as one"
                " clause, such as `~=4.0`."
            )
        else:
            why = _("`%(token)s` in `requirements:` on line %(line)s is not a valid requirement: %(reason)s.")
        return why.replace("%(reason)s", reason), "requirement_invalid"
    if parsed.url:
        pointed = _(
            "`%(token)s` in `requirements:` on line %(line)s points at a URL (`%(url)s`). List packages by name"
            " and version, such as `requests>=2`."
        )
        return pointed.replace("%(url)s", parsed.url.replace("%", "%%")), "requirement_url"
    return "", ""


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
    for entry in _frontmatter_entries(source):
        key = _KEY_ALIASES.get(entry.key, entry.key)
        manifest[key] = entry.value
        manifest_lines[key] = entry.line
        if key == "requirements":
            # The last `requirements:` line wins, as every duplicate key does.
            requirements_entry = entry
    requirements = []
    if requirements_entry:
        requirements = _parse_requirements(requirements_entry, report.errors)

    # The class checks need a syntax tree; frontmatter errors are listed either way.
    tree = _parse_python(source, filename, report)
    found = _find_toolkit_class(tree, report) if tree else None
    if report.errors or tree is None or found is None:
        raise ToolkitSourceInvalid(report.errors)

    cls = found.cls
    # One walk serves every list: walking a 512 KiB file's tree takes most of a second.
    nodes = list(ast.walk(tree))
    imports, hosts = _imports(nodes), _hosts(nodes)
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
        import_sites=_import_sites(tree),
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
    plugin_version = _literal(version.value) if version else None
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
            literals = {_literal(key): _literal(value) for key, value in pairs}
            return {k: v for k, v in literals.items() if k and v is not None}
    return {}


def _literal(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _snake_case(name: str) -> str:
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


# -- Facts for later review ---------------------------------------------------------------


def _imports(nodes: list[ast.AST]) -> list[str]:
    """Top-level module names imported anywhere, also dynamically by a literal name."""
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and node.args:
            func, name = node.func, _literal(node.args[0])
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


def _import_sites(tree: ast.Module) -> list[ImportSite]:
    """Every module imported, with its line and whether the import is optional.

    Walked with an explicit stack (like `ast.walk`), so deeply nested code that parsed
    cannot exhaust the recursion limit here.
    """
    sites: list[ImportSite] = []
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, optional = stack.pop()
        if isinstance(node, ast.Import):
            sites.extend(ImportSite(alias.name, node.lineno, optional) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            sites.append(ImportSite(node.module, node.lineno, optional))
        elif isinstance(node, ast.Call) and node.args:
            func, name = node.func, _literal(node.args[0])
            dynamic = (isinstance(func, ast.Name) and func.id == "__import__") or (
                isinstance(func, ast.Attribute) and func.attr == "import_module"
            )
            if dynamic and name and not name.startswith("."):
                sites.append(ImportSite(name, node.lineno, optional))
        if isinstance(node, ast.Try | ast.TryStar):
            guarded = optional or _catches_import_error(node.handlers)
            stack.extend((child, guarded) for child in node.body)
            rest = [*node.handlers, *node.orelse, *node.finalbody]
            stack.extend((child, optional) for child in rest)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend((child, True) for child in node.body)
            stack.extend((child, optional) for child in node.orelse)
        else:
            stack.extend((child, optional) for child in ast.iter_child_nodes(node))
    return sorted(sites, key=lambda site: (site.line, site.module))


def import_sites_in(source: str) -> list[ImportSite]:
    """The import sites of source that passed the checks before (stored revisions)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, MemoryError, RecursionError, ValueError):
        return []
    return _import_sites(tree)


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
