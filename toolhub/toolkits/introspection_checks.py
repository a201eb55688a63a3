"""Checks of what a toolkit's introspection reports, before any of it is stored.

Introspection runs the toolkit's own code in the sandbox, and that code can reach the
runtime's protocol and write any introspection message it likes. So the worker treats the
message as hostile input, like an upload: the tool names must be ones the static checks found
in the source (`ParsedToolkit.tool_names`, stored as `Revision.tool_names`), each a plain
identifier; every schema is bounded in size, depth and enum length; and every string must be
encodable. Anything else fails the revision with `IntrospectionRefused`, whose message says
what was wrong. No Django imports.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_TOOLS = 64
MAX_NAME_LENGTH = 64
MAX_DESCRIPTION_CHARS = 8 * 1024
# Each schema (a tool's parameters, Valves, UserValves, RAGFlow metadata) as compact JSON.
MAX_SCHEMA_BYTES = 64 * 1024
MAX_TOTAL_BYTES = 512 * 1024
MAX_DEPTH = 16
MAX_ENUM_ITEMS = 256
MAX_KEYS = 512

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_KINDS = ("openwebui", "ragflow", "agent_strategy")


class IntrospectionRefused(ValueError):
    """The introspection message is not one the toolkit's source can honestly produce."""


def check_introspection(message: Any, *, kind: str, tool_names: list[str]) -> None:
    """Raise IntrospectionRefused unless ``message`` is a well-formed, bounded introspection
    of a toolkit of ``kind`` whose source defines ``tool_names``."""
    if not isinstance(message, dict):
        raise IntrospectionRefused("the introspection is not an object")
    reported_kind = message.get("kind_of_toolkit")
    if reported_kind not in _KINDS or reported_kind != kind:
        raise IntrospectionRefused(f"it reports a toolkit of kind {_shown(reported_kind)}, but the source is {kind}")
    tools = message.get("tools")
    if not isinstance(tools, list):
        raise IntrospectionRefused("the list of tools is missing")
    if len(tools) > MAX_TOOLS:
        raise IntrospectionRefused(f"it reports {len(tools)} tools; at most {MAX_TOOLS} are allowed")
    seen: set[str] = set()
    total = 0
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or tool.get("type") != "function":
            raise IntrospectionRefused(f"tool #{index + 1} is not a function description")
        name = function.get("name")
        if not isinstance(name, str) or len(name) > MAX_NAME_LENGTH or not _IDENTIFIER.match(name):
            raise IntrospectionRefused(
                f"tool #{index + 1} has the name {_shown(name)}, which is not a valid identifier"
                f" (letters, digits and underscores, at most {MAX_NAME_LENGTH} characters)"
            )
        if name not in tool_names:
            raise IntrospectionRefused(f"it reports a tool {name!r} that the source does not define")
        if name in seen:
            raise IntrospectionRefused(f"it reports the tool {name!r} twice")
        seen.add(name)
        description = function.get("description", "")
        if not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS:
            raise IntrospectionRefused(
                f"the description of tool {name!r} is not text of at most {MAX_DESCRIPTION_CHARS} characters"
            )
        parameters = function.get("parameters")
        if not isinstance(parameters, dict):
            raise IntrospectionRefused(f"the parameters of tool {name!r} are not a JSON schema object")
        total += _check_tree(tool, f"the description of tool {name!r}")
    for key, what in (("valves_schema", "the Valves schema"), ("user_valves_schema", "the UserValves schema"), ("ragflow", "the RAGFlow metadata")):
        value = message.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise IntrospectionRefused(f"{what} is not an object")
        total += _check_tree(value, what)
    if total > MAX_TOTAL_BYTES:
        raise IntrospectionRefused(f"it is {total} bytes long; at most {MAX_TOTAL_BYTES} are allowed")


def _check_tree(value: Any, what: str) -> int:
    """Bound one schema's depth, enums and key count; return its size as compact JSON."""
    keys = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise IntrospectionRefused(f"{what} is nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, dict):
            keys += len(node)
            if keys > MAX_KEYS:
                raise IntrospectionRefused(f"{what} has more than {MAX_KEYS} keys")
            enum = node.get("enum")
            if isinstance(enum, list) and len(enum) > MAX_ENUM_ITEMS:
                raise IntrospectionRefused(f"an enum in {what} has {len(enum)} values; at most {MAX_ENUM_ITEMS} are allowed")
            for key, item in node.items():
                if not isinstance(key, str):
                    raise IntrospectionRefused(f"{what} has a key that is not text")
                stack.append((key, depth + 1))
                stack.append((item, depth + 1))
        elif isinstance(node, list):
            if len(node) > MAX_KEYS:
                raise IntrospectionRefused(f"{what} has a list of more than {MAX_KEYS} items")
            stack.extend((item, depth + 1) for item in node)
        elif isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                raise IntrospectionRefused(f"{what} contains text that cannot be encoded (a lone surrogate)") from None
        elif node is not None and not isinstance(node, bool | int | float):
            raise IntrospectionRefused(f"{what} contains a value that is not JSON")
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
    if size > MAX_SCHEMA_BYTES:
        raise IntrospectionRefused(f"{what} is {size} bytes long; at most {MAX_SCHEMA_BYTES} are allowed")
    return size


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
