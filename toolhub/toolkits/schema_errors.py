"""Validating values against a stored JSON schema, with messages fit to show next to a field.

`validate` runs `jsonschema` (Draft 2020-12) and files each error under the
top-level property it concerns, so a form can show it next to that field and the API can return
it with `"field": name`. jsonschema's own messages quote the offending value (`'sk-...' is too
long`), which would put secrets in pages, logs and API responses; the messages here are written
from the schema's constraint instead. `toolhub.toolkits.schema_forms` re-exports `validate` and
`ALL_ERRORS`. The messages are in the active language (gettext, with plurals where a count
or limit decides the form).

The schema is untrusted (the toolkit author wrote it): an invalid schema or a reference to a
missing definition becomes an `ALL_ERRORS` message, and remote references are never fetched.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError, best_match
from referencing.exceptions import Unresolvable

from toolhub.vault.secret_fields import secret_fields

__all__ = ["ALL_ERRORS", "choice_key", "is_null_schema", "validate"]

# Errors that belong to no single field (unknown fields, a broken schema) go under this key,
# as in Django forms.
ALL_ERRORS = "__all__"
# One field cannot drown the page: beyond this many messages the rest are summarised.
_MAX_MESSAGES_PER_FIELD = 10


def _not_here(validator, value, instance, schema):
    return iter(())


# Regular expressions from uploaded schemas are not run in the web process: a catastrophic
# `pattern` could hang a request. The sandbox checks the same values again with pydantic, where
# CPU time is capped, and reports a mismatch as the tool's (or the valves') error.
_WebValidator = validators.extend(
    Draft202012Validator, {"pattern": _not_here, "patternProperties": _not_here}
)


def validate(
    schema: Mapping[str, Any] | None,
    values: Any,
    *,
    secret_names: Iterable[str] | None = None,
) -> dict[str, list[str]]:
    """Validate `values` against `schema` with jsonschema (Draft 2020-12).

    Errors are keyed by the top-level field they are about; a message about something inside a
    field starts with where (`x: ...`, `Item 2: ...`). Errors about no known field go under
    `ALL_ERRORS`. Messages are written from the schema's constraints and never quote the value,
    so a secret cannot leak through an error.
    """
    if not isinstance(schema, Mapping):
        return {}
    schema = _with_required_list(schema)
    validator = _validator_for(schema)
    if validator is None:
        return {ALL_ERRORS: [_("The schema for these values is not valid, so they cannot be checked.")]}
    props = schema.get("properties")
    properties = props if isinstance(props, Mapping) else {}
    secrets = set(secret_names) if secret_names is not None else secret_fields(schema)
    found: dict[str, list[str]] = {}
    try:
        for error in validator.iter_errors(values):
            for name, message in _describe(error, properties, secrets):
                _add_message(found, name, message)
    except (Unresolvable, RecursionError):
        _add_message(found, ALL_ERRORS, _("The schema refers to a definition that cannot be found."))
    return _cap(found)


def _validator_for(schema: Mapping[str, Any]) -> Any:
    """The schema's validator, None when the schema itself is invalid.

    A tool's schema is the same on every call, and checking it costs most of a call's
    validation: the answer is kept per schema (by its JSON text, so a changed schema is checked
    anew), each validator built from a copy of its own."""
    try:
        text = json.dumps(schema)
    except (TypeError, ValueError):
        return _new_validator(schema)
    return _cached_validator(text)


@lru_cache(maxsize=256)
def _cached_validator(text: str) -> Any:
    return _new_validator(json.loads(text))


def _new_validator(schema: Mapping[str, Any]) -> Any:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError:
        return None
    return _WebValidator(schema)


def _with_required_list(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """Move RAGFlow-style `required: true` on a property into the object's `required` list.

    In JSON Schema `required` must be a list, so the RAGFlow shape would make the whole schema
    invalid; `build_fields` already reads it, and validation should agree.
    """
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return schema
    flagged = [
        name for name, prop in props.items() if isinstance(prop, Mapping) and isinstance(prop.get("required"), bool)
    ]
    if not flagged:
        return schema
    existing = schema.get("required")
    required = list(existing) if isinstance(existing, list) else []
    cleaned = {}
    for name, prop in props.items():
        if name in flagged:
            if prop["required"] and name not in required:
                required.append(name)
            prop = {key: value for key, value in prop.items() if key != "required"}
        cleaned[name] = prop
    return {**schema, "properties": cleaned, "required": required}


def is_null_schema(branch: Any) -> bool:
    """True for the `None` branch of an `Optional`: `{"type": "null"}` and its spellings."""
    if not isinstance(branch, Mapping):
        return False
    if branch.get("type") == "null":
        return True
    if "const" in branch and branch["const"] is None:
        return True
    return branch.get("enum") == [None]


def choice_key(value: Any) -> str:
    """A schema value as text: strings as they are, anything else as JSON (`1`, `true`)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def _describe(
    error: ValidationError,
    properties: Mapping[str, Any],
    secrets: set[str],
) -> list[tuple[str, str]]:
    path = list(error.absolute_path)
    if not path:
        return _describe_root(error, properties)
    top = path[0]
    if not isinstance(top, str) or top not in properties:
        return [(ALL_ERRORS, f"{_format_path(path)}: {_message(error, secret=True)}")]
    message = _message(error, secret=top in secrets)
    if len(path) > 1:
        message = f"{_format_path(path[1:])}: {message}"
    return [(top, message)]


