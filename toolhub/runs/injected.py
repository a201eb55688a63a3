"""Which of Open WebUI's injected chat inputs (`__messages__`, `__files__`) each tool of a
revision takes, read from its source without running it, so the playground offers those
fields only where they mean something."""

from __future__ import annotations

import ast
from threading import Lock

CHAT_INPUTS = ("__messages__", "__files__")
# Revisions are immutable: their sha256 keys the answer. Bounded, so a long-running server
# does not keep every revision it ever showed.
_CACHE: dict[str, dict[str, frozenset[str]]] = {}
_CACHE_MAX = 256
_LOCK = Lock()


def _parse(source: str) -> dict[str, frozenset[str]]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return {}
    taken: dict[str, frozenset[str]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.ClassDef) and node.name == "Tools"):
            continue
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and not item.name.startswith("_"):
                args = item.args
                names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
                # A tool with **kwargs is handed every injected input.
                taken[item.name] = frozenset(CHAT_INPUTS) if args.kwarg else frozenset(n for n in CHAT_INPUTS if n in names)
    return taken


def chat_inputs(revision) -> dict[str, frozenset[str]]:
    """Tool name → the chat inputs it takes (a tool not found takes none)."""
    if revision is None:
        return {}
    with _LOCK:
        found = _CACHE.get(revision.sha256)
    if found is None:
        found = _parse(revision.source)
        with _LOCK:
            if len(_CACHE) >= _CACHE_MAX:
                _CACHE.clear()
            _CACHE[revision.sha256] = found
    return found
