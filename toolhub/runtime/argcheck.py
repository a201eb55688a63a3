"""Checking a call's arguments without building a pydantic model, for tools whose parameters
all have simple types.

`specs.arguments_model` builds a pydantic model of the tool's signature for every call. In a
warm sandbox's call process, a fresh fork, that took ~1.8 ms and some 550 page faults (its
copy-on-write pages) for a one-parameter tool: most of a trivial call's time in the sandbox.
Most tools take only strings, numbers, booleans, lists of them and optional ones, and for
those the same check is a pydantic-core validator of a typed dict whose fields have exactly
the schemas pydantic makes for those types: the same coercions, the same error types,
messages and locations (the parameter's name), as `tests/test_argcheck.py` compares.

The schemas are made once, by the fork server before its first call (`prepare`), from this
module's own fixed list of types, never from a toolkit; a call's process only looks its
parameters' annotations up in them. Without `prepare` (a cold sandbox, one process per call)
nothing is looked up and every call builds the model as before, which is cheaper there than
making all the schemas.
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any

_PLAIN: tuple[type, ...] = (str, int, float, bool)
# (kind, plain type) -> the core schema pydantic makes for that annotation; None until prepared.
_SCHEMAS: dict[tuple[str, Any], Any] | None = None


def prepare() -> None:
    global _SCHEMAS
    from pydantic import TypeAdapter

    hints: dict[tuple[str, Any], Any] = {("any", None): Any}
    for plain in _PLAIN:
        hints[("plain", plain)] = plain
        hints[("optional", plain)] = typing.Optional[plain]  # noqa: UP045 - the same schema as `plain | None`
        hints[("list", plain)] = list[plain]  # type: ignore[valid-type]
        hints[("optional list", plain)] = typing.Optional[list[plain]]  # type: ignore[valid-type]  # noqa: UP045
    _SCHEMAS = {key: TypeAdapter(hint).core_schema for key, hint in hints.items()}


def _key(hint: Any) -> tuple[str, Any] | None:
    """The annotation as one of the prepared kinds, or None. Plain types are compared by
    identity (a class of the toolkit's named `str` is not `str`)."""
    if hint is Any:
        return ("any", None)
    if type(hint) is type:
        return next((("plain", plain) for plain in _PLAIN if hint is plain), None)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list and len(args) == 1:
        return next((("list", plain) for plain in _PLAIN if args[0] is plain), None)
    if origin in (typing.Union, types.UnionType) and len(args) == 2 and type(None) in args:
        (other,) = [arg for arg in args if arg is not type(None)]
        inner = _key(other)
        if inner is not None and inner[0] in ("plain", "list"):
            return ("optional" if inner[0] == "plain" else "optional list", inner[1])
    return None


def validator(parameters: list[tuple[inspect.Parameter, Any]]) -> tuple[Any, dict[str, Any]] | None:
    """For the tool's (parameter, type hint) pairs a caller may pass (specs.call_parameters): a
    validator of their arguments (a dict by parameter name; what it returns lacks those not
    given) and the defaults of those that have one; None unless prepared and every parameter
    is simple and has a plain default (no `Field`)."""
    if _SCHEMAS is None:
        return None
    from pydantic.fields import FieldInfo
    from pydantic_core import SchemaValidator, core_schema

    fields: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    for param, hint in parameters:
        if isinstance(param.default, FieldInfo):
            return None
        key = _key(hint)
        if key is None:
            return None
        required = param.default is param.empty
        if not required:
            defaults[param.name] = param.default
        fields[param.name] = core_schema.typed_dict_field(_SCHEMAS[key], required=required)
    return SchemaValidator(core_schema.typed_dict_schema(fields)), defaults
