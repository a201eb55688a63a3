"""The sandbox runtime (toolhub/runtime), run as a plain subprocess: no sandbox, no Django.

The parity table lists parameter schemas that Open WebUI's `get_tool_specs` produces for
the same signatures (its `convert_function_to_pydantic_model`, then langchain's
`convert_to_openai_function`: every `$ref` inlined, generated titles dropped except
inside lists; then its `clean_openai_tool_schema` over `properties` and `items`: a
nullable single type loses its `anyOf`, `null` leaves any `anyOf`, `"default": null` is
dropped, an untyped schema becomes a string). The improvements table lists where ToolHub
deliberately differs.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
MAIN = REPO / "toolhub" / "runtime" / "main.py"
EXAMPLES = REPO / "toolhub" / "toolkits" / "demo"


@dataclass
class Run:
    messages: list[dict[str, Any]]
    stderr: str

    @property
    def final(self) -> dict[str, Any]:
        return self.messages[-1]

    def events(self, kind: str = "event") -> list[dict[str, Any]]:
        return [message["event"] for message in self.messages if message["kind"] == kind]


def run(
    request: dict[str, Any],
    answer: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
    timeout: float = 30,
) -> Run:
    """Run the runtime on one request; `answer` replies to each `call` line (None: silence)."""
    with tempfile.TemporaryFile() as stderr:
        process = subprocess.Popen(
            [sys.executable, "-I", str(MAIN)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        killer = threading.Timer(timeout, process.kill)
        killer.start()
        try:
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(json.dumps(request).encode() + b"\n")
            process.stdin.flush()
            if answer is None:
                process.stdin.close()
            messages = []
            for line in process.stdout:
                messages.append(json.loads(line))
                reply = answer(messages[-1]) if answer and messages[-1]["kind"] == "call" else None
                if reply is not None:
                    process.stdin.write(json.dumps(reply).encode() + b"\n")
                    process.stdin.flush()
            process.wait()
        finally:
            killer.cancel()
            if process.stdin and not process.stdin.closed:
                process.stdin.close()
        stderr.seek(0)
        result = Run(messages, stderr.read().decode())
    assert process.returncode == 0, result.stderr
    finals = [m for m in messages if m["kind"] in ("result", "error", "introspection")]
    assert finals == [messages[-1]], messages
    return result


def write_toolkit(directory: Path, source: str, name: str = "toolkit.py") -> str:
    path = directory / name
    path.write_text(textwrap.dedent(source))
    return str(path)


def invoke(source_path: str, tool: str, arguments: dict[str, Any] | None = None, **extra: Any) -> dict:
    return {"op": "invoke", "source_path": source_path, "tool": tool, "arguments": arguments or {}, **extra}


# --- Parity with Open WebUI --------------------------------------------------------

PREAMBLE = """
import datetime
from enum import Enum
from typing import Annotated, Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, Field


