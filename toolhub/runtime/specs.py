"""Tool specs for Open WebUI toolkits: which methods are tools, and their JSON schemas.

The `parameters` schema must equal what Open WebUI 0.12.4 stores for the same file (the
release matched, see docs/compatibility.md). Open WebUI builds a pydantic model from each
method (type hints, defaults, reST `:param` descriptions, continued over the next lines),
takes its JSON schema, inlines every `$ref`, drops the generated titles, and then
tidies every property (`_open_webui_cleanup`: a nullable single type loses its `anyOf`,
`"default": null` goes, an untyped schema becomes a string). That pipeline is rebuilt here
step by step, with three deliberate additions: Google-style `Args:` descriptions and
`Annotated[..., Field(...)]` metadata (see DESIGN.md; Open WebUI loses the latter because
it reads type hints without their extras), and an unannotated parameter whose default is a
`str`, `int`, `float` or `bool` takes its type from that default (Open WebUI calls it a
string whatever the default is). A method decorated without `functools.wraps` is described by
the method it wraps, where Open WebUI describes the decorator's `wrapper(*args, **kwargs)`.

The same pydantic model validates the arguments of a call, so that what the form and the
LLM are told is exactly what the tool accepts.
"""

from __future__ import annotations

import functools
import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, Field, create_model
from pydantic.fields import FieldInfo

_REST_PARAM = re.compile(r":param (\w+):\s*(.+)")
_DESCRIPTION_END = re.compile(r":param|:return|(Args|Arguments):$")
_GOOGLE_ARGS_HEADER = re.compile(r"(Args|Arguments):$")
_GOOGLE_ARG = re.compile(r"\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)")


class ToolSpecError(Exception):
    """A tool's signature cannot be turned into a JSON schema."""


def tool_functions(instance: object) -> dict[str, Callable[..., Any]]:
    """The tools of a `Tools` instance, by name.

    Like Open WebUI: every callable attribute of the instance that is not a class, in
    dir() order. Stricter than Open WebUI, which only skips dunder names: a name with a
    leading underscore is private and never a tool.
    """
    functions = {}
    for name in dir(instance):
        if name.startswith("_"):
            continue
        value = getattr(instance, name)
        if callable(value) and not inspect.isclass(value):
            functions[name] = _through_plain_decorator(name, value)
    return functions


def _through_plain_decorator(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """A tool whose decorator forgot `functools.wraps`, described by the method it wraps.

    `def wrapper(*args, **kwargs)` hides the method's signature and docstring: Open WebUI then
    offers a tool named `wrapper` with required `args` and `kwargs` (a deviation ToolHub keeps
    on purpose, see docs/compatibility.md). When the wrapper takes only `*args`/`**kwargs`
    and its closure holds exactly one function of the attribute's name (helpers aside), the
    tool is described by that function (bound like the method), and a call still goes through
    the wrapper.
    """
    if hasattr(function, "__wrapped__") or not inspect.ismethod(function):
        return function
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return function
    if any(param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD) for param in parameters):
        return function
    cells = getattr(function.__func__, "__closure__", None) or ()
    inner = []
    for cell in cells:
        try:
            content = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if inspect.isfunction(content) and content.__name__ == name:
            inner.append(content)
    if len(inner) != 1:
        return function
    original = types.MethodType(inner[0], function.__self__)

    def call(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    # `__wrapped__` makes inspect.signature and typing.get_type_hints read the original.
    functools.update_wrapper(call, original)
    return call


def tool_spec(name: str, function: Callable[..., Any]) -> dict[str, Any]:
    try:
        parameters = parameters_schema(function)
    except Exception as exc:
        raise ToolSpecError(f"tool {name!r}: {exc}") from exc
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": describe(function.__doc__),
            "parameters": parameters,
        },
    }


def describe(docstring: str | None) -> str:
    """The docstring up to its first `:param`, `:return` or `Args:` line."""
    if not docstring:
        return ""
    lines = []
    for line in docstring.strip().splitlines():
        line = line.strip()
        if _DESCRIPTION_END.match(line):
            break
        lines.append(line)
    return "\n".join(lines).strip()


