"""Load a toolkit file, tell which kind it is, and introspect it."""

from __future__ import annotations

import os
import sys
import traceback
import types
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from . import agent, specs

# The toolkit runs as this module, so that pydantic, pickle and typing can find it.
MODULE_NAME = "toolhub_toolkit"
# RAGFlow plugin files import their base class from here; the shim provides it.
RAGFLOW_MODULE = "agent.plugin.llm_tool_plugin"
# Agent strategies import their base class from here (toolhub/runtime/agent.py).
AGENT_MODULE = "toolhub_agent"
SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim")


class InvalidToolkit(Exception):
    """The file loads but is neither an Open WebUI toolkit nor a RAGFlow plugin."""


class OpenWebUIInternals(ImportError):
    """The toolkit imports a module of Open WebUI itself, which exists only inside Open WebUI."""


OPEN_WEBUI_PACKAGE = "open_webui"


def _open_webui_message(exc: ModuleNotFoundError, source_path: str) -> str:
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == source_path]
    where = ""
    if frames and frames[-1].lineno:
        statement = (frames[-1].line or "").strip()
        where = f" on line {frames[-1].lineno}" + (f" (`{statement[:200]}`)" if statement else "")
    return (
        f"the toolkit imports `{exc.name}`{where}, a package of Open WebUI itself. ToolHub runs toolkits"
        " outside Open WebUI and cannot provide Open WebUI's internals: remove the import, or make it"
        " optional (in a try/except ImportError block)."
    )


@dataclass
class Toolkit:
    kind: str  # "openwebui", "ragflow" or "agent_strategy"
    module: types.ModuleType
    cls: type  # the `Tools` class, the LLMToolPlugin subclass, or the AgentStrategy subclass

    def model(self, name: str) -> type[BaseModel] | None:
        """The nested `Valves` or `UserValves` model of a `Tools` class, if any."""
        value = getattr(self.cls, name, None) if self.kind == "openwebui" else None
        return value if isinstance(value, type) and issubclass(value, BaseModel) else None


def load(source_path: str) -> Toolkit:
    # Appended, not prepended: the shim's `agent` package must not shadow a real
    # distribution of that name that a toolkit installed for its own use.
    if SHIM_DIR not in sys.path:
        sys.path.append(SHIM_DIR)
    sys.modules.setdefault(AGENT_MODULE, agent)
    with open(source_path, "rb") as file:
        source = file.read()
    module = types.ModuleType(MODULE_NAME)
    module.__file__ = source_path
    sys.modules[MODULE_NAME] = module
    try:
        # Compiled with its real path, so tracebacks show the toolkit's own lines.
        exec(compile(source, source_path, "exec"), module.__dict__)  # noqa: S102 - in the sandbox.
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != OPEN_WEBUI_PACKAGE:
            raise
        raise OpenWebUIInternals(_open_webui_message(exc, source_path)) from exc
    kind, cls = _find_class(module)
    return Toolkit(kind=kind, module=module, cls=cls)


def _find_class(module: types.ModuleType) -> tuple[str, type]:
    tools = module.__dict__.get("Tools")
    if isinstance(tools, type):
        return "openwebui", tools
    shim = sys.modules.get(RAGFLOW_MODULE)
    plugins = [
        value
        for value in module.__dict__.values()
        if shim is not None
        and isinstance(value, type)
        and issubclass(value, shim.LLMToolPlugin)
        and value.__module__ == module.__name__
    ]
    if len(plugins) == 1:
        if not getattr(plugins[0], "_version_", None):
            raise InvalidToolkit(f"RAGFlow plugin {plugins[0].__name__} has no _version_")
        return "ragflow", plugins[0]
    if plugins:
        names = ", ".join(plugin.__name__ for plugin in plugins)
        raise InvalidToolkit(f"a RAGFlow plugin file must define one LLMToolPlugin, not {names}")
    strategy = agent.find_strategy(module)
    if strategy is not None:
        return "agent_strategy", strategy
    raise InvalidToolkit("no `class Tools`, no LLMToolPlugin subclass and no AgentStrategy subclass at module level")


def introspect(source_path: str) -> dict[str, Any]:
    toolkit = load(source_path)
    if toolkit.kind == "agent_strategy":
        return {"kind": "introspection", "kind_of_toolkit": "agent_strategy", "tools": [], "valves_schema": None,
                "user_valves_schema": None, "ragflow": None}
    if toolkit.kind == "ragflow":
        metadata = toolkit.cls.get_metadata()  # type: ignore[attr-defined]
        return {
            "kind": "introspection",
            "kind_of_toolkit": "ragflow",
            "tools": [ragflow_spec(metadata)],
            "valves_schema": None,
            "user_valves_schema": None,
            "ragflow": {**metadata, "version": str(toolkit.cls._version_)},  # type: ignore[attr-defined]
        }
    functions = specs.tool_functions(toolkit.cls())
    valves, user_valves = toolkit.model("Valves"), toolkit.model("UserValves")
    return {
        "kind": "introspection",
        "kind_of_toolkit": "openwebui",
        "tools": [specs.tool_spec(name, function) for name, function in functions.items()],
        "valves_schema": valves.model_json_schema() if valves else None,
        "user_valves_schema": user_valves.model_json_schema() if user_valves else None,
        "ragflow": None,
    }


def ragflow_spec(metadata: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI function spec RAGFlow itself derives from a plugin's metadata.

    A parameter without `required` is optional here; RAGFlow's converter reads `p["required"]`
    and fails on such a plugin (see docs/compatibility.md). The oldest RAGFlow plugins give
    `parameters` as a JSON schema (`{"type": "object", "properties": ...}`), which RAGFlow
    then passed on as it was, and so does this.
    """
    parameters = metadata.get("parameters") or {}
    if parameters.get("type") == "object" and isinstance(parameters.get("properties"), dict):
        return {
            "type": "function",
            "function": {
                "name": metadata["name"],
                "description": metadata.get("description", ""),
                "parameters": parameters,
            },
        }
    return {
        "type": "function",
        "function": {
            "name": metadata["name"],
            "description": metadata.get("description", ""),
            "parameters": {
                "type": "object",
                "properties": {
                    name: {"type": param.get("type"), "description": param.get("description", "")}
                    for name, param in parameters.items()
                },
                "required": [name for name, param in parameters.items() if param.get("required")],
            },
        },
    }