class Unit(str, Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Priority(Enum):
    LOW = 1
    HIGH = 2


class Point(BaseModel):
    x: float
    y: float = 0.0


class Address(BaseModel):
    street: str
    city: str = Field("Paris", description="City name")
    point: Point


def logged(func):
    # A decorator without functools.wraps, as some public toolkits have.
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper
"""

POINT = {
    "properties": {"x": {"type": "number"}, "y": {"default": 0.0, "type": "number"}},
    "required": ["x"],
    "type": "object",
}

PARITY = [
    (
        "def case(self, text: str, count: int, ratio: float, flag: bool): ...",
        {
            "properties": {
                "text": {"type": "string"},
                "count": {"type": "integer"},
                "ratio": {"type": "number"},
                "flag": {"type": "boolean"},
            },
            "required": ["text", "count", "ratio", "flag"],
            "type": "object",
        },
    ),
    (
        'def case(self, text: str = "hi", count: int = 3, ratio: float = 0.5, flag: bool = False): ...',
        {
            "properties": {
                "text": {"default": "hi", "type": "string"},
                "count": {"default": 3, "type": "integer"},
                "ratio": {"default": 0.5, "type": "number"},
                "flag": {"default": False, "type": "boolean"},
            },
            "type": "object",
        },
    ),
    ("def case(self): ...", {"properties": {}, "type": "object"}),
    (
        '''
        def case(self, city: str, days: int = 3, unit: str = "c", note: str = ""):
            """
            Forecast the weather.
            :param city: The city to look up
            :param days:   How many days
            :param str unit: typed reST is not read by Open WebUI
            :param nowhere: not a parameter
            :return: The forecast
            """
        ''',
        {
            "properties": {
                "city": {"description": "The city to look up", "type": "string"},
                "days": {"default": 3, "description": "How many days", "type": "integer"},
                "unit": {"default": "c", "type": "string"},
                "note": {"default": "", "type": "string"},
            },
            "required": ["city"],
            "type": "object",
        },
    ),
    (
        # Untyped is a string; a default of None is dropped.
        "def case(self, anything, whatever: Any = None, nothing=None): ...",
        {
            "properties": {"anything": {"type": "string"}, "whatever": {"type": "string"}, "nothing": {"type": "string"}},
            "required": ["anything"],
            "type": "object",
        },
    ),
    (
        "def case(self, tags: list[str], ids: List[int] = [], raw: list = None): ...",
        {
            "properties": {
                "tags": {"items": {"type": "string"}, "type": "array"},
                "ids": {"default": [], "items": {"type": "integer"}, "type": "array"},
                "raw": {"items": {"type": "string"}, "type": "array"},
            },
            "required": ["tags"],
            "type": "object",
        },
    ),
    (
        "def case(self, data: dict, counts: dict[str, int], extra: Dict[str, Any] = {}): ...",
        {
            "properties": {
                "data": {"additionalProperties": True, "type": "object"},
                "counts": {"additionalProperties": {"type": "integer"}, "type": "object"},
                "extra": {"additionalProperties": True, "default": {}, "type": "object"},
            },
            "required": ["data", "counts"],
            "type": "object",
        },
    ),
    (
        "def case(self, b: Optional[int], a: Optional[str] = None, c: str | None = None, d: Union[int, str] = 1): ...",
        {
            "properties": {
                "b": {"type": "integer"},
                "a": {"type": "string"},
                "c": {"type": "string"},
                "d": {"anyOf": [{"type": "integer"}, {"type": "string"}], "default": 1},
            },
            "required": ["b"],
            "type": "object",
        },
    ),
    (
        'def case(self, unit: Literal["celsius", "fahrenheit"] = "celsius",'
        ' only: Literal["only"] = "only", level: Literal[1, 2] = 1): ...',
        {
            "properties": {
                "unit": {"default": "celsius", "enum": ["celsius", "fahrenheit"], "type": "string"},
                "only": {"const": "only", "default": "only", "type": "string"},
                "level": {"default": 1, "enum": [1, 2], "type": "integer"},
            },
            "type": "object",
        },
    ),
    # Keys beside a `$ref` (a default, a description) survive inlining since
    # langchain-core 0.3.79; older versions dropped them.
    (
        "def case(self, priority: Priority, unit: Unit = Unit.CELSIUS): ...",
        {
            "properties": {
                "priority": {"enum": [1, 2], "type": "integer"},
                "unit": {"default": "celsius", "enum": ["celsius", "fahrenheit"], "type": "string"},
            },
            "required": ["priority"],
            "type": "object",
        },
    ),
    (
        '''
        def case(self, address: Address, points: list[Point] = []):
            """:param address: Where to deliver"""
        ''',
        {
            "properties": {
                "address": {
                    "description": "Where to deliver",
                    "properties": {
                        "street": {"type": "string"},
                        "city": {"default": "Paris", "description": "City name", "type": "string"},
                        "point": POINT,
                    },
                    "required": ["street", "point"],
                    "type": "object",
                },
                "points": {"default": [], "items": POINT, "type": "array"},
            },
            "required": ["address"],
            "type": "object",
        },
    ),
    (
        # Open WebUI's converter does not walk lists, so the members of an anyOf keep
        # their titles, and keep them when the cleanup merges the only one left.
        "def case(self, point: Optional[Point] = None): ...",
        {
            "properties": {
                "point": {
                    "properties": {
                        "x": {"title": "X", "type": "number"},
                        "y": {"default": 0.0, "title": "Y", "type": "number"},
                    },
                    "required": ["x"],
                    "title": "Point",
                    "type": "object",
                }
            },
            "type": "object",
        },
    ),
    (
        '''
        def case(self, text: str, __user__: dict = {}, __event_emitter__=None, __event_call__=None,
                 __metadata__=None, __messages__=None, __files__=None, __model__=None, __id__=None,
                 __request__=None, __custom__=None):
            """:param __user__: never shown
            :param text: The text"""
        ''',
        {
            "properties": {"text": {"description": "The text", "type": "string"}},
            "required": ["text"],
            "type": "object",
        },
    ),
    (
        "def case(self, title: str, when: datetime.date, note: Annotated[str, 'just a note'] = ''): ...",
        {
            "properties": {
                "title": {"type": "string"},
                "when": {"format": "date", "type": "string"},
                "note": {"default": "", "type": "string"},
            },
            "required": ["title", "when"],
            "type": "object",
        },
    ),
    (
        'def case(self, limit: int = Field(5, ge=1, description="At most this many")): ...',
        {
            "properties": {
                "limit": {"default": 5, "description": "At most this many", "minimum": 1, "type": "integer"}
            },
            "type": "object",
        },
    ),
    (
        # With a `:param` line, Open WebUI wraps the Field as the default of another one:
        # the `:param` text, no default, none of the inner Field's keys, not required.
        '''
        def case(self, limit: int = Field(5, ge=1, description="inner"), q: str = Field(..., description="inner q")):
            """Search.
            :param limit: outer
            :param q: the query
            """
        ''',
        {
            "properties": {
                "limit": {"description": "outer", "type": "integer"},
                "q": {"description": "the query", "type": "string"},
            },
            "type": "object",
        },
    ),
    (
        # `null` leaves an anyOf of several members too, and a None default goes.
        "def case(self, a: Optional[Union[int, str]] = None, b: Union[int, str, None] = 2): ...",
        {
            "properties": {
                "a": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                "b": {"anyOf": [{"type": "integer"}, {"type": "string"}], "default": 2},
            },
            "type": "object",
        },
    ),
    (
        # The cleanup recurses into `items`, but not into `additionalProperties`.
        "def case(self, x: Optional[int] = 3, y: Optional[List[Optional[int]]] = None,"
        " d: Dict[str, Optional[int]] = {}): ...",
        {
            "properties": {
                "x": {"default": 3, "type": "integer"},
                "y": {"items": {"type": "integer"}, "type": "array"},
                "d": {
                    "additionalProperties": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                    "default": {},
                    "type": "object",
                },
            },
            "type": "object",
        },
    ),
    (
        # A Literal of mixed types has no type of its own: it becomes a string.
        "def case(self, m: Literal[1, 'a'] = 1, t: tuple[int, str] = (1, 'a')): ...",
        {
            "properties": {
                "m": {"default": 1, "enum": [1, "a"], "type": "string"},
                "t": {
                    "default": [1, "a"],
                    "maxItems": 2,
                    "minItems": 2,
                    "prefixItems": [{"type": "integer"}, {"type": "string"}],
                    "type": "array",
                },
            },
            "type": "object",
        },
    ),
    # Open WebUI 0.12.4: a `:param` description runs on over the following lines, blank ones
    # included, until a line that starts with `:`; the lines are joined with one space.
    (
        '''
        def case(self, city: str, days: int = 3):
            """
            Forecast the weather.
            :param city: The city to look up,
                with its country
                (such as "Paris, France").
            :param days: How many days
            :return: The forecast
                for those days.
            """
        ''',
        {
            "properties": {
                "city": {
                    "description": 'The city to look up, with its country (such as "Paris, France").',
                    "type": "string",
                },
                "days": {"default": 3, "description": "How many days", "type": "integer"},
            },
            "required": ["city"],
            "type": "object",
        },
    ),
    (
        '''
        def case(self, query: str, limit: int = 5):
            """Search the notes.

            :param query: Words to look for.

                Quotes keep a phrase together.

            :param limit: At most this many notes.
            :type limit: int
            Ignored: after `:type`, nothing belongs to `limit`.
            """
        ''',
        {
            "properties": {
                "query": {"description": "Words to look for. Quotes keep a phrase together.", "type": "string"},
                "limit": {"default": 5, "description": "At most this many notes.", "type": "integer"},
            },
            "required": ["query"],
            "type": "object",
        },
    ),
    (
        # A bare `:param x:` documents nothing and ends the description before it; text after
        # the last `:param` (even a Google `Args:` section) still belongs to it.
        '''
        def case(self, a: str, b: str, c: str = ""):
            """Join.
            :param a: first
            :param b:
                second
            :param c: third
            Args:
                a: from Args
            """
        ''',
        {
            "properties": {
                "a": {"description": "first", "type": "string"},
                "b": {"type": "string"},
                "c": {"default": "", "description": "third Args: a: from Args", "type": "string"},
            },
            "required": ["a", "b"],
            "type": "object",
        },
    ),
]

IMPROVEMENTS = [
    (
        '''
        def case(self, city: str, days: int = 3):
            """Forecast the weather.

            Args:
                city (str): The city to look up,
                    with its country.
                days: How many days

            Returns:
                The forecast.
            """
        ''',
        {
            "properties": {
                "city": {"description": "The city to look up, with its country.", "type": "string"},
                "days": {"default": 3, "description": "How many days", "type": "integer"},
            },
            "required": ["city"],
            "type": "object",
        },
    ),
    (
        'def case(self, query: Annotated[str, Field(description="What to search for")],'
        ' limit: Annotated[int, Field(ge=1, le=10, description="How many")] = 3): ...',
        {
            "properties": {
                "query": {"description": "What to search for", "type": "string"},
                "limit": {"default": 3, "description": "How many", "maximum": 10, "minimum": 1, "type": "integer"},
            },
            "required": ["query"],
            "type": "object",
        },
    ),
    (
        '''
        def case(self, q: Annotated[str, Field(description="from Annotated")]):
            """Search.

            Args:
                q: from Args

            :param q: from reST
            """
        ''',
        {"properties": {"q": {"description": "from reST", "type": "string"}}, "required": ["q"], "type": "object"},
    ),
    (
        # Open WebUI calls an unannotated parameter a string whatever its default.
        "def case(self, other=5, ratio=0.5, flag=False, name='x', nothing=None): ...",
        {
            "properties": {
                "other": {"default": 5, "type": "integer"},
                "ratio": {"default": 0.5, "type": "number"},
                "flag": {"default": False, "type": "boolean"},
                "name": {"default": "x", "type": "string"},
                "nothing": {"type": "string"},
            },
            "type": "object",
        },
    ),
    (
        # Open WebUI would list `args` and `kwargs` as required parameters of any type.
        "def case(self, text: str, *args, **kwargs): ...",
        {"properties": {"text": {"type": "string"}}, "required": ["text"], "type": "object"},
    ),
    (
        # Open WebUI names this tool `wrapper`, with required `args` and `kwargs` strings and no
        # description; ToolHub describes the method the decorator wraps.
        '''
        @logged
        def case(self, query: str, limit: int = 3):
            """Search the web.
            :param query: What to look for
            """
        ''',
        {
            "properties": {
                "query": {"description": "What to look for", "type": "string"},
                "limit": {"default": 3, "type": "integer"},
            },
            "required": ["query"],
            "type": "object",
        },
    ),
]


def _cases_toolkit(cases: list[tuple[str, dict]]) -> str:
    methods = []
    for index, (source, _) in enumerate(cases):
        method = textwrap.dedent(source).strip().replace("def case(", f"def case_{index:02d}(", 1)
        methods.append(textwrap.indent(method, "    "))
    return PREAMBLE + "\n\nclass Tools:\n" + "\n\n".join(methods) + "\n"


@pytest.fixture(scope="module")
def introspected(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, dict]]:
    directory = tmp_path_factory.mktemp("cases")
    tables = {}
    for table, cases in (("parity", PARITY), ("improvements", IMPROVEMENTS)):
        path = directory / f"{table}.py"
        path.write_text(_cases_toolkit(cases))
        final = run({"op": "introspect", "source_path": str(path)}).final
        assert final["kind"] == "introspection", final
        tables[table] = {tool["function"]["name"]: tool["function"] for tool in final["tools"]}
    return tables


@pytest.mark.parametrize("index", range(len(PARITY)))
def test_parameters_equal_open_webui(introspected: dict, index: int) -> None:
    source, expected = PARITY[index]
    assert introspected["parity"][f"case_{index:02d}"]["parameters"] == expected, source


@pytest.mark.parametrize("index", range(len(IMPROVEMENTS)))
def test_parameters_improve_on_open_webui(introspected: dict, index: int) -> None:
    source, expected = IMPROVEMENTS[index]
    assert introspected["improvements"][f"case_{index:02d}"]["parameters"] == expected, source


def test_description_stops_at_param_return_or_args(introspected: dict) -> None:
    assert introspected["parity"]["case_03"]["description"] == "Forecast the weather."
    assert introspected["improvements"]["case_00"]["description"] == "Forecast the weather."
    assert introspected["improvements"]["case_02"]["description"] == "Search."


def test_description_is_empty_without_a_docstring(introspected: dict) -> None:
    assert introspected["parity"]["case_00"]["description"] == ""


def test_a_method_decorated_without_wraps_is_described_and_called_as_itself(tmp_path: Path) -> None:
    source = """
    import functools


    def logged(func):
        def wrapper(*args, **kwargs):
            return func(*args, **kwargs)

        return wrapper


    def timed(func):
        def label(text):  # a helper in the closure besides the method
            return "timed " + text

        async def wrapper(self, *args, **kwargs):
            return label(await func(self, *args, **kwargs))

        return wrapper


    def wrapped(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            return func(*args, **kwargs)

        return wrapper


    class Tools:
        @logged
        def search(self, query: str, limit: int = 3, __user__: dict = None) -> str:
            \"\"\"Search the web.\"\"\"
            return f"{query}:{limit}:{__user__['name']}"

        @timed
        async def slow(self, text: str) -> str:
            return text

        @wrapped
        def kept(self, n: int) -> int:
            return n
    """
    path = write_toolkit(tmp_path, source)
    final = run({"op": "introspect", "source_path": path}).final
    tools = {tool["function"]["name"]: tool["function"] for tool in final["tools"]}
    assert sorted(tools) == ["kept", "search", "slow"]
    assert tools["search"]["description"] == "Search the web."
    assert tools["search"]["parameters"]["required"] == ["query"]
    assert tools["slow"]["parameters"]["properties"] == {"text": {"type": "string"}}
    assert tools["kept"]["parameters"]["properties"] == {"n": {"type": "integer"}}
    user = {"id": "u1", "name": "Ada"}
    assert run(invoke(path, "search", {"query": "q", "limit": "4"}, user=user)).final["result"] == "q:4:Ada"
    assert run(invoke(path, "slow", {"text": "t"})).final["result"] == "timed t"
    refused = run(invoke(path, "search", {"query": "q", "args": []})).final["error"]
    assert refused == "InvalidArguments: unexpected argument(s): 'args'"


def test_it_lists_public_methods_only(tmp_path: Path) -> None:
    path = write_toolkit(
        tmp_path,
        """
        class Tools:
            class Valves:
                pass

            def __init__(self):
                self.citation = True

            def _helper(self):
                pass

            async def fetch(self, url: str) -> str:
                return url

            def add(self, a: int, b: int) -> int:
                return a + b
        """,
    )
    final = run({"op": "introspect", "source_path": path}).final
    assert [tool["function"]["name"] for tool in final["tools"]] == ["add", "fetch"]
    assert final["tools"][0]["type"] == "function"
    # A nested class that is not a pydantic model is no valves model.
    assert final["valves_schema"] is None


def test_string_annotations_are_resolved(tmp_path: Path) -> None:
    path = write_toolkit(
        tmp_path,
        """
        from __future__ import annotations

        class Tools:
            def total(self, numbers: list[int]) -> int:
                return sum(numbers)
        """,
    )
    final = run({"op": "introspect", "source_path": path}).final
    assert final["tools"][0]["function"]["parameters"]["properties"] == {
        "numbers": {"items": {"type": "integer"}, "type": "array"}
    }
    assert run(invoke(path, "total", {"numbers": ["1", 2]})).final["result"] == "3"


def test_a_signature_without_a_schema_names_the_tool(tmp_path: Path) -> None:
    path = write_toolkit(
        tmp_path,
        """
        class Tools:
            def broken(self, thing: "Missing") -> str:
                return ""
        """,
    )
    final = run({"op": "introspect", "source_path": path}).final
    assert final["error"] == "ToolSpecError: tool 'broken': name 'Missing' is not defined"


# --- The shared examples -------------------------------------------------------------


def test_string_reverse_introspects_with_valves_schema() -> None:
    final = run({"op": "introspect", "source_path": str(EXAMPLES / "string_reverse.py")}).final
    assert final["kind_of_toolkit"] == "openwebui"
    assert final["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "reverse_string",
                "description": "Reverses the input string.",
                "parameters": {
                    "properties": {"string": {"description": "The string to reverse", "type": "string"}},
                    "required": ["string"],
                    "type": "object",
                },
            },
        }
    ]
    assert final["valves_schema"]["properties"]["api_key"]["description"] == "Your API key here"
    assert final["user_valves_schema"] is None
    assert final["ragflow"] is None


def test_string_reverse_needs_the_api_key() -> None:
    request = invoke(str(EXAMPLES / "string_reverse.py"), "reverse_string", {"string": "abc"})
    assert run(request).final == {"kind": "result", "result": "Wrong API key", "result_type": "text"}
    request["valves"] = {"api_key": "42"}
    assert run(request).final == {"kind": "result", "result": "cba", "result_type": "text"}


def test_bad_calculator_introspects_as_ragflow() -> None:
    final = run({"op": "introspect", "source_path": str(EXAMPLES / "bad_calculator.py")}).final
    assert final["kind_of_toolkit"] == "ragflow"
    number = {"type": "number"}
    assert final["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "bad_calculator",
                "description": "A tool to calculate the sum of two numbers (will give wrong answer)",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "a": {**number, "description": "The first number"},
                        "b": {**number, "description": "The second number"},
                    },
                    "required": ["a", "b"],
                },
            },
        }
    ]
    assert final["ragflow"]["displayName"] == "$t:bad_calculator.name"
    assert final["ragflow"]["version"] == "1.0.0"
    assert final["valves_schema"] is None


def test_bad_calculator_adds_a_hundred() -> None:
    request = invoke(str(EXAMPLES / "bad_calculator.py"), "bad_calculator", {"a": 1, "b": 2})
    assert run(request).final == {"kind": "result", "result": "103", "result_type": "text"}


OLDER_RAGFLOW_PLUGIN = """
from plugin import llm_tool_plugin
from plugin.llm_tool_plugin import LLMToolMetadata, LLMToolPlugin


class EchoPlugin(LLMToolPlugin):
    _version_ = "0.1.0"

    @classmethod
    def get_metadata(cls) -> LLMToolMetadata:
        return {
            "name": "echo",
            "displayName": "Echo",
            "description": "Say it back.",
            "displayDescription": "Say it back.",
            "parameters": {
                "text": {"type": "string", "description": "What to say", "displayDescription": "", "required": True},
                "times": {"type": "integer", "description": "How often", "displayDescription": ""},
            },
        }

    def invoke(self, text: str, times: int = 1) -> str:
        same = llm_tool_plugin.LLMToolPlugin is LLMToolPlugin
        return f"{text * int(times)} {same}"
"""


def test_a_plugin_on_ragflows_older_import_path_runs_unchanged(tmp_path: Path) -> None:
    path = write_toolkit(tmp_path, OLDER_RAGFLOW_PLUGIN)
    final = run({"op": "introspect", "source_path": path}).final
    assert final["kind_of_toolkit"] == "ragflow", final
    # A parameter without `required` is optional (RAGFlow's own converter fails on it).
    assert final["tools"][0]["function"]["parameters"] == {
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "What to say"},
            "times": {"type": "integer", "description": "How often"},
        },
        "required": ["text"],
    }
    assert run(invoke(path, "echo", {"text": "ab", "times": 2})).final["result"] == "abab True"


def test_the_oldest_plugin_metadata_gives_its_json_schema_as_it_is(tmp_path: Path) -> None:
    source = OLDER_RAGFLOW_PLUGIN.replace(
        '''"parameters": {
                "text": {"type": "string", "description": "What to say", "displayDescription": "", "required": True},
                "times": {"type": "integer", "description": "How often", "displayDescription": ""},
            },''',
        '''"parameters": {
                "type": "object",
                "properties": {"text": {"type": "string", "description": "What to say"}},
                "required": ["text"],
            },''',
    )
    path = write_toolkit(tmp_path, source)
    tool = run({"op": "introspect", "source_path": path}).final["tools"][0]["function"]
    assert tool["parameters"] == {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "What to say"}},
        "required": ["text"],
    }


def test_library_lookup_reports_status_and_one_citation() -> None:
    request = invoke(
        str(EXAMPLES / "library_lookup.py"), "lookup", {"word": "valve"}, user={"id": "u1", "name": "Alice"}
    )
    result = run(request)
    events = result.events()
    assert [event["type"] for event in events] == ["status", "citation", "status"]
    assert events[0]["data"]["done"] is False and events[-1]["data"]["done"] is True
    assert events[1]["data"]["source"]["name"] == "Glossary: valve"
    assert result.final["result_type"] == "text"
    assert result.final["result"].startswith("valve:")


def test_library_lookup_reads_user_valves() -> None:
    request = invoke(str(EXAMPLES / "library_lookup.py"), "lookup", {"word": "valve"}, user_valves={"style": "long"})
    assert "(Valves) or by each user (UserValves)." in run(request).final["result"]


def test_library_lookup_counts_unique_words() -> None:
    request = invoke(str(EXAMPLES / "library_lookup.py"), "count_words", {"text": "a b a", "unique": True})
    assert run(request).final == {"kind": "result", "result": "2", "result_type": "text"}


def test_library_lookup_valves_schemas() -> None:
    final = run({"op": "introspect", "source_path": str(EXAMPLES / "library_lookup.py")}).final
    assert final["valves_schema"]["properties"]["max_results"]["maximum"] == 10
    assert final["user_valves_schema"]["properties"]["style"]["enum"] == ["short", "long"]
    assert [tool["function"]["name"] for tool in final["tools"]] == ["count_words", "lookup"]


@pytest.mark.skipif(importlib.util.find_spec("humanize") is None, reason="humanize is not installed")
def test_friendly_sizes_formats_bytes() -> None:
    request = invoke(str(EXAMPLES / "friendly_sizes.py"), "natural_size", {"num_bytes": 1500000})
    assert run(request).final == {"kind": "result", "result": "1.5 MB", "result_type": "text"}


# --- Invocation -------------------------------------------------------------------------

ECHO = """
import os
import sys
from pydantic import BaseModel


class Answer(BaseModel):
    value: int


class Tools:
    def shout(self, text: str) -> str:
        print("this goes to stderr, not to the protocol")
        sys.stdout.write("so does this\\n")
        os.write(1, b"and a raw write to fd 1\\n")
        return text.upper()

    def as_dict(self) -> dict:
        return {"when": __import__("datetime").date(2024, 1, 2), "nan": float("nan"), "set": {1}}

    def as_model(self) -> Answer:
        return Answer(value=7)

    def as_tuple(self):
        return (1, "a")

    def boom(self):
        raise RuntimeError("it broke\\non two lines")

    def exit(self):
        raise SystemExit(3)

    def add(self, a: int, b: int = 1, **kwargs) -> str:
        return f"{a + b} {sorted(kwargs)}"

    def optional(self, text: str = None) -> str:
        return repr(text)

    def context(self, __user__: dict, __metadata__: dict, __id__: str, __request__=None,
                __messages__=None, __files__=None, __model__=None, __chat_id__=None) -> dict:
        return {"user": __user__, "metadata": __metadata__, "id": __id__, "request": __request__,
                "messages": __messages__, "files": __files__, "model": __model__, "chat": __chat_id__}

    def greedy(self, **kwargs) -> str:
        return repr(sorted(kwargs))

    def emit_sync(self, __event_emitter__) -> str:
        __event_emitter__({"type": "status", "data": {"description": "from a sync tool"}})
        __event_emitter__({"type": "message", "data": {"content": object()}})
        return "done"

    async def emit_bad(self, __event_emitter__) -> str:
        await __event_emitter__({"data": "no type"})
        return "unreachable"

    def linger(self) -> str:
        import threading, time
        threading.Thread(target=time.sleep, args=(60,)).start()
        return "left a thread behind"
"""


@pytest.fixture
def echo(tmp_path: Path) -> str:
    return write_toolkit(tmp_path, ECHO)


def test_printing_does_not_break_the_protocol(echo: str) -> None:
    result = run(invoke(echo, "shout", {"text": "hi"}))
    assert result.messages == [{"kind": "result", "result": "HI", "result_type": "text"}]
    assert "this goes to stderr" in result.stderr and "so does this" in result.stderr
    assert "and a raw write to fd 1" in result.stderr


def test_dicts_and_models_come_back_as_json(echo: str) -> None:
    assert run(invoke(echo, "as_dict")).final == {
        "kind": "result",
        "result": {"when": "2024-01-02", "nan": "NaN", "set": [1]},
        "result_type": "json",
    }
    assert run(invoke(echo, "as_model")).final["result"] == {"value": 7}


def test_other_values_come_back_as_repr(echo: str) -> None:
    assert run(invoke(echo, "as_tuple")).final == {"kind": "result", "result": "(1, 'a')", "result_type": "text"}


def test_an_exception_gives_a_one_line_error_and_the_traceback(echo: str) -> None:
    final = run(invoke(echo, "boom")).final
    assert final["kind"] == "error"
    assert final["error"] == "RuntimeError: it broke on two lines"
    assert "Traceback (most recent call last)" in final["traceback"]
    assert 'toolkit.py", line' in final["traceback"] and "in boom" in final["traceback"]


def test_system_exit_is_an_error_too(echo: str) -> None:
    assert run(invoke(echo, "exit")).final["error"] == "SystemExit: 3"


def test_an_import_error_at_load_is_reported(tmp_path: Path) -> None:
    path = write_toolkit(tmp_path, "import no_such_package_here\n\nclass Tools:\n    pass\n")
    for request in ({"op": "introspect", "source_path": path}, invoke(path, "anything")):
        final = run(request).final
        assert final["error"] == "ModuleNotFoundError: No module named 'no_such_package_here'"
        assert 'toolkit.py", line 1' in final["traceback"]


def test_a_syntax_error_is_reported(tmp_path: Path) -> None:
    final = run({"op": "introspect", "source_path": write_toolkit(tmp_path, "def broken(:\n")}).final
    assert final["error"].startswith("SyntaxError:")


def test_a_file_without_tools_is_refused(tmp_path: Path) -> None:
    final = run({"op": "introspect", "source_path": write_toolkit(tmp_path, "x = 1\n")}).final
    assert final["error"] == (
        "InvalidToolkit: no `class Tools`, no LLMToolPlugin subclass and no AgentStrategy subclass at module level"
    )


def test_a_ragflow_plugin_needs_a_version(tmp_path: Path) -> None:
    source = (EXAMPLES / "bad_calculator.py").read_text().replace('_version_ = "1.0.0"', "")
    final = run({"op": "introspect", "source_path": write_toolkit(tmp_path, source)}).final
    assert final["error"] == "InvalidToolkit: RAGFlow plugin BadCalculatorPlugin has no _version_"


def test_a_bad_argument_type_names_the_field(echo: str) -> None:
    final = run(invoke(echo, "add", {"a": "three"})).final
    assert final["error"] == (
        "InvalidArguments: a: Input should be a valid integer, unable to parse string as an integer (got 'three')"
    )


def test_arguments_are_coerced_and_defaults_applied(echo: str) -> None:
    assert run(invoke(echo, "add", {"a": "41"})).final["result"] == "42 []"


def test_a_missing_argument_is_named(echo: str) -> None:
    assert run(invoke(echo, "add", {})).final["error"] == "InvalidArguments: a: Field required"


def test_unknown_arguments_go_to_kwargs_when_the_tool_takes_them(echo: str) -> None:
    assert run(invoke(echo, "add", {"a": 1, "extra": True})).final["result"] == "2 ['extra']"


def test_unknown_arguments_are_refused_otherwise(echo: str) -> None:
    final = run(invoke(echo, "shout", {"text": "x", "loud": True})).final
    assert final["error"] == "InvalidArguments: unexpected argument(s): 'loud'"


def test_a_caller_cannot_pass_injected_arguments(echo: str) -> None:
    final = run(invoke(echo, "greedy", {"__user__": {"role": "admin"}})).final
    assert final["error"] == "InvalidArguments: unexpected argument(s): '__user__'"


def test_null_means_the_default_when_the_default_is_none(echo: str) -> None:
    assert run(invoke(echo, "optional", {"text": None})).final["result"] == "None"


WRAPPED_FIELD = '''
from pydantic import Field


class Tools:
    def search(self, limit: int = Field(5, ge=1), q: str = Field(..., min_length=2), n=2):
        """Search.
        :param limit: How many
        :param q: The query
        """
        return f"{q}:{limit}:{n!r}"
'''


def test_a_wrapped_field_keeps_its_default_and_checks_in_a_call(tmp_path: Path) -> None:
    # The schema says what Open WebUI says (parity table), but a call still gets the
    # inner Field's default and constraints, and an untyped default's type coerces.
    path = write_toolkit(tmp_path, WRAPPED_FIELD)
    assert run(invoke(path, "search", {"q": "ab", "n": "7"})).final["result"] == "ab:5:7"
    assert run(invoke(path, "search", {"q": "ab", "limit": 0})).final["error"].startswith(
        "InvalidArguments: limit: Input should be greater than or equal to 1"
    )
    assert run(invoke(path, "search", {})).final["error"] == "InvalidArguments: q: Field required"


def test_an_unknown_tool_is_an_error(echo: str) -> None:
    assert run(invoke(echo, "_private")).final["error"] == "ToolNotFound: no tool named '_private'"
    assert run(invoke(echo, "__init__")).final["error"] == "ToolNotFound: no tool named '__init__'"


def test_injected_arguments_reach_the_tool(echo: str) -> None:
    request = invoke(
        echo,
        "context",
        user={"id": "u1", "name": "Alice", "email": "a@example.org", "role": "user"},
        metadata={"chat_id": "c1"},
        messages=[{"role": "user", "content": "hi"}],
        files=[],
        model=None,
        id="inv-1",
    )
    assert run(request).final["result"] == {
        "user": {"id": "u1", "name": "Alice", "email": "a@example.org", "role": "user"},
        "metadata": {"chat_id": "c1"},
        "id": "inv-1",
        "request": None,
        "messages": [{"role": "user", "content": "hi"}],
        "files": [],
        "model": None,
        "chat": "c1",
    }


def test_kwargs_do_not_receive_injected_arguments(echo: str) -> None:
    assert run(invoke(echo, "greedy", id="inv-1")).final["result"] == "[]"


def test_a_sync_tool_can_emit_events(echo: str) -> None:
    result = run(invoke(echo, "emit_sync"))
    assert result.events()[0] == {"type": "status", "data": {"description": "from a sync tool"}}
    # Data that is not JSON is sent as its repr.
    assert result.events()[1]["data"]["content"].startswith("<object object at")
    assert result.final["result"] == "done"


def test_a_malformed_event_fails_the_tool(echo: str) -> None:
    final = run(invoke(echo, "emit_bad")).final
    assert final["error"].startswith("TypeError: an event must be a dict with a str 'type'")


def test_threads_left_behind_do_not_keep_the_runtime_alive(echo: str) -> None:
    assert run(invoke(echo, "linger"), timeout=20).final["result"] == "left a thread behind"


def test_invalid_valves_name_the_field_but_not_the_value(tmp_path: Path) -> None:
    path = write_toolkit(
        tmp_path,
        """
        from pydantic import BaseModel

        class Tools:
            class Valves(BaseModel):
                api_key: str
                retries: int = 3

            def ping(self) -> str:
                return "pong"
        """,
    )
    final = run(invoke(path, "ping", valves={"retries": "sk-secret-value"})).final
    assert final["error"] == (
        "InvalidValves: invalid valves: api_key: Field required; "
        "retries: Input should be a valid integer, unable to parse string as an integer"
    )
    assert "sk-secret-value" not in json.dumps(final)


# --- __event_call__ ------------------------------------------------------------------

ASKING = """
class Tools:
    async def delete(self, name: str, __event_call__) -> str:
        ok = await __event_call__({"type": "confirmation", "data": {"title": "Delete?", "message": name}})
        return f"confirmed={ok!r}"

    async def ask(self, __event_call__) -> str:
        answer = await __event_call__({"type": "input", "data": {"title": "Name?", "message": "", "placeholder": ""}})
        again = await __event_call__({"type": "input", "data": {"title": "Again?", "message": "", "placeholder": ""}})
        return f"{answer!r} {again!r}"
"""


@pytest.fixture
def asking(tmp_path: Path) -> str:
    return write_toolkit(tmp_path, ASKING)


def _reply(value: Any) -> Callable[[dict], dict]:
    return lambda call: {"kind": "call_result", "call_id": call["call_id"], "value": value}


@pytest.mark.parametrize("answer", [True, False])
def test_a_confirmation_round_trip(asking: str, answer: bool) -> None:
    result = run(invoke(asking, "delete", {"name": "x"}, call_timeout=10), answer=_reply(answer))
    assert result.messages[0] == {
        "kind": "call",
        "call_id": 1,
        "event": {"type": "confirmation", "data": {"title": "Delete?", "message": "x"}},
    }
    assert result.final["result"] == f"confirmed={answer!r}"


def test_input_calls_are_answered_in_turn(asking: str) -> None:
    answers = iter(["Alice", "Bob"])

    def answer(call: dict) -> dict:
        return {"kind": "call_result", "call_id": call["call_id"], "value": next(answers)}

    result = run(invoke(asking, "ask", call_timeout=10), answer=answer)
    calls = [message for message in result.messages if message["kind"] == "call"]
    assert [call["call_id"] for call in calls] == [1, 2]
    assert [call["event"]["data"]["title"] for call in calls] == ["Name?", "Again?"]
    assert result.final["result"] == "'Alice' 'Bob'"


def test_a_timed_out_confirmation_is_false(asking: str) -> None:
    def time_out(call: dict) -> dict:
        return {"kind": "call_result", "call_id": call["call_id"], "error": "timed out"}

    assert run(invoke(asking, "delete", {"name": "x"}), answer=time_out).final["result"] == "confirmed=False"
    result = run(invoke(asking, "ask"), answer=time_out)
    assert result.final["result"] == "{'error': 'timed out'} {'error': 'timed out'}"


def test_a_silent_host_does_not_hang_the_tool(asking: str) -> None:
    result = run(invoke(asking, "delete", {"name": "x"}, call_timeout=0.2), answer=lambda call: None, timeout=15)
    assert result.final["result"] == "confirmed=False"


def test_a_closed_stdin_ends_the_wait(asking: str) -> None:
    # No answer function: stdin is closed right after the request.
    assert run(invoke(asking, "ask", call_timeout=30), timeout=15).final["result"] == (
        "{'error': 'the host closed the connection'} {'error': 'the host closed the connection'}"
    )


# --- Protocol errors -----------------------------------------------------------------


def test_an_unknown_op_is_an_error(echo: str) -> None:
    assert run({"op": "explode", "source_path": echo}).final["error"] == "ProtocolError: unknown op 'explode'"


def test_a_request_without_source_path_is_an_error() -> None:
    assert run({"op": "introspect"}).final["error"] == "ProtocolError: the request has no source_path"
