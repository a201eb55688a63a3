"""HTML forms generated from JSON schemas: Valves, UserValves and tool parameters.

The schemas come from pydantic's `model_json_schema()` (valves) or from Open WebUI-style tool
specs (`{"type": "object", "properties": {...}, "required": [...]}`), both produced by
introspection inside the sandbox. The web process never imports the toolkit: it only reads the
stored schema, so everything here treats the schema as untrusted data written by a hostile author.

Three steps, each usable alone:

- `build_fields(schema, values)` turns the top-level properties into `FormField` descriptors that
  `templates/includes/schema_field.html` renders;
- `parse_submission(schema, data)` turns submitted form data back into typed JSON values, with a
  per-field error where a value cannot even be read (bad number, bad JSON, unknown choice), in
  the active language;
- `validate(schema, values)` checks the values with `jsonschema` (Draft 2020-12) and returns the
  errors per top-level field, with messages that never quote a submitted value (it lives in
  `toolhub.toolkits.schema_errors` and is re-exported here).

Widgets by schema construct: string -> text; integer/number -> number input with bounds from
`minimum`/`maximum`/`exclusiveMinimum`/`exclusiveMaximum`; boolean -> checkbox (unchecked means
false; `Optional[bool]` -> a yes/no/empty select); `enum`/`const` -> select; array of enum ->
multiselect; Open WebUI `input: {type: select|multiselect, options: [...]}` with a static list of
options -> select/multiselect; secret fields (`toolhub.vault.secret_fields.secret_fields`) -> password
input that never shows the value; everything else (nested objects, free lists, dicts, unions, no
`type` at all) -> JSON textarea. `$ref`/`$defs`, single-element `allOf` and `anyOf`/`oneOf` with a
null branch (`Optional[X]`) are unwrapped first.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext as _

from toolhub.toolkits.schema_errors import ALL_ERRORS, choice_key, is_null_schema, validate
from toolhub.vault.secret_fields import MASK, follow_local_ref, is_value_set, secret_fields, split_words

__all__ = [
    "ALL_ERRORS",
    "CHECKBOX",
    "CLEAR_SUFFIX",
    "INTEGER",
    "JSON",
    "MULTISELECT",
    "NUMBER",
    "PASSWORD",
    "SELECT",
    "TEXT",
    "FormField",
    "Option",
    "build_fields",
    "clear_requests",
    "display_title",
    "parse_submission",
    "validate",
]

TEXT = "text"
NUMBER = "number"
INTEGER = "integer"
CHECKBOX = "checkbox"
SELECT = "select"
MULTISELECT = "multiselect"
PASSWORD = "password"
JSON = "json"

# A secret's "clear" checkbox is submitted as `<prefix><name>__clear`.
CLEAR_SUFFIX = "__clear"

# Nested schemas deeper than this are not unwrapped further; a hostile schema could otherwise
# chain references forever.
_MAX_UNWRAP = 32

_TRUE_WORDS = frozenset({"on", "true", "1", "yes"})
_FALSE_WORDS = frozenset({"", "off", "false", "0", "no"})
_INTEGER_TEXT = re.compile(r"[+-]?\d+")
_NUMBER_TEXT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_ID_SAFE = re.compile(r"[^A-Za-z0-9_-]")

Resolver = Callable[[str], str]


def _identity(text: str) -> str:
    return text


@dataclass
class Option:
    """One `<option>`: `value` is the submitted string, `label` the text shown."""

    value: str
    label: str
    selected: bool = False


@dataclass
class FormField:
    """Everything the template needs to render one top-level property.

    `value` is display-ready: a string for text, number, JSON and password inputs (`""` for
    passwords, except a secret typed in a rejected submission, see `build_fields`), a bool for checkboxes, the selected option value (or list of them) for
    selects. `slug` is an id-safe form of `name`; the template builds ids from it.
    """

    name: str
    kind: str
    label: str
    help: str
    required: bool
    default: Any
    options: list[Option]
    minimum: int | float | None
    maximum: int | float | None
    step: str | None
    secret: bool
    is_set: bool
    value: Any
    nullable: bool = False
    slug: str = ""
    errors: list[str] = field(default_factory=list)
    # A secret typed in a rejected submission, shown back in its input (see `build_fields`).
    kept: bool = False


@dataclass
class _Spec:
    """What parsing and rendering both need to know about one property."""

    name: str
    schema: dict[str, Any]
    kind: str
    json_type: str | None
    nullable: bool
    required: bool
    secret: bool
    choices: list[Any] = field(default_factory=list)
    choice_labels: list[str] = field(default_factory=list)
    # Open WebUI allows a multiselect on a `str` field; its value is then comma-separated text.
    joined: bool = False


class _FieldError(ValueError):
    """A submitted value that cannot be read; the message never contains the value."""


# A sentinel for "leave this field out of the values": the default applies, or `required` fails.
_OMIT = object()


def display_title(prop: Mapping[str, Any] | None, name: str) -> str:
    """The title to show for a property: its `title`, or its name made readable.

    `api_key` -> "Api key", `accessToken` -> "Access token", `userID` -> "User ID",
    `OPENAI_API_KEY` -> "Openai api key".
    """
    if isinstance(prop, Mapping):
        title = prop.get("title")
        if isinstance(title, str) and title.strip():
            return title
    words = split_words(name)
    if not words:
        return name
    shouting = name.upper() == name
    readable = [word if (len(word) > 1 and word.isupper() and not shouting) else word.lower() for word in words]
    text = " ".join(readable)
    return text[0].upper() + text[1:]


def build_fields(
    schema: Mapping[str, Any] | None,
    values: Mapping[str, Any] | None = None,
    *,
    secret_names: Iterable[str] | None = None,
    is_set: Mapping[str, bool] | None = None,
    resolve: Resolver = _identity,
    errors: Mapping[str, list[str]] | None = None,
    data: Any = None,
    prefix: str = "",
    keep_typed_secrets: bool = False,
) -> list[FormField]:
    """Describe one form field per top-level property of `schema`, in schema order.

    - `values`: the current values (stored, or parsed from a submission). Secrets may be given
      masked or not: their value is never put in a field.
    - `secret_names`: defaults to `secret_fields(schema)`.
    - `is_set`: whether each secret has a stored value (the second result of
      `secrets.mask_values`); defaults to looking at `values`.
    - `resolve`: applied to every display string (labels, help, option labels), e.g. to resolve
      `$t:` translation keys.
    - `errors`: per-field messages from `parse_submission`/`validate`, attached to the fields.
    - `data` and `prefix`: when re-showing a rejected submission, pass the raw form data so what
      the person typed (say, JSON with a syntax error) is shown back instead of the old value.
    - `keep_typed_secrets`: with `data`, a secret typed in that rejected submission is put back
      in its (password) input, so it need not be typed again; only for the response to that
      submission, which nothing caches or logs. `FormField.kept` says so.
    """
    values = values or {}
    errors = errors or {}
    specs = _specs(schema, secret_names)
    fields = []
    for spec in specs:
        fields.append(
            _build_field(
                spec,
                values,
                is_set=is_set,
                resolve=resolve,
                errors=list(errors.get(spec.name, [])),
                data=data,
                prefix=prefix,
            )
        )
        if keep_typed_secrets and data is not None and spec.secret:
            fields[-1].value = _typed_secret(spec, data, prefix)
            fields[-1].kept = bool(fields[-1].value)
    return fields


def _typed_secret(spec: _Spec, data: Any, prefix: str) -> str:
    """What was typed into a secret's input, unless its "clear" box was ticked."""
    if any(_truthy(item) for item in _getlist(data, prefix + spec.name + CLEAR_SUFFIX)):
        return ""
    typed = _getlist(data, prefix + spec.name)
    return typed[-1] if typed and typed[-1] != MASK else ""