def parameters_schema(function: Callable[..., Any]) -> dict[str, Any]:
    model, _ = arguments_model(function, for_schema=True)
    schema = model.model_json_schema()
    schema = _inline_refs(schema, schema.pop("$defs", {}), frozenset())
    schema.pop("title", None)
    schema.pop("description", None)
    schema = _drop_titles(schema)
    _open_webui_cleanup(schema)
    return schema


# Unannotated parameters with a default of one of these types are typed by it.
_TYPED_BY_DEFAULT = (bool, int, float, str)


def call_parameters(function: Callable[..., Any]) -> list[tuple[int, inspect.Parameter, Any]]:
    """The parameters a caller may pass, with their position in the signature and type hint
    (`Any` when unannotated, or the type of a `str`, `int`, `float` or `bool` default). Those
    with a leading underscore are left out: dunder names are injected by the runtime, and
    pydantic ignores the others in Open WebUI."""
    hints = typing.get_type_hints(function, include_extras=True)
    found = []
    for index, (name, param) in enumerate(inspect.signature(function).parameters.items()):
        if name.startswith("_") or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        hint = hints.get(name, Any)
        if name not in hints and type(param.default) in _TYPED_BY_DEFAULT:
            hint = type(param.default)
        found.append((index, param, hint))
    return found


def arguments_model(
    function: Callable[..., Any], *, for_schema: bool = False
) -> tuple[type[BaseModel], dict[str, str]]:
    """A pydantic model of the parameters a caller may pass, and field name → parameter.

    Fields get neutral names and the parameter name as alias: pydantic refuses fields
    named like its own attributes (`model_config`), and the schema and validation errors
    use the alias anyway. The parameters are call_parameters'.

    `param: T = Field(...)` with a reST `:param` line is where the schema and the
    validation part: Open WebUI wraps that `FieldInfo` as the default of a new
    `Field(description=...)`, so its schema has the `:param` text, no default, no
    constraints of the inner `Field`, and the parameter is not required. With
    `for_schema` the model says exactly that; otherwise a call still gets the inner
    `Field`'s default and checks.
    """
    docs = param_docs(function.__doc__)
    rest_docs = rest_param_docs(function.__doc__)
    fields: dict[str, Any] = {}
    names: dict[str, str] = {}
    for index, param, hint in call_parameters(function):
        name = param.name
        field: dict[str, Any] = {"alias": name}
        if name in docs:
            field["description"] = docs[name]
        if isinstance(param.default, FieldInfo):
            if for_schema and name in rest_docs:
                # Open WebUI's wrapped FieldInfo: a default that is no JSON, so none.
                field["default"] = None
            else:
                # `x: int = Field(3, description=...)` works in Open WebUI; keep its metadata.
                hint = Annotated[hint, param.default]
        elif param.default is not param.empty:
            field["default"] = param.default
        fields[f"p{index}"] = (hint, Field(**field))
        names[f"p{index}"] = name
    return create_model(getattr(function, "__name__", "tool"), **fields), names


def param_docs(docstring: str | None) -> dict[str, str]:
    """Parameter descriptions: reST `:param x:` lines win over a Google `Args:` section."""
    if not docstring:
        return {}
    docs = _google_args(docstring)
    docs.update(rest_param_docs(docstring))
    return {name: text for name, text in docs.items() if not name.startswith("__")}


def rest_param_docs(docstring: str | None) -> dict[str, str]:
    """The reST `:param x: text` descriptions, as Open WebUI 0.12.4 reads them.

    A description runs on over the lines after its `:param` line, blank ones included, until
    a line that starts with `:` (another `:param`, `:type`, `:return`...); each non-blank
    continuation line is stripped and joined with one space. A `:param` line without text
    (`:param x:` alone) documents nothing and ends the description before it. The last
    description of a name wins.
    """
    docs: dict[str, str] = {}
    current: str | None = None
    for line in (docstring or "").splitlines():
        text = line.strip()
        if text.startswith(":"):
            match = _REST_PARAM.match(text)
            current = None
            if match:
                current = match.group(1)
                docs[current] = match.group(2).strip()
        elif current is not None and text:
            docs[current] = f"{docs[current]} {text}"
    return docs