def _describe_root(error: ValidationError, properties: Mapping[str, Any]) -> list[tuple[str, str]]:
    instance = error.instance
    if error.validator == "required" and isinstance(instance, Mapping):
        wanted = error.validator_value if isinstance(error.validator_value, list) else []
        missing = [name for name in wanted if isinstance(name, str) and name not in instance]
        return [
            (name, _("This field is required."))
            if name in properties
            else (ALL_ERRORS, _("%(name)s is required.") % {"name": name})
            for name in missing
        ]
    if error.validator == "type":
        return [(ALL_ERRORS, _("The values must be an object."))]
    if error.validator in ("additionalProperties", "unevaluatedProperties") and isinstance(instance, Mapping):
        unknown = sorted(str(name) for name in instance if name not in properties)
        if unknown:
            message = ngettext("Unknown field: %(names)s.", "Unknown fields: %(names)s.", len(unknown))
            return [(ALL_ERRORS, message % {"names": ", ".join(unknown)})]
    # Other root-level messages from jsonschema quote the whole instance, secrets included.
    return [(ALL_ERRORS, _("The values do not satisfy the schema's '%(rule)s' rule.") % {"rule": error.validator})]


def _message(error: ValidationError, *, secret: bool) -> str:
    """A message built from the constraint, not the value (jsonschema's own quote the value)."""
    rule = error.validator
    limit = error.validator_value
    if rule in ("anyOf", "oneOf") and error.context:
        # For `Optional[X]` the useful message is why the value is not a valid X.
        relevant = [
            sub
            for sub in error.context
            if not (
                sub.relative_schema_path
                and isinstance(limit, list)
                and isinstance(sub.relative_schema_path[0], int)
                and sub.relative_schema_path[0] < len(limit)
                and is_null_schema(limit[sub.relative_schema_path[0]])
            )
        ]
        branches = [branch for branch in limit if not is_null_schema(branch)] if isinstance(limit, list) else []
        if relevant and len(branches) == 1:
            inner = best_match(relevant)
            message = _message(inner, secret=secret)
            inner_path = list(inner.relative_path)
            return f"{_format_path(inner_path)}: {message}" if inner_path else message
    if rule == "required":
        wanted = limit if isinstance(limit, list) else []
        instance = error.instance if isinstance(error.instance, Mapping) else {}
        missing = [str(name) for name in wanted if name not in instance]
        message = ngettext("Missing required key: %(names)s.", "Missing required keys: %(names)s.", len(missing))
        return message % {"names": ", ".join(missing)}
    if rule == "type":
        return _type_message(limit)
    if rule == "enum" and isinstance(limit, list):
        shown = ", ".join(choice_key(item) for item in limit[:10])
        more = ", …" if len(limit) > 10 else ""
        return _("Must be one of: %(choices)s.") % {"choices": shown + more}
    if rule == "const":
        return _("Must be %(value)s.") % {"value": choice_key(limit)}
    if rule in _LIMITS:
        return _LIMITS[rule]() % {"limit": choice_key(limit)}
    if rule in _COUNTS and isinstance(limit, int):
        return _COUNTS[rule](limit) % {"limit": limit}
    if rule == "pattern":
        return _("Does not have the expected format.")
    if rule == "uniqueItems":
        return _("Must not contain duplicates.")
    if rule in ("additionalProperties", "unevaluatedProperties"):
        return _("Contains keys that are not allowed.")
    if secret:
        return _("Invalid value.")
    return error.message


