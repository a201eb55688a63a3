"""ReadFrom: the base of the API's responses that are read from a model object, so that each
such shape is defined once, by its schema (toolhub.api.schemas)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import cache
from typing import Any

from ninja import Schema
from pydantic import BaseModel, ModelWrapValidatorHandler, ValidationInfo, model_validator

Reader = tuple[str, Callable[..., Any] | None, bool]


@cache
def _readers(schema: type[ReadFrom]) -> tuple[Reader, ...]:
    """Each field of the schema with its `resolve_<field>` (None: the attribute of that name)
    and whether the resolver takes the context."""
    readers = []
    for name in schema.model_fields:
        resolve = getattr(schema, f"resolve_{name}", None)
        readers.append((name, resolve, resolve is not None and "context" in inspect.signature(resolve).parameters))
    return tuple(readers)


class ReadFrom(Schema):
    """A response read from a model object: each field is its `resolve_<field>(obj)` (with
    `context`, the validation's context, when it takes one) or else the object's attribute of
    the field's name. A dict or a built schema is validated as it is.

    The values are read here, before pydantic sees them, in place of django-ninja's reading
    (this validator has the name of django-ninja's, which it replaces): there, each value is
    read by pydantic, which turns any error while reading (a database gone away) into a
    validation error, so the API would answer 500 instead of 503; and reading into a dict
    first costs less than django-ninja's lookup of each attribute."""

    @model_validator(mode="wrap")
    @classmethod
    def _run_root_validator(cls, values: Any, handler: ModelWrapValidatorHandler[Any], info: ValidationInfo) -> Any:
        if isinstance(values, (dict, BaseModel)):
            return handler(values)
        # A context for this answer, for resolvers that share a read (InvocationOut's events).
        context = info.context if info.context is not None else {}
        read = {}
        for name, resolve, takes_context in _readers(cls):
            if resolve is None:
                read[name] = getattr(values, name)
            elif takes_context:
                read[name] = resolve(values, context)
            else:
                read[name] = resolve(values)
        return handler(read)