def _google_args(docstring: str) -> dict[str, str]:
    """Descriptions from an `Args:` section: `name (type): text`, continued when indented."""
    docs: dict[str, str] = {}
    section_indent = entry_indent = None
    current = None
    for line in inspect.cleandoc(docstring).splitlines():
        text = line.strip()
        indent = len(line) - len(line.lstrip())
        if section_indent is None:
            if _GOOGLE_ARGS_HEADER.match(text):
                section_indent = indent
            continue
        if not text:
            continue
        if indent <= section_indent:
            break
        if entry_indent is None:
            entry_indent = indent
        if indent == entry_indent:
            match = _GOOGLE_ARG.fullmatch(text)
            current = match.group(1) if match else None
            if match and current is not None:
                docs[current] = match.group(2)
        elif current is not None:
            docs[current] = f"{docs[current]} {text}".strip()
    return {name: text for name, text in docs.items() if text}


def _inline_refs(node: Any, defs: dict[str, Any], seen: frozenset[str]) -> Any:
    """Replace each `$ref` by its definition, keeping (and preferring) sibling keys.

    This is what Open WebUI's converter does. A reference inside its own definition
    (a recursive model) is dropped, leaving only its siblings.
    """
    if isinstance(node, list):
        return [_inline_refs(item, defs, seen) for item in node]
    if not isinstance(node, dict):
        return node
    result: dict[str, Any] = {}
    ref = node.get("$ref")
    if isinstance(ref, str) and ref not in seen:
        target = defs.get(ref.removeprefix("#/$defs/"), {})
        result.update(_inline_refs(target, defs, seen | {ref}))
    for key, value in node.items():
        if key != "$ref":
            result[key] = _inline_refs(value, defs, seen)
    return result


def _drop_titles(node: dict[str, Any], parent_key: str = "") -> dict[str, Any]:
    """Drop generated `title`s the way Open WebUI's converter does.

    A key `title` is kept only when it is a property called "title". Like the original,
    this walks nested objects but not lists, so the members of an `anyOf` keep theirs.
    """
    result = {}
    for key, value in node.items():
        if key == "title" and not (isinstance(value, dict) and parent_key == "properties"):
            continue
        result[key] = _drop_titles(value, key) if isinstance(value, dict) else value
    return result


def _open_webui_cleanup(schema: Any) -> None:
    """Open WebUI's last step over a parameters schema, in place.

    It visits the schema itself, then each value under `properties` and the schema under
    `items`, at any depth, and nothing else (not `anyOf` members, `additionalProperties`
    or `prefixItems`). At each: `{"type": "null"}` members leave an `anyOf`, and when one
    member is left it is merged into the schema (its keys win) and the `anyOf` goes; a
    `"default": null` is removed; and a schema that still has no `type`, `anyOf` or
    `properties` becomes `"type": "string"`.
    """
    if not isinstance(schema, dict):
        return
    members = schema.get("anyOf")
    if isinstance(members, list):
        kept = [m for m in members if not (isinstance(m, dict) and m.get("type") == "null")]
        if len(kept) == 1 and isinstance(kept[0], dict):
            schema.update(kept[0])
            del schema["anyOf"]  # after the merge, as in Open WebUI: a nested anyOf goes too
        else:
            schema["anyOf"] = kept
    if "default" in schema and schema["default"] is None:
        del schema["default"]
    if not {"type", "anyOf", "properties"} & schema.keys():
        schema["type"] = "string"
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for value in properties.values():
            _open_webui_cleanup(value)
    _open_webui_cleanup(schema.get("items"))