def parse_submission(
    schema: Mapping[str, Any] | None,
    data: Any,
    *,
    prefix: str = "",
    secret_names: Iterable[str] | None = None,
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Read submitted form data (a QueryDict or a mapping of name -> list of strings).

    Returns the typed values and the errors of values that could not be read. What an empty
    input means:

    - checkbox: false; multiselect: an empty list (browsers send nothing for either);
    - an `Optional` field: `None`;
    - a secret: left out, so `secrets.merge_submitted` keeps the stored value;
    - a required field: left out, so validation reports it as required;
    - an optional text field: the empty string; any other optional field: left out (its default
      applies).

    A field missing from `data` altogether is left out (except checkboxes and multiselects, which
    cannot be told apart from unticked ones).
    """
    values: dict[str, Any] = {}
    problems: dict[str, list[str]] = {}
    for spec in _specs(schema, secret_names):
        raw = _getlist(data, prefix + spec.name)
        try:
            parsed = _parse_one(spec, raw)
        except _FieldError as error:
            problems[spec.name] = [str(error)]
            continue
        if parsed is not _OMIT:
            values[spec.name] = parsed
    return values, problems


def clear_requests(
    schema: Mapping[str, Any] | None,
    data: Any,
    *,
    prefix: str = "",
    secret_names: Iterable[str] | None = None,
) -> set[str]:
    """The secrets whose "clear" checkbox was ticked, for `secrets.merge_submitted(clear=...)`."""
    names = set(secret_names) if secret_names is not None else secret_fields(schema)
    return {name for name in names if any(_truthy(item) for item in _getlist(data, prefix + name + CLEAR_SUFFIX))}


# Specs: resolving and classifying properties


def _properties(schema: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    if not isinstance(schema, Mapping):
        return {}
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return {}
    return {name: prop for name, prop in props.items() if isinstance(name, str) and isinstance(prop, Mapping)}


def _specs(schema: Mapping[str, Any] | None, secret_names: Iterable[str] | None) -> list[_Spec]:
    if not isinstance(schema, Mapping):
        return []
    secrets = set(secret_names) if secret_names is not None else secret_fields(schema)
    required_list = schema.get("required")
    required = set(required_list) if isinstance(required_list, list) else set()
    specs = []
    for name, prop in _properties(schema).items():
        flat, nullable = _flatten(prop, schema)
        # RAGFlow-style parameters mark `required: true` on the property itself.
        is_required = name in required or prop.get("required") is True
        specs.append(_classify(name, flat, nullable, is_required, name in secrets, schema))
    return specs


def _flatten(node: Mapping[str, Any], root: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """Unwrap `$ref`, single-element `allOf` and `Optional` into one schema dict.

    Returns the merged schema and whether `null` is allowed. Keys written next to a wrapper (the
    property's own title, description, default) win over the wrapped schema's, and the `title`
    of a `$defs` entry is dropped: it names the type (`Color`), not the field.
    """
    current: dict[str, Any] = dict(node)
    nullable = False
    seen_refs: set[str] = set()
    for _step in range(_MAX_UNWRAP):
        ref = current.get("$ref")
        if isinstance(ref, str):
            siblings = {key: value for key, value in current.items() if key != "$ref"}
            target = follow_local_ref(ref, root) if ref not in seen_refs else None
            seen_refs.add(ref)
            if target is None:
                current = siblings
                break
            base = {key: value for key, value in target.items() if key != "title"}
            current = {**base, **siblings}
            continue
        all_of = current.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], Mapping):
            siblings = {key: value for key, value in current.items() if key != "allOf"}
            current = {**all_of[0], **siblings}
            continue
        unwrapped = False
        for combinator in ("anyOf", "oneOf"):
            branches = current.get(combinator)
            if not isinstance(branches, list):
                continue
            kept = [branch for branch in branches if not is_null_schema(branch)]
            if len(kept) < len(branches):
                nullable = True
            siblings = {key: value for key, value in current.items() if key != combinator}
            if len(kept) == 1 and isinstance(kept[0], Mapping):
                current = {**kept[0], **siblings}
                unwrapped = True
            elif len(kept) < len(branches):
                current = {**siblings, combinator: kept}
            break
        if unwrapped:
            continue
        break
    declared = current.get("type")
    if isinstance(declared, list):
        kept_types = [item for item in declared if item != "null"]
        if len(kept_types) < len(declared):
            nullable = True
        if len(kept_types) == 1:
            current["type"] = kept_types[0]
        else:
            current["type"] = kept_types
    enum = current.get("enum")
    if isinstance(enum, list) and None in enum:
        nullable = True
        current["enum"] = [item for item in enum if item is not None]
    return current, nullable


def _json_type(schema: Mapping[str, Any]) -> str | None:
    declared = schema.get("type")
    return declared if isinstance(declared, str) else None


def _classify(
    name: str,
    flat: dict[str, Any],
    nullable: bool,
    required: bool,
    secret: bool,
    root: Mapping[str, Any],
) -> _Spec:
    json_type = _json_type(flat)
    spec = _Spec(
        name=name,
        schema=flat,
        kind=JSON,
        json_type=json_type,
        nullable=nullable,
        required=required,
        secret=secret,
    )
    hint = flat.get("input")
    hint_type = hint.get("type") if isinstance(hint, Mapping) else None
    hint_options = hint.get("options") if isinstance(hint, Mapping) else None
    if secret:
        spec.kind = PASSWORD
        return spec
    # Open WebUI also allows `options` to name a method that lists them at run time; calling it
    # would mean importing the toolkit, so only a literal list is used and the field otherwise
    # falls back to the widget of its type.
    if hint_type in (SELECT, MULTISELECT) and isinstance(hint_options, list) and hint_options:
        spec.choices, spec.choice_labels = _hint_choices(hint_options)
        if hint_type == SELECT:
            spec.kind = SELECT
        else:
            spec.kind = MULTISELECT
            spec.joined = json_type == "string"
        if spec.choices:
            return spec
    enum = _enum_of(flat)
    if enum is not None:
        spec.kind = SELECT
        spec.choices = enum
        spec.choice_labels = [choice_key(item) for item in enum]
        return spec
    if json_type == "array":
        items = flat.get("items")
        if isinstance(items, Mapping):
            item_schema, _nullable = _flatten(items, root)
            item_enum = _enum_of(item_schema)
            if item_enum is not None:
                spec.kind = MULTISELECT
                spec.choices = item_enum
                spec.choice_labels = [choice_key(item) for item in item_enum]
                return spec
        spec.kind = JSON
        return spec
    if json_type == "boolean":
        if nullable:
            spec.kind = SELECT
            spec.choices = [True, False]
            spec.choice_labels = [_("Yes"), _("No")]
        else:
            spec.kind = CHECKBOX
        return spec
    spec.kind = {"string": TEXT, "integer": INTEGER, "number": NUMBER}.get(json_type or "", JSON)
    return spec


def _enum_of(schema: Mapping[str, Any]) -> list[Any] | None:
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return [item for item in enum if item is not None] or None
    if "const" in schema and schema["const"] is not None:
        return [schema["const"]]
    return None


def _hint_choices(options: list[Any]) -> tuple[list[Any], list[str]]:
    """Read Open WebUI's static options: plain values or `{"value": ..., "label": ...}`."""
    choices: list[Any] = []
    labels: list[str] = []
    for option in options:
        if isinstance(option, Mapping):
            if "value" not in option:
                continue
            value = option["value"]
            label = option.get("label")
            labels.append(label if isinstance(label, str) else choice_key(value))
        else:
            value = option
            labels.append(choice_key(value))
        choices.append(value)
    return choices, labels


def _build_field(
    spec: _Spec,
    values: Mapping[str, Any],
    *,
    is_set: Mapping[str, bool] | None,
    resolve: Resolver,
    errors: list[str],
    data: Any,
    prefix: str,
) -> FormField:
    flat = spec.schema
    description = flat.get("description")
    has_value = spec.name in values
    current = values[spec.name] if has_value else flat.get("default")
    has_current = has_value or "default" in flat
    if spec.secret:
        secret_set = (
            bool(is_set.get(spec.name)) if is_set is not None else (has_value and is_value_set(values[spec.name]))
        )
    else:
        secret_set = False
    minimum, maximum = _bounds(flat, spec.json_type)
    form_field = FormField(
        name=spec.name,
        kind=spec.kind,
        label=resolve(display_title(flat, spec.name)),
        help=resolve(description) if isinstance(description, str) else "",
        required=spec.required,
        # A secret's default may itself be a credential shipped in the code.
        default=None if spec.secret else flat.get("default"),
        options=[],
        minimum=None if spec.secret else minimum,
        maximum=None if spec.secret else maximum,
        step=None if spec.secret else _step(flat, spec.kind),
        secret=spec.secret,
        is_set=secret_set,
        value="",
        nullable=spec.nullable,
        slug=_slug(spec.name),
        errors=errors,
    )
    if spec.secret:
        return form_field
    if data is not None:
        raw = _getlist(data, prefix + spec.name)
        form_field.value = _raw_display(spec, raw)
    else:
        form_field.value = _display(spec, current, has_current)
    if spec.kind in (SELECT, MULTISELECT):
        form_field.options = _options(spec, form_field.value, resolve)
    return form_field


def _display(spec: _Spec, value: Any, has_value: bool) -> Any:
    """Turn a typed value into what the widget shows."""
    kind = spec.kind
    if kind == CHECKBOX:
        return value is True
    if kind == MULTISELECT:
        if spec.joined and isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        if isinstance(value, list):
            return [choice_key(item) for item in value]
        return []
    if not has_value or value is None:
        return ""
    if kind == SELECT:
        return choice_key(value)
    if kind == TEXT:
        return value if isinstance(value, str) else choice_key(value)
    if kind in (INTEGER, NUMBER):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return choice_key(value)
        return repr(value) if isinstance(value, float) else str(value)
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)
    except (TypeError, ValueError):
        return ""


def _raw_display(spec: _Spec, raw: list[str]) -> Any:
    """What the person submitted, shown back as typed."""
    if spec.kind == CHECKBOX:
        return any(_truthy(item) for item in raw)
    if spec.kind == MULTISELECT:
        return [item for item in raw if item != ""]
    return raw[-1] if raw else ""


def _options(spec: _Spec, shown: Any, resolve: Resolver) -> list[Option]:
    selected_keys = set(shown) if isinstance(shown, list) else {shown}
    options = [
        Option(
            value=choice_key(choice),
            label=resolve(label),
            selected=choice_key(choice) in selected_keys,
        )
        for choice, label in zip(spec.choices, spec.choice_labels, strict=True)
    ]
    if spec.kind == SELECT and (spec.nullable or not any(option.selected for option in options)):
        # Without an empty option a browser would silently submit the first choice.
        options.insert(0, Option(value="", label="—", selected=not any(o.selected for o in options)))
    return options


def _bounds(schema: Mapping[str, Any], json_type: str | None) -> tuple[Any, Any]:
    """HTML min/max hints; jsonschema validation stays the authority on exclusive bounds."""
    if json_type not in ("integer", "number"):
        return None, None
    minimum = _number_or_none(schema.get("minimum"))
    maximum = _number_or_none(schema.get("maximum"))
    exclusive_min = _number_or_none(schema.get("exclusiveMinimum"))
    exclusive_max = _number_or_none(schema.get("exclusiveMaximum"))
    if exclusive_min is not None:
        # For whole numbers `> 0` is exactly `>= 1`; for others the hint is the bound itself.
        hint = math.floor(exclusive_min) + 1 if json_type == "integer" else exclusive_min
        minimum = hint if minimum is None else max(minimum, hint)
    if exclusive_max is not None:
        hint = math.ceil(exclusive_max) - 1 if json_type == "integer" else exclusive_max
        maximum = hint if maximum is None else min(maximum, hint)
    return minimum, maximum


def _number_or_none(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _step(schema: Mapping[str, Any], kind: str) -> str | None:
    if kind not in (INTEGER, NUMBER):
        return None
    multiple = _number_or_none(schema.get("multipleOf"))
    if multiple is not None and multiple > 0:
        if kind == INTEGER and isinstance(multiple, float) and not multiple.is_integer():
            return "1"
        return repr(multiple) if isinstance(multiple, float) else str(multiple)
    return "1" if kind == INTEGER else "any"


def _slug(name: str) -> str:
    """An HTML-id-safe form of a property name, distinct for distinct names."""
    cleaned = _ID_SAFE.sub("_", name)
    if cleaned == name and cleaned:
        return cleaned
    digest = hashlib.sha1(name.encode("utf-8")).hexdigest()[:8]
    return f"{cleaned}-{digest}"


# Parsing submissions


def _getlist(data: Any, key: str) -> list[str]:
    if data is None:
        return []
    getlist = getattr(data, "getlist", None)
    if callable(getlist):
        items = getlist(key)
    elif isinstance(data, Mapping):
        items = data.get(key, [])
    else:
        return []
    if isinstance(items, str):
        return [items]
    return [item for item in items if isinstance(item, str)]


def _truthy(text: str) -> bool:
    return text.strip().lower() not in _FALSE_WORDS


def _parse_one(spec: _Spec, raw: list[str]) -> Any:
    kind = spec.kind
    if kind == CHECKBOX:
        return any(_truthy(item) for item in raw)
    if kind == MULTISELECT:
        return _parse_multi(spec, raw)
    if not raw:
        return _OMIT
    text = raw[-1]
    if kind == PASSWORD:
        if text == "" or text == MASK:
            # An empty secret input means "unchanged"; the mask can come back from an API client.
            return _OMIT if text == "" else MASK
        return _coerce(text, spec.json_type)
    if kind == TEXT:
        if text == "":
            if spec.nullable:
                return None
            return _OMIT if spec.required else ""
        return text
    if text.strip() == "":
        if spec.nullable:
            return None
        return _OMIT
    if kind == SELECT:
        return _lookup_choice(spec, text)
    if kind == INTEGER:
        return _to_integer(text)
    if kind == NUMBER:
        return _to_number(text)
    return _to_json(text)


def _parse_multi(spec: _Spec, raw: list[str]) -> Any:
    chosen: list[Any] = []
    keys = [choice_key(choice) for choice in spec.choices]
    for text in raw:
        if text == "":
            continue
        if text not in keys:
            raise _FieldError(_("Select only the choices offered."))
        value = spec.choices[keys.index(text)]
        if value not in chosen:
            chosen.append(value)
    if spec.joined:
        return ",".join(choice_key(value) for value in chosen)
    return chosen


def _lookup_choice(spec: _Spec, text: str) -> Any:
    for choice in spec.choices:
        if choice_key(choice) == text:
            return choice
    raise _FieldError(_("Select one of the choices offered."))


def _coerce(text: str, json_type: str | None) -> Any:
    """Read a secret typed into a password input according to the field's JSON type."""
    if json_type in (None, "string"):
        return text
    if json_type == "integer":
        return _to_integer(text)
    if json_type == "number":
        return _to_number(text)
    if json_type == "boolean":
        lowered = text.strip().lower()
        if lowered in _TRUE_WORDS:
            return True
        if lowered in _FALSE_WORDS:
            return False
        raise _FieldError(_("Enter true or false."))
    return _to_json(text)


def _to_integer(text: str) -> int:
    stripped = text.strip()
    try:
        if _INTEGER_TEXT.fullmatch(stripped):
            return int(stripped)
        if _NUMBER_TEXT.fullmatch(stripped):
            number = float(stripped)
            if math.isfinite(number) and number.is_integer():
                return int(number)
    except ValueError:
        # Python refuses to read integers of thousands of digits.
        raise _FieldError(_("Enter a smaller whole number.")) from None
    raise _FieldError(_("Enter a whole number."))


def _to_number(text: str) -> int | float:
    stripped = text.strip()
    if not _NUMBER_TEXT.fullmatch(stripped):
        raise _FieldError(_("Enter a number."))
    try:
        if _INTEGER_TEXT.fullmatch(stripped):
            return int(stripped)
        number = float(stripped)
    except ValueError:
        raise _FieldError(_("Enter a smaller number.")) from None
    if not math.isfinite(number):
        raise _FieldError(_("Enter a finite number."))
    return number


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in JSON")


def _to_json(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        # The decoder's message names the problem and position, never the text itself.
        problem = {"problem": error.msg, "line": error.lineno, "column": error.colno}
        raise _FieldError(_("Enter valid JSON: %(problem)s (line %(line)s, column %(column)s).") % problem) from None
    except (ValueError, RecursionError):
        raise _FieldError(_("Enter valid JSON without NaN, Infinity, huge numbers or very deep nesting.")) from None