# The message of each bound, made when needed: the language is the request's.
_LIMITS = {
    "minimum": lambda: _("Must be at least %(limit)s."),
    "maximum": lambda: _("Must be at most %(limit)s."),
    "exclusiveMinimum": lambda: _("Must be greater than %(limit)s."),
    "exclusiveMaximum": lambda: _("Must be less than %(limit)s."),
    "multipleOf": lambda: _("Must be a multiple of %(limit)s."),
}
# Bounds on a count: the limit decides the plural form.
_COUNTS = {
    "minLength": lambda n: ngettext(
        "Must be at least %(limit)s character long.", "Must be at least %(limit)s characters long.", n
    ),
    "maxLength": lambda n: ngettext(
        "Must be at most %(limit)s character long.", "Must be at most %(limit)s characters long.", n
    ),
    "minItems": lambda n: ngettext("Must have at least %(limit)s item.", "Must have at least %(limit)s items.", n),
    "maxItems": lambda n: ngettext("Must have at most %(limit)s item.", "Must have at most %(limit)s items.", n),
    "minProperties": lambda n: ngettext("Must have at least %(limit)s key.", "Must have at least %(limit)s keys.", n),
    "maxProperties": lambda n: ngettext("Must have at most %(limit)s key.", "Must have at most %(limit)s keys.", n),
}


def _type_message(expected: Any) -> str:
    names = [str(name) for name in (expected if isinstance(expected, list) else [expected])]
    one = {
        "string": lambda: _("Must be text."),
        "integer": lambda: _("Must be a whole number."),
        "number": lambda: _("Must be a number."),
        "boolean": lambda: _("Must be true or false."),
        "array": lambda: _("Must be a list."),
        "object": lambda: _("Must be an object."),
        "null": lambda: _("Must be empty."),
    }
    if len(names) == 1 and names[0] in one:
        return one[names[0]]()
    return _("Must be of one of these JSON types: %(types)s.") % {"types": ", ".join(names)}


def _format_path(parts: list[Any]) -> str:
    if len(parts) == 1 and isinstance(parts[0], int):
        return _("Item %(number)s") % {"number": parts[0] + 1}
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _add_message(found: dict[str, list[str]], name: str, message: str) -> None:
    messages = found.setdefault(name, [])
    if message not in messages:
        messages.append(message)


def _cap(found: dict[str, list[str]]) -> dict[str, list[str]]:
    capped = {}
    for name, messages in found.items():
        if len(messages) > _MAX_MESSAGES_PER_FIELD:
            extra = len(messages) - _MAX_MESSAGES_PER_FIELD
            more = ngettext("…and %(n)s more problem.", "…and %(n)s more problems.", extra) % {"n": extra}
            messages = [*messages[:_MAX_MESSAGES_PER_FIELD], more]
        capped[name] = messages
    return capped
