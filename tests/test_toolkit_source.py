"""Tests of the static toolkit checks in toolhub.toolkits.source_checks (no Django, no DB)."""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import pytest

from toolhub.toolkits.source_checks import (
    MAX_SOURCE_BYTES,
    ParsedToolkit,
    SourceError,
    ToolkitSourceInvalid,
    openwebui_frontmatter,
    parse_frontmatter,
    parse_toolkit_source,
    slugify,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "toolhub" / "toolkits" / "demo"

TOOLS = "class Tools:\n    def echo(self, text: str) -> str:\n        return text\n"


def _toolkit(frontmatter: str, body: str = TOOLS) -> str:
    return f'"""\n{frontmatter}\n"""\n\n{body}'


def _errors(data: bytes | str, **kwargs: str) -> list[SourceError]:
    with pytest.raises(ToolkitSourceInvalid) as info:
        parse_toolkit_source(data, **kwargs)
    return info.value.errors


def _only_error(data: bytes | str, **kwargs: str) -> SourceError:
    errors = _errors(data, **kwargs)
    assert len(errors) == 1, errors
    return errors[0]


def _example(name: str) -> ParsedToolkit:
    path = EXAMPLES / name
    return parse_toolkit_source(path.read_bytes(), filename=path.name)


# -- The shared examples ------------------------------------------------------------------


def test_it_parses_bad_calculator_as_a_ragflow_plugin() -> None:
    parsed = _example("bad_calculator.py")
    assert parsed.kind == "ragflow"
    assert parsed.class_name == "BadCalculatorPlugin"
    assert parsed.plugin_version == "1.0.0"
    assert parsed.version == "1.0.0"
    assert parsed.tool_names == ["bad_calculator"]
    assert parsed.manifest == {}
    assert parsed.title == "bad_calculator"
    assert parsed.suggested_slug == "bad_calculator"
    assert parsed.description.startswith("A tool to calculate the sum")
    assert parsed.imports == ["agent", "logging"]


def test_it_reads_licence_of_string_reverse_as_license() -> None:
    parsed = _example("string_reverse.py")
    assert parsed.kind == "openwebui"
    assert parsed.manifest["license"] == "MIT"
    assert "licence" not in parsed.manifest
    assert parsed.manifest["required_open_webui_version"] == "0.4.0"
    assert parsed.manifest["author_url"] == "https://website.com"
    assert parsed.title == "String Inverse"
    assert parsed.suggested_slug == "string_inverse"
    assert parsed.tool_names == ["reverse_string"]
    assert (parsed.has_valves, parsed.has_user_valves) == (True, False)
    assert parsed.manifest_lines["license"] == 9


def test_it_reads_the_requirement_of_friendly_sizes() -> None:
    parsed = _example("friendly_sizes.py")
    [requirement] = parsed.requirements
    assert (requirement.name, requirement.specifier) == ("humanize", ">=4")
    assert requirement.text == "humanize>=4"
    assert requirement.line == 6
    assert parsed.version == "0.1.0"
    assert parsed.author == "ToolHub examples"
    assert parsed.tool_names == ["natural_size"]


def test_it_finds_both_tools_and_both_valves_of_library_lookup() -> None:
    parsed = _example("library_lookup.py")
    assert parsed.tool_names == ["lookup", "count_words"]
    assert (parsed.has_valves, parsed.has_user_valves) == (True, True)
    assert parsed.manifest["license"] == "MIT"
    assert parsed.hosts == ["example.org"]
    assert parsed.imports == ["asyncio", "datetime", "pydantic", "typing"]


def test_it_gives_the_same_frontmatter_as_open_webui_for_every_example() -> None:
    for path in sorted(EXAMPLES.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        assert parse_frontmatter(source) == openwebui_frontmatter(source), path.name


# -- Size, encoding, syntax ---------------------------------------------------------------


def test_it_refuses_a_600_kib_file_naming_the_limit_and_the_size() -> None:
    data = _toolkit("title: Big").encode() + b"# padding\n" * (600 * 1024 // 10)
    data = data[: 600 * 1024]
    error = _only_error(data)
    assert error.code == "too_large"
    assert "512 KiB" in error.message
    assert "614,400 bytes" in error.message
    assert error.line is None


def test_it_accepts_a_file_of_exactly_512_kib() -> None:
    head = _toolkit("title: Edge").encode()
    data = head + b"#" * (MAX_SOURCE_BYTES - len(head))
    assert len(data) == MAX_SOURCE_BYTES
    assert parse_toolkit_source(data).title == "Edge"


def test_it_counts_the_size_of_pasted_text_in_utf8_bytes() -> None:
    # 300,000 two-byte characters are 600,000 bytes, over the limit.
    source = _toolkit("title: Big") + "# " + "é" * 300_000 + "\n"
    assert _only_error(source).code == "too_large"


def test_it_refuses_latin1_bytes_with_the_offset_and_line() -> None:
    data = _toolkit("title: Café").encode("latin-1")
    error = _only_error(data)
    assert error.code == "not_utf8"
    assert (error.line, error.column) == (2, 11)
    assert "byte 0xe9 at byte offset 14" in error.message
    assert "line 2, column 11" in error.message


def test_it_refuses_a_lone_surrogate_in_pasted_text() -> None:
    error = _only_error(_toolkit("title: x\ud800"))
    assert error.code == "not_utf8"
    assert error.line == 2


def test_it_refuses_a_nul_byte_with_its_line() -> None:
    error = _only_error(_toolkit("title: x") + "x = 1\nx = 'a\x00'\n")
    assert error.code == "nul_byte"
    assert (error.line, error.column) == (9, 7)
    assert "NUL" in error.message


def test_it_reports_a_syntax_error_with_line_and_column() -> None:
    source = _toolkit("title: Broken", TOOLS + "    def bad(self):\n        return (1 +\n")
    error = _only_error(source)
    assert error.code == "syntax"
    assert (error.line, error.column) == (9, 16)
    assert "line 9, column 16" in error.message
    assert "'(' was never closed" in error.message


def test_it_counts_syntax_error_columns_in_characters() -> None:
    error = _only_error('s = "éé"; x = $\n')
    assert (error.line, error.column) == (1, 15)


def test_it_lists_requirement_errors_next_to_a_syntax_error() -> None:
    errors = _errors(_toolkit("requirements: -e .", "class Tools(:\n"))
    assert [e.code for e in errors] == ["requirement_option", "syntax"]


def test_it_refuses_code_nested_too_deeply_to_parse() -> None:
    error = _only_error("x = " + "-" * 200_000 + "1\n")
    assert error.code == "syntax"


def test_it_ignores_warnings_while_parsing() -> None:
    source = _toolkit("title: Escapes", TOOLS + '    pattern = "\\d+"\n')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert parse_toolkit_source(source).title == "Escapes"


def test_it_normalises_line_endings_and_a_bom_before_hashing() -> None:
    unix = _toolkit("title: Ends")
    windows = parse_toolkit_source(("\ufeff" + unix.replace("\n", "\r\n")).encode())
    parsed = parse_toolkit_source(unix)
    assert windows.source == unix
    assert windows.sha256 == parsed.sha256
    assert parsed.sha256 == hashlib.sha256(unix.encode()).hexdigest()
    assert windows.title == "Ends"


def test_it_reads_bytes_and_text_alike() -> None:
    source = _toolkit("title: Same")
    assert parse_toolkit_source(source) == parse_toolkit_source(source.encode())


# -- Requirements -------------------------------------------------------------------------


def test_it_refuses_an_index_option_naming_the_token_and_line() -> None:
    source = _toolkit("title: T\nrequirements: --extra-index-url http://x, requests")
    error = _only_error(source)
    assert error.code == "requirement_option"
    assert "`--extra-index-url http://x`" in error.message
    assert "line 3" in error.message
    assert (error.line, error.column) == (3, 15)


@pytest.mark.parametrize("token", ["-e .", "-r other.txt", "--index-url=http://x"])
def test_it_refuses_other_pip_options(token: str) -> None:
    error = _only_error(_toolkit(f"requirements: {token}"))
    assert error.code == "requirement_option"
    assert f"`{token}`" in error.message


@pytest.mark.parametrize(
    "token",
    [
        "pkg @ https://example.com/pkg-1.0.whl",
        "https://example.com/pkg-1.0.tar.gz",
        "git+https://github.com/x/y.git",
        "pkg@git+ssh://git@github.com/x/y.git",
    ],
)
def test_it_refuses_url_requirements(token: str) -> None:
    error = _only_error(_toolkit(f"requirements: requests, {token}"))
    assert error.code == "requirement_url"
    assert f"`{token}`" in error.message
    assert error.line == 2


@pytest.mark.parametrize(
    "token",
    ["./x", "../x", "/tmp/x", "~/x", "file:///tmp/x", "x/y", "C:/x", "pkg-1.0.whl"],
)
def test_it_refuses_path_requirements(token: str) -> None:
    error = _only_error(_toolkit(f"requirements: {token}"))
    assert error.code == "requirement_path"
    assert f"`{token}`" in error.message


def test_it_refuses_an_invalid_requirement_with_packagings_reason() -> None:
    error = _only_error(_toolkit("requirements: requests!!2"))
    assert error.code == "requirement_invalid"
    assert error.message.startswith("`requests!!2` in `requirements:` on line 2")


def test_it_explains_that_a_comma_splits_a_version_range() -> None:
    errors = _errors(_toolkit("requirements: humanize>=4,<5"))
    assert [e.code for e in errors] == ["requirement_invalid"]
    assert "`<5`" in errors[0].message
    assert "separated by commas" in errors[0].message
    assert errors[0].column == 27


def test_it_does_not_call_a_compatible_release_clause_a_path() -> None:
    error = _only_error(_toolkit("requirements: humanize>=4,~=4.1"))
    assert error.code == "requirement_invalid"
    assert "`~=4.1`" in error.message


def test_it_reports_every_bad_requirement() -> None:
    errors = _errors(_toolkit("requirements: -e ., ./x, https://x, ok, bad!!"))
    assert [e.code for e in errors] == [
        "requirement_option",
        "requirement_path",
        "requirement_url",
        "requirement_invalid",
    ]
    assert [e.column for e in errors] == [15, 21, 26, 41]


def test_it_accepts_markers_extras_and_normalises_names() -> None:
    value = 'requests[socks]>=2.31; python_version >= "3.8", Typing_Extensions, ,'
    parsed = parse_toolkit_source(_toolkit(f"requirements: {value}"))
    first, second = parsed.requirements
    assert (first.name, first.specifier) == ("requests", ">=2.31")
    assert first.text == 'requests[socks]>=2.31; python_version >= "3.8"'
    assert (second.name, second.specifier, second.text) == (
        "typing-extensions",
        "",
        "Typing_Extensions",
    )


def test_it_uses_the_last_requirements_line() -> None:
    source = _toolkit("requirements: -e .\nrequirements: humanize")
    parsed = parse_toolkit_source(source)
    assert [r.name for r in parsed.requirements] == ["humanize"]
    assert parsed.requirements[0].line == 3


def test_it_accepts_an_empty_requirements_line() -> None:
    assert parse_toolkit_source(_toolkit("requirements:")).requirements == []


# -- The toolkit class --------------------------------------------------------------------


def test_it_refuses_a_file_without_tools() -> None:
    error = _only_error(_toolkit("title: Nothing", "def helper():\n    pass\n"))
    assert error.code == "no_tools_class"
    assert "No `class Tools` at module level" in error.message
    assert error.line is None


def test_it_points_at_a_tools_class_that_is_not_at_module_level() -> None:
    body = "if True:\n    class Tools:\n        def a(self): pass\n"
    error = _only_error(_toolkit("title: Nested", body))
    assert error.code == "no_tools_class"
    assert (error.line, error.column) == (6, 5)
    assert "inside another block" in error.message


@pytest.mark.parametrize("body", ["from x import Tools\n", "Tools = dict\n"])
def test_it_points_at_a_tools_name_not_made_by_a_class_statement(body: str) -> None:
    error = _only_error(_toolkit("title: Bound", body))
    assert error.code == "no_tools_class"
    assert error.line == 5
    assert "not made by a class statement" in error.message


def test_it_refuses_a_tools_class_without_public_methods() -> None:
    body = "class Tools:\n    def _private(self): pass\n    class Valves: pass\n"
    error = _only_error(_toolkit("title: Empty", body))
    assert error.code == "no_tools"
    assert error.line == 5


def test_it_finds_public_methods_in_source_order() -> None:
    body = """\
class Tools:
    class Valves:
        pass

    class UserValves:
        pass

    def __init__(self):
        pass

    async def zeta(self):
        pass

    def _hidden(self):
        pass

    @property
    def shown_as_value(self):
        return 1

    @staticmethod
    def alpha():
        pass

    def zeta(self):
        pass
"""
    parsed = parse_toolkit_source(_toolkit("title: Order", body))
    assert parsed.tool_names == ["zeta", "alpha"]
    assert (parsed.has_valves, parsed.has_user_valves) == (True, True)


def test_it_uses_the_last_module_level_tools_class() -> None:
    body = TOOLS + "\nclass Tools:\n    def second(self): pass\n"
    assert parse_toolkit_source(_toolkit("title: Twice", body)).tool_names == ["second"]


PLUGIN = """\
from agent.plugin import llm_tool_plugin


class WebSearchPlugin(llm_tool_plugin.LLMToolPlugin):
    _version_ = "2.1"

    @classmethod
    def get_metadata(cls):
        return {"displayName": "$t:search.name"}

    def invoke(self, query: str) -> str:
        return query
"""


def test_it_accepts_a_plugin_base_given_as_an_attribute() -> None:
    parsed = parse_toolkit_source(PLUGIN, filename="search.py")
    assert (parsed.kind, parsed.plugin_version) == ("ragflow", "2.1")
    # The metadata has no literal name, so the class name gives the tool's name.
    assert parsed.tool_names == ["web_search_plugin"]
    assert (parsed.title, parsed.description) == ("search", "")


def test_it_refuses_a_plugin_without_version() -> None:
    error = _only_error(PLUGIN.replace('    _version_ = "2.1"\n', ""))
    assert error.code == "plugin_version"
    assert (error.line, error.column) == (4, 1)
    assert "has no `_version_`" in error.message


def test_it_refuses_a_plugin_version_that_is_not_a_string_literal() -> None:
    error = _only_error(PLUGIN.replace('"2.1"', "2.1"))
    assert error.code == "plugin_version"
    assert (error.line, error.column) == (5, 5)
    assert "string literal" in error.message


def test_it_refuses_a_plugin_without_get_metadata_or_invoke() -> None:
    source = PLUGIN.replace("def get_metadata", "def metadata").replace("invoke", "run")
    errors = _errors(source)
    assert [(e.code, e.line) for e in errors] == [
        ("plugin_metadata", 4),
        ("plugin_invoke", 4),
    ]


def test_it_refuses_get_metadata_that_is_not_a_classmethod() -> None:
    error = _only_error(PLUGIN.replace("    @classmethod\n", ""))
    assert error.code == "plugin_metadata"
    assert error.line == 7
    assert "`@classmethod`" in error.message


def test_it_refuses_a_second_plugin_class() -> None:
    second = "\n\nclass Other(LLMToolPlugin):\n    pass\n"
    error = _only_error(PLUGIN + second)
    assert error.code == "several_plugins"
    assert error.line == 15


# -- Titles, slugs and facts for review ---------------------------------------------------


def test_it_takes_the_title_from_frontmatter_then_file_name_then_class() -> None:
    assert parse_toolkit_source(_toolkit("title: Ünïcode Títle!")).suggested_slug == ("unicode_title")
    no_title = _toolkit("author: me")
    from_file = parse_toolkit_source(no_title, filename="C:\\Users\\me\\My Tool.py")
    assert (from_file.title, from_file.suggested_slug) == ("My Tool", "my_tool")
    from_class = parse_toolkit_source(no_title)
    assert (from_class.title, from_class.suggested_slug) == ("Tools", "tools")


def test_it_does_not_make_a_slug_of_a_translation_key() -> None:
    parsed = parse_toolkit_source(_toolkit("title: $t:search.name"), filename="s.py")
    assert (parsed.title, parsed.suggested_slug) == ("$t:search.name", "s")


@pytest.mark.parametrize(
    ("text", "slug"),
    [
        ("String Inverse", "string_inverse"),
        ("  --Weird__name--  ", "weird_name"),
        ("日本語", "toolkit"),
        ("", "toolkit"),
        ("a" * 63 + " b", "a" * 63),
        ("x" * 100, "x" * 64),
    ],
)
def test_it_slugifies(text: str, slug: str) -> None:
    assert slugify(text) == slug


def test_it_lists_imports_and_url_hosts() -> None:
    body = '''\
import os.path
import importlib
from . import sibling
from urllib.request import urlopen

API = "https://API.Example.com:8443/v1"


class Tools:
    def fetch(self, name: str) -> str:
        """Fetch it; see https://docs.example.net/ for documentation."""
        socket = importlib.import_module("socket")
        return f"http://user:pw@{name}.internal/x and http://[::1]:80/ {socket}"
'''
    parsed = parse_toolkit_source(_toolkit("author_url: https://me.example", body))
    assert parsed.imports == ["importlib", "os", "socket", "urllib"]
    assert parsed.hosts == ["::1", "api.example.com"]


def test_it_keeps_unknown_keys_and_their_lines() -> None:
    source = _toolkit("title: T\nicon_url: data:image/png;base64,xx\nmood: happy")
    parsed = parse_toolkit_source(source)
    assert parsed.manifest == {
        "title": "T",
        "icon_url": "data:image/png;base64,xx",
        "mood": "happy",
    }
    assert parsed.manifest_lines == {"title": 2, "icon_url": 3, "mood": 4}


def test_it_lets_a_later_license_line_win_over_licence() -> None:
    parsed = parse_toolkit_source(_toolkit("licence: MIT\nlicense: Apache-2.0"))
    assert parsed.manifest == {"license": "Apache-2.0"}


# -- Frontmatter parity with Open WebUI ---------------------------------------------------

# Files Open WebUI reads frontmatter from: ToolHub must read exactly the same.
OPEN_WEBUI_ACCEPTS = {
    "plain": '"""\ntitle: A\nversion: 1\n"""\n',
    "spaces after the opening quotes": '"""   \ntitle: A\n"""\n',
    "keys keep their case": '"""\nTitle: A\nAUTHOR: B\n"""\n',
    "last duplicate wins": '"""\ntitle: A\nversion: 1\ntitle: B\n"""\n',
    "indented keys and tabs": '"""\n    title:\tA  \n\tauthor:   B\n"""\n',
    "colons in values": '"""\nauthor_url: https://x.org:8080/a\n"""\n',
    "empty values": '"""\nrequirements:\ntitle:   \n"""\n',
    "prose ignored": '"""\nA tool that does things.\n\ntitle: A\n- not: a list\n"""\n',
    "digits and hyphens are no key": '"""\nkey2: a\nauthor-url: b\nok: c\n"""\n',
    "space before colon is no key": '"""\ntitle : A\nversion: 1\n"""\n',
    "closing line with text loses it": '"""\ntitle: A\nversion: 1"""\n',
    "quotes inside a value end it": '"""\ntitle: A\nauthor: say """hi\nv: 1\n"""\n',
    "single quotes do not end it": '"""\ntitle: A\nnote: \'\'\'\nversion: 2\n"""\n',
    "windows line ends": '"""\r\ntitle: A\r\nversion: 1\r\n"""\r\n',
    "old mac line ends": '"""\rtitle: A\rversion: 1\r"""\r',
    "form feed cuts a line": '"""\ntitle: A\x0cversion: 1\n"""\n',
    "line separator cuts a line": '"""\ntitle: A\u2028author: B\n"""\n',
    "kelvin sign matches k": '"""\n\u212aey: v\n"""\n',
    "unicode key letters ignored": '"""\ntítle: A\nok: 1\n"""\n',
    "no closing quotes": '"""\ntitle: A\nversion: 1\n',
    "code after the docstring": '"""\ntitle: A\n"""\nclass Tools:\n    title: str = "B"\n',
}

# Files Open WebUI reads nothing from, and ToolHub reads on purpose.
TOOLHUB_ALSO_ACCEPTS = {
    "single quotes": (
        "'''\ntitle: A\nnote: \"\"\" inside\n'''\n",
        {"title": "A", "note": '""" inside'},
    ),
    "shebang": ('#!/usr/bin/env python3\n"""\ntitle: A\n"""\n', {"title": "A"}),
    "coding comment": ('# -*- coding: utf-8 -*-\n"""\ntitle: A\n"""\n', {"title": "A"}),
    "comments and blank lines": (
        '#!/usr/bin/env python\n\n# A toolkit.\n   # indented\n\n"""\ntitle: A\n"""\n',
        {"title": "A"},
    ),
    "byte order mark": ('\ufeff"""\ntitle: A\n"""\n', {"title": "A"}),
    "single quotes after a shebang": ("#!python\n'''\nv: 1\n'''\n", {"v": "1"}),
}

# Files neither reads frontmatter from.
NEITHER_ACCEPTS = {
    "text on the opening line": '"""title: A\nversion: 1\n"""\n',
    "one-line docstring": '"""Note: this is slow."""\n',
    "raw string prefix": 'r"""\ntitle: A\n"""\n',
    "code before the docstring": 'import os\n"""\ntitle: A\n"""\n',
    "no docstring": "title = 'A'\n",
    "empty file": "",
    "quotes hidden in a comment": '# note\x0c"""\ntitle: A\n"""\n',
    "empty docstring": '"""\n"""\ntitle: A\n',
}


@pytest.mark.parametrize("case", sorted(OPEN_WEBUI_ACCEPTS))
def test_it_reads_frontmatter_exactly_like_open_webui(case: str) -> None:
    source = OPEN_WEBUI_ACCEPTS[case]
    expected = openwebui_frontmatter(source)
    assert expected, "Open WebUI should read something from this case"
    assert parse_frontmatter(source) == expected


def test_the_open_webui_reference_follows_its_quirks() -> None:
    cases = OPEN_WEBUI_ACCEPTS
    assert openwebui_frontmatter(cases["keys keep their case"]) == {
        "Title": "A",
        "AUTHOR": "B",
    }
    assert openwebui_frontmatter(cases["last duplicate wins"]) == {
        "title": "B",
        "version": "1",
    }
    assert openwebui_frontmatter(cases["closing line with text loses it"]) == {"title": "A"}
    assert openwebui_frontmatter(cases["form feed cuts a line"]) == {
        "title": "A",
        "version": "1",
    }
    assert openwebui_frontmatter(cases["digits and hyphens are no key"]) == {"ok": "c"}
    assert openwebui_frontmatter(cases["kelvin sign matches k"]) == {"\u212aey": "v"}
    assert openwebui_frontmatter(cases["empty values"]) == {
        "requirements": "",
        "title": "",
    }


@pytest.mark.parametrize("case", sorted(TOOLHUB_ALSO_ACCEPTS))
def test_it_reads_frontmatter_open_webui_would_miss(case: str) -> None:
    source, expected = TOOLHUB_ALSO_ACCEPTS[case]
    assert openwebui_frontmatter(source) == {}
    assert parse_frontmatter(source) == expected


@pytest.mark.parametrize("case", sorted(NEITHER_ACCEPTS))
def test_it_reads_no_frontmatter_where_open_webui_reads_none(case: str) -> None:
    source = NEITHER_ACCEPTS[case]
    assert openwebui_frontmatter(source) == {}
    assert parse_frontmatter(source) == {}


def test_it_points_at_real_lines_after_a_preamble_and_form_feeds() -> None:
    frontmatter = "title: T\x0cversion: 1\nrequirements: ok, ./bad"
    source = f'#!/usr/bin/env python\n# comment\n\n"""\n{frontmatter}\n"""\n\n{TOOLS}'
    error = _only_error(source)
    assert error.code == "requirement_path"
    assert (error.line, error.column) == (6, 19)


def test_it_parses_a_shebang_single_quoted_toolkit() -> None:
    source = "#!/usr/bin/env python3\n# A toolkit.\n'''\ntitle: Quoted\nlicence: MIT\n'''\n"
    parsed = parse_toolkit_source(source + TOOLS)
    assert parsed.manifest == {"title": "Quoted", "license": "MIT"}
    assert parsed.manifest_lines == {"title": 4, "license": 5}


def test_it_never_runs_the_uploaded_code(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    body = f"open({str(marker)!r}, 'w').close()\nraise SystemExit(1)\n\n{TOOLS}"
    assert parse_toolkit_source(_toolkit("title: Inert", body)).title == "Inert"
    assert not marker.exists()


def test_it_lists_errors_without_a_line_first_then_by_line() -> None:
    source = _toolkit("requirements: ./x\nlicense: MIT\nrequirements: ./y, -e .", "")
    errors = _errors(source)
    assert [(e.line, e.code) for e in errors] == [
        (None, "no_tools_class"),
        (4, "requirement_path"),
        (4, "requirement_option"),
    ]
    # The exception's text joins the messages in the same order.
    with pytest.raises(ToolkitSourceInvalid, match=r"No `class Tools`.*`\./y`"):
        parse_toolkit_source(source)
