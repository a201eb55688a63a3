"""toolhub.toolkits.schema_forms and templates/includes/schema_field.html.

Schemas come from real pydantic models (as introspection produces them) and from hand-written
Open WebUI-style tool parameter schemas. No database is needed.
"""

from __future__ import annotations

import enum
import os
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field, SecretStr

from toolhub.toolkits.schema_forms import (
    ALL_ERRORS,
    CHECKBOX,
    INTEGER,
    JSON,
    MULTISELECT,
    NUMBER,
    PASSWORD,
    SELECT,
    TEXT,
    FormField,
    build_fields,
    clear_requests,
    display_title,
    parse_submission,
    validate,
)
from toolhub.vault.secret_fields import MASK

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"
SECRET_VALUE = "sk-very-secret-0123456789"


class Color(enum.StrEnum):
    red = "red"
    green = "green"


class Address(BaseModel):
    city: str
    zip_code: int = Field(1000, ge=1000, le=9999)


class Valves(BaseModel):
    """Every construct a Valves model can use."""

    name: str = Field("ToolHub", description="Shown in greetings")
    retries: int = Field(3, ge=1, le=10, description="How often to retry")
    temperature: float = Field(0.5, ge=0.0, le=2.0)
    ratio: float = Field(0.5, gt=0, lt=1)
    top_k: int = Field(5, gt=0, lt=100)
    enabled: bool = True
    mode: Literal["fast", "slow"] = "fast"
    level: Literal[1, 2, 3] = 2
    color: Color = Color.red
    colors: list[Color] = []
    tags: list[Literal["news", "sport", "tech"]] = ["news"]
    nickname: str | None = None
    favourite: Color | None = None
    strict: bool | None = None
    limit: int | None = Field(None, ge=1, le=50)
    address: Address = Address(city="Oslo")
    headers: dict[str, str] = {}
    names: list[str] = []
    api_key: str = ""
    signing_secret: SecretStr = SecretStr("")
    model: str = Field(
        "gpt-4o",
        json_schema_extra={
            "input": {
                "type": "select",
                "options": ["gpt-4o", {"value": "o3", "label": "OpenAI o3"}],
            }
        },
    )
    models: list[str] = Field(["a"], json_schema_extra={"input": {"type": "multiselect", "options": ["a", "b", "c"]}})
    model_csv: str = Field("", json_schema_extra={"input": {"type": "multiselect", "options": ["x", "y"]}})
    dynamic: str = Field("", json_schema_extra={"input": {"type": "select", "options": "list_models"}})
    hidden_value: str = Field("", json_schema_extra={"input": {"type": "password"}})
    max_tokens: int = 256
    required_count: int


SCHEMA = Valves.model_json_schema()

EXPECTED_KINDS = {
    "name": TEXT,
    "retries": INTEGER,
    "temperature": NUMBER,
    "ratio": NUMBER,
    "top_k": INTEGER,
    "enabled": CHECKBOX,
    "mode": SELECT,
    "level": SELECT,
    "color": SELECT,
    "colors": MULTISELECT,
    "tags": MULTISELECT,
    "nickname": TEXT,
    "favourite": SELECT,
    "strict": SELECT,
    "limit": INTEGER,
    "address": JSON,
    "headers": JSON,
    "names": JSON,
    "api_key": PASSWORD,
    "signing_secret": PASSWORD,
    "model": SELECT,
    "models": MULTISELECT,
    "model_csv": MULTISELECT,
    "dynamic": TEXT,
    "hidden_value": PASSWORD,
    "max_tokens": INTEGER,
    "required_count": INTEGER,
}


def _by_name(fields: list[FormField]) -> dict[str, FormField]:
    return {f.name: f for f in fields}


def _fields(values: dict | None = None, **kwargs: Any) -> dict[str, FormField]:
    return _by_name(build_fields(SCHEMA, values, **kwargs))


def _browser_submit(fields: list[FormField], prefix: str = "") -> dict[str, list[str]]:
    """What a browser posts for the rendered fields when nobody touches them."""
    data: dict[str, list[str]] = {}
    for f in fields:
        key = prefix + f.name
        if f.kind == CHECKBOX:
            if f.value:
                data[key] = ["on"]
        elif f.kind == MULTISELECT:
            data[key] = [o.value for o in f.options if o.selected]
        elif f.kind == SELECT:
            data[key] = [next(o.value for o in f.options if o.selected)]
        else:
            data[key] = [f.value]
    return data


# Building fields


def test_every_construct_gets_its_widget() -> None:
    kinds = {f.name: f.kind for f in build_fields(SCHEMA)}
    assert kinds == EXPECTED_KINDS


def test_fields_keep_the_schema_order() -> None:
    assert [f.name for f in build_fields(SCHEMA)] == list(SCHEMA["properties"])


def test_titles_descriptions_and_required() -> None:
    fields = _fields()
    assert fields["name"].label == "Name"
    assert fields["name"].help == "Shown in greetings"
    assert fields["retries"].help == "How often to retry"
    assert fields["required_count"].required
    assert not fields["name"].required
    # A `$ref` property has no title of its own; the def's title names the type, not the field.
    assert fields["color"].label == "Color"
    assert fields["favourite"].label == "Favourite"
    assert fields["address"].label == "Address"


def test_display_title_falls_back_to_a_readable_name() -> None:
    assert display_title({"title": "Custom"}, "x") == "Custom"
    assert display_title({"title": "  "}, "api_key") == "Api key"
    assert display_title({}, "accessToken") == "Access token"
    assert display_title({}, "userID") == "User ID"
    assert display_title({}, "OPENAI_API_KEY") == "Openai api key"
    assert display_title(None, "x") == "X"
    assert display_title({}, "__") == "__"


def test_defaults_are_prefilled() -> None:
    fields = _fields()
    assert fields["name"].value == "ToolHub"
    assert fields["retries"].value == "3"
    assert fields["temperature"].value == "0.5"
    assert fields["enabled"].value is True
    assert fields["mode"].value == "fast"
    assert fields["level"].value == "2"
    assert fields["tags"].value == ["news"]
    assert fields["nickname"].value == ""
    assert fields["address"].value.replace(" ", "").replace("\n", "") == '{"city":"Oslo","zip_code":1000}'
    assert fields["required_count"].value == ""
    assert fields["retries"].default == 3


def test_values_override_defaults() -> None:
    fields = _fields({"name": "Ada", "enabled": False, "tags": ["sport", "tech"], "limit": 7})
    assert fields["name"].value == "Ada"
    assert fields["enabled"].value is False
    assert [o.value for o in fields["tags"].options if o.selected] == ["sport", "tech"]
    assert fields["limit"].value == "7"


def test_bounds_come_from_ge_le_gt_lt() -> None:
    fields = _fields()
    assert (fields["retries"].minimum, fields["retries"].maximum, fields["retries"].step) == (1, 10, "1")
    assert (fields["temperature"].minimum, fields["temperature"].maximum) == (0.0, 2.0)
    assert fields["temperature"].step == "any"
    # Whole numbers: `> 0` is `>= 1` and `< 100` is `<= 99`.
    assert (fields["top_k"].minimum, fields["top_k"].maximum) == (1, 99)
    # Other numbers: the exclusive bound is only a hint; validation enforces it.
    assert (fields["ratio"].minimum, fields["ratio"].maximum) == (0, 1)
    # Optional[int] keeps the bounds of its non-null branch.
    assert (fields["limit"].minimum, fields["limit"].maximum) == (1, 50)
    assert fields["limit"].nullable


def test_multiple_of_sets_the_step() -> None:
    schema = {"properties": {"x": {"type": "number", "multipleOf": 0.25}}}
    assert build_fields(schema)[0].step == "0.25"


def test_enum_selects() -> None:
    fields = _fields()
    assert [(o.value, o.label, o.selected) for o in fields["mode"].options] == [
        ("fast", "fast", True),
        ("slow", "slow", False),
    ]
    assert [o.value for o in fields["level"].options] == ["1", "2", "3"]
    assert [o.value for o in fields["color"].options] == ["red", "green"]
    # Optional enums get an empty choice, selected when there is no value.
    assert [(o.value, o.selected) for o in fields["favourite"].options] == [
        ("", True),
        ("red", False),
        ("green", False),
    ]
    assert [o.value for o in fields["strict"].options] == ["", "true", "false"]
    assert [o.label for o in fields["strict"].options][1:] == ["Yes", "No"]


def test_required_enum_without_default_starts_empty() -> None:
    schema = {"properties": {"unit": {"enum": ["c", "f"]}}, "required": ["unit"]}
    field = build_fields(schema)[0]
    assert [(o.value, o.selected) for o in field.options] == [("", True), ("c", False), ("f", False)]


def test_open_webui_static_options() -> None:
    fields = _fields()
    assert [(o.value, o.label) for o in fields["model"].options] == [
        ("gpt-4o", "gpt-4o"),
        ("o3", "OpenAI o3"),
    ]
    assert [o.value for o in fields["models"].options if o.selected] == ["a"]
    csv = _fields({"model_csv": "x,y"})["model_csv"]
    assert [o.value for o in csv.options if o.selected] == ["x", "y"]


def test_dynamic_open_webui_options_fall_back_to_the_type_widget() -> None:
    # `options` naming a method would need the toolkit imported: never in the web process.
    assert _fields()["dynamic"].kind == TEXT


def test_secrets_never_carry_their_value() -> None:
    values = {"api_key": SECRET_VALUE, "signing_secret": SECRET_VALUE, "hidden_value": ""}
    fields = _fields(values)
    for name in ("api_key", "signing_secret", "hidden_value"):
        assert fields[name].secret
        assert fields[name].value == ""
        assert fields[name].default is None
    assert fields["api_key"].is_set
    assert fields["signing_secret"].is_set
    assert not fields["hidden_value"].is_set
    assert SECRET_VALUE not in repr(build_fields(SCHEMA, values))


def test_is_set_can_be_given_explicitly() -> None:
    fields = _fields({"api_key": MASK}, is_set={"api_key": False, "signing_secret": True})
    assert not fields["api_key"].is_set
    assert fields["signing_secret"].is_set


def test_secret_names_can_be_given_explicitly() -> None:
    fields = _fields(secret_names={"name"})
    assert fields["name"].kind == PASSWORD
    assert fields["api_key"].kind == TEXT


def test_resolve_is_applied_to_every_display_string() -> None:
    schema = {
        "properties": {
            "x": {"type": "string", "title": "$t:x.title", "description": "$t:x.help"},
            "y": {
                "type": "string",
                "input": {"type": "select", "options": [{"value": "a", "label": "$t:y.a"}]},
            },
        }
    }
    fields = _by_name(build_fields(schema, resolve=lambda s: s.replace("$t:", "T/")))
    assert (fields["x"].label, fields["x"].help) == ("T/x.title", "T/x.help")
    assert [o.label for o in fields["y"].options][-1] == "T/y.a"


def test_errors_are_attached_to_fields() -> None:
    fields = _fields(errors={"retries": ["Must be at most 10."]})
    assert fields["retries"].errors == ["Must be at most 10."]
    assert fields["name"].errors == []


def test_raw_data_is_shown_back_after_a_rejected_submission() -> None:
    data = {"p-address": ["{broken"], "p-retries": ["eleven"], "p-tags": ["sport"]}
    fields = _fields({"address": {"city": "Oslo"}}, data=data, prefix="p-")
    assert fields["address"].value == "{broken"
    assert fields["retries"].value == "eleven"
    assert fields["enabled"].value is False
    assert [o.value for o in fields["tags"].options if o.selected] == ["sport"]


def test_slugs_are_id_safe_and_distinct() -> None:
    schema = {"properties": {"a b": {"type": "string"}, "a_b": {"type": "string"}, '"><x': {}}}
    slugs = [f.slug for f in build_fields(schema)]
    assert slugs[1] == "a_b"
    assert len(set(slugs)) == 3
    assert all(c.isalnum() or c in "_-" for slug in slugs for c in slug)


# Tool parameter schemas (not pydantic)


TOOL_SCHEMA = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "The text to reverse"},
        "times": {"type": "integer", "minimum": 1, "default": 1},
        "anything": {"description": "No type at all"},
        "either": {"type": ["integer", "string"]},
        "maybe": {"type": ["string", "null"]},
        "choice": {"enum": ["a", None]},
        "one": {"const": "x"},
    },
    "required": ["text"],
}


def test_tool_parameter_schemas() -> None:
    fields = _by_name(build_fields(TOOL_SCHEMA))
    assert {name: f.kind for name, f in fields.items()} == {
        "text": TEXT,
        "times": INTEGER,
        "anything": JSON,
        "either": JSON,
        "maybe": TEXT,
        "choice": SELECT,
        "one": SELECT,
    }
    assert fields["text"].required and fields["text"].label == "Text"
    assert fields["maybe"].nullable and fields["choice"].nullable


def test_odd_schemas_give_no_fields() -> None:
    assert build_fields(None) == []
    assert build_fields({}) == []
    assert build_fields({"type": "object"}) == []
    assert build_fields({"properties": {"x": "not a schema"}}) == []


def test_a_ref_cycle_does_not_hang() -> None:
    schema = {"$defs": {"A": {"$ref": "#/$defs/A"}}, "properties": {"x": {"$ref": "#/$defs/A"}}}
    assert build_fields(schema)[0].kind == JSON


def test_property_level_required_is_honoured() -> None:
    # RAGFlow plugins mark `required: true` on each parameter instead of listing them.
    schema = {"properties": {"q": {"type": "string", "required": True}, "n": {"type": "integer", "required": False}}}
    assert [f.required for f in build_fields(schema)] == [True, False]
    assert validate(schema, {}) == {"q": ["This field is required."]}
    assert validate(schema, {"q": "x", "n": "y"}) == {"n": ["Must be a whole number."]}


# Parsing


def test_an_untouched_form_round_trips_to_the_defaults() -> None:
    fields = build_fields(SCHEMA)
    data = _browser_submit(fields)
    data["required_count"] = ["4"]
    values, errors = parse_submission(SCHEMA, data)
    assert errors == {}
    assert validate(SCHEMA, values) == {}
    model = Valves(**values)
    expected = Valves(required_count=4)
    assert model.model_dump(exclude={"api_key", "signing_secret", "hidden_value"}) == expected.model_dump(
        exclude={"api_key", "signing_secret", "hidden_value"}
    )
    # Empty secret inputs mean "unchanged": they are left out for merge_submitted.
    assert not {"api_key", "signing_secret", "hidden_value"} & set(values)


def test_stored_values_round_trip_through_the_form() -> None:
    stored = {
        "name": "Ada",
        "retries": 7,
        "temperature": 1.25,
        "ratio": 0.1,
        "top_k": 50,
        "enabled": False,
        "mode": "slow",
        "level": 3,
        "color": "green",
        "colors": ["red", "green"],  # browsers submit choices in option order
        "tags": [],
        "nickname": "ada",
        "favourite": "red",
        "strict": False,
        "limit": 50,
        "address": {"city": "Bergen", "zip_code": 5003},
        "headers": {"X-A": "1"},
        "names": ["a", "b"],
        "model": "o3",
        "models": ["b", "c"],
        "model_csv": "x,y",
        "dynamic": "anything",
        "max_tokens": 1024,
        "required_count": 1,
    }
    data = _browser_submit(build_fields(SCHEMA, stored), prefix="v-")
    values, errors = parse_submission(SCHEMA, data, prefix="v-")
    assert errors == {}
    assert values == stored
    assert validate(SCHEMA, values) == {}


def test_an_unchecked_checkbox_is_false() -> None:
    values, _ = parse_submission(SCHEMA, {})
    assert values["enabled"] is False
    values, _ = parse_submission(SCHEMA, {"enabled": ["on"]})
    assert values["enabled"] is True


def test_empty_inputs() -> None:
    data = {
        "name": [""],
        "nickname": [""],
        "limit": [""],
        "favourite": [""],
        "retries": [""],
        "address": [""],
        "required_count": [""],
        "strict": [""],
    }
    values, errors = parse_submission(SCHEMA, data)
    assert errors == {}
    assert values["name"] == ""  # an optional text field can be emptied
    assert values["nickname"] is None  # Optional -> None
    assert values["limit"] is None
    assert values["favourite"] is None
    assert values["strict"] is None
    assert "retries" not in values  # the default applies
    assert "address" not in values
    assert "required_count" not in values
    assert validate(SCHEMA, values) == {"required_count": ["This field is required."]}


def test_numbers_are_typed() -> None:
    values, errors = parse_submission(
        SCHEMA, {"retries": [" 4 "], "temperature": ["1"], "ratio": ["2.5e-1"], "required_count": ["3.0"]}
    )
    assert errors == {}
    assert values["retries"] == 4 and isinstance(values["retries"], int)
    assert values["temperature"] == 1
    assert values["ratio"] == 0.25
    assert values["required_count"] == 3 and isinstance(values["required_count"], int)


@pytest.mark.parametrize(
    ("field", "raw", "message"),
    [
        ("retries", "abc", "Enter a whole number."),
        ("retries", "1.5", "Enter a whole number."),
        ("retries", "1_000", "Enter a whole number."),
        ("temperature", "nan", "Enter a number."),
        ("temperature", "1e999", "Enter a finite number."),
        ("mode", "medium", "Select one of the choices offered."),
        ("level", "4", "Select one of the choices offered."),
        ("tags", "weather", "Select only the choices offered."),
        ("model", "gpt-2", "Select one of the choices offered."),
        ("address", "NaN", "Enter valid JSON"),
    ],
)
def test_unreadable_values_are_reported_on_their_field(field: str, raw: str, message: str) -> None:
    values, errors = parse_submission(SCHEMA, {field: [raw], "required_count": ["1"]})
    assert field not in values
    assert list(errors) == [field]
    assert errors[field][0].startswith(message)


def test_bad_json_says_where() -> None:
    _, errors = parse_submission(SCHEMA, {"address": ['{"city": "Oslo",}']})
    assert errors["address"] == [
        "Enter valid JSON: Expecting property name enclosed in double quotes (line 1, column 17)."
    ]


def test_secrets_are_parsed_by_their_type() -> None:
    schema = {
        "properties": {
            "api_key": {"type": "string"},
            "pin_token": {"type": "integer"},
            "auth": {"type": "object"},
        }
    }
    values, errors = parse_submission(
        schema, {"api_key": [SECRET_VALUE], "pin_token": ["1234"], "auth": ['{"u": "p"}']}
    )
    assert errors == {}
    assert values == {"api_key": SECRET_VALUE, "pin_token": 1234, "auth": {"u": "p"}}
    values, errors = parse_submission(schema, {"api_key": [""], "pin_token": [MASK], "auth": [SECRET_VALUE]})
    assert values == {"pin_token": MASK}
    assert SECRET_VALUE not in str(errors)


def test_clear_requests() -> None:
    data = {"v-api_key__clear": ["on"], "v-signing_secret__clear": [""], "v-name__clear": ["on"]}
    assert clear_requests(SCHEMA, data, prefix="v-") == {"api_key"}


def test_parse_accepts_a_getlist_object_and_single_strings() -> None:
    class MultiDict:
        def __init__(self, data: dict[str, list[str]]) -> None:
            self.data = data

        def getlist(self, key: str) -> list[str]:
            return self.data.get(key, [])

    values, _ = parse_submission(TOOL_SCHEMA, MultiDict({"text": ["abc"], "times": ["2"]}))
    assert values == {"text": "abc", "times": 2}
    values, _ = parse_submission(TOOL_SCHEMA, {"text": "abc"})
    assert values == {"text": "abc"}


def test_tool_arguments_round_trip() -> None:
    data = {
        "text": ["hello"],
        "anything": ['{"a": [1, 2]}'],
        "either": ['"x"'],
        "maybe": [""],
        "choice": ["a"],
        "one": ["x"],
    }
    values, errors = parse_submission(TOOL_SCHEMA, data)
    assert errors == {}
    assert values == {
        "text": "hello",
        "anything": {"a": [1, 2]},
        "either": "x",
        "maybe": None,
        "choice": "a",
        "one": "x",
    }
    assert validate(TOOL_SCHEMA, values) == {}


def test_a_required_tool_argument_left_empty_is_required() -> None:
    values, errors = parse_submission(TOOL_SCHEMA, {"text": [""]})
    assert errors == {} and "text" not in values
    assert validate(TOOL_SCHEMA, values) == {"text": ["This field is required."]}


# Validation


def test_out_of_bounds_values() -> None:
    errors = validate(SCHEMA, {"required_count": 1, "retries": 11, "temperature": -1, "ratio": 1, "top_k": 0})
    assert errors == {
        "retries": ["Must be at most 10."],
        "temperature": ["Must be at least 0.0."],
        "ratio": ["Must be less than 1."],
        "top_k": ["Must be greater than 0."],
    }


def test_optional_fields_explain_their_real_constraint() -> None:
    assert validate(SCHEMA, {"required_count": 1, "limit": 99}) == {"limit": ["Must be at most 50."]}


def test_wrong_enum_and_type() -> None:
    errors = validate(SCHEMA, {"required_count": "x", "mode": "medium", "colors": ["blue"]})
    assert errors["required_count"] == ["Must be a whole number."]
    assert errors["mode"] == ["Must be one of: fast, slow."]
    assert errors["colors"] == ["Item 1: Must be one of: red, green."]


def test_nested_errors_say_where() -> None:
    errors = validate(SCHEMA, {"required_count": 1, "address": {"zip_code": 5}})
    assert sorted(errors["address"]) == ["Missing required key: city.", "zip_code: Must be at least 1000."]


def test_unknown_fields_go_to_all() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}
    assert validate(schema, {"a": "x", "zzz": 1}) == {ALL_ERRORS: ["Unknown field: zzz."]}


def test_a_broken_schema_is_reported_not_raised() -> None:
    assert ALL_ERRORS in validate({"type": "object", "properties": {"a": {"type": 5}}}, {"a": 1})
    assert ALL_ERRORS in validate({"properties": {"a": {"$ref": "#/$defs/Missing"}}}, {"a": 1})
    assert ALL_ERRORS in validate({"properties": {"a": {"$ref": "https://example.invalid/s.json"}}}, {"a": 1})


def test_a_non_object_is_reported() -> None:
    assert validate({"type": "object"}, ["not", "an", "object"]) == {ALL_ERRORS: ["The values must be an object."]}


def test_validation_messages_never_quote_a_secret() -> None:
    schema = {
        "type": "object",
        "properties": {
            "api_key": {"type": "string", "maxLength": 3, "pattern": "^x"},
            "token": {"type": "string", "not": {"const": SECRET_VALUE}},
            "auth": {"type": "object", "additionalProperties": False},
        },
        "minProperties": 10,
        "additionalProperties": False,
    }
    errors = validate(
        schema,
        {"api_key": SECRET_VALUE, "token": SECRET_VALUE, "auth": {SECRET_VALUE: 1}, "other": SECRET_VALUE},
    )
    assert set(errors) == {"api_key", "token", "auth", ALL_ERRORS}
    assert SECRET_VALUE not in str(errors)


def test_many_errors_on_one_field_are_capped() -> None:
    schema = {"properties": {"xs": {"type": "array", "items": {"type": "integer"}}}}
    errors = validate(schema, {"xs": ["a"] * 30})
    assert len(errors["xs"]) == 11
    assert errors["xs"][-1] == "…and 20 more problems."


# The template partial


@pytest.fixture(scope="module")
def engine() -> Any:
    import django
    from django.conf import settings

    if not settings.configured and "DJANGO_SETTINGS_MODULE" not in os.environ:
        settings.configure(USE_I18N=True, LANGUAGE_CODE="en", INSTALLED_APPS=[])
    django.setup()
    from django.template import Engine

    return Engine(
        dirs=[str(TEMPLATES_DIR)],
        libraries={"i18n": "django.templatetags.i18n", "l10n": "django.templatetags.l10n"},
    )


def _render(engine: Any, field: FormField, prefix: str = "v-") -> str:
    from django.template import Context

    template = engine.get_template("includes/schema_field.html")
    return template.render(Context({"field": field, "prefix": prefix}))


def test_the_partial_never_renders_a_secret(engine: Any) -> None:
    fields = _fields({"api_key": SECRET_VALUE})
    html = _render(engine, fields["api_key"])
    assert SECRET_VALUE not in html
    assert 'type="password"' in html
    assert 'value=""' in html
    assert 'autocomplete="new-password"' in html
    assert ">set<" in html
    assert 'name="v-api_key__clear"' in html

    unset = _render(engine, _fields()["signing_secret"])
    assert ">not set<" in unset
    assert "__clear" not in unset


def test_a_full_form_never_contains_a_secret(engine: Any) -> None:
    values = {"api_key": SECRET_VALUE, "signing_secret": SECRET_VALUE, "hidden_value": SECRET_VALUE}
    html = "".join(_render(engine, f) for f in build_fields(SCHEMA, values))
    assert SECRET_VALUE not in html


def test_the_partial_escapes_hostile_strings(engine: Any) -> None:
    evil = '<script>alert("x")</script>'
    schema = {
        "properties": {
            "x": {
                "title": evil,
                "description": evil,
                "default": evil,
                "enum": [evil, "ok"],
            },
            "y": {"type": "string", "title": evil, "default": evil},
        }
    }
    fields = build_fields(schema, errors={"y": [evil]})
    html = "".join(_render(engine, f) for f in fields)
    assert "<script>" not in html
    assert "&lt;script&gt;" in html


def test_the_partial_renders_labels_ids_and_help(engine: Any) -> None:
    html = _render(engine, _fields(errors={"retries": ["Must be at most 10."]})["retries"])
    assert '<label for="id_v-retries">Retries</label>' in html
    assert 'name="v-retries"' in html and 'id="id_v-retries"' in html
    assert 'type="number"' in html and 'min="1"' in html and 'max="10"' in html and 'step="1"' in html
    assert 'value="3"' in html
    assert 'aria-describedby="id_v-retries_help id_v-retries_errors"' in html
    assert 'aria-invalid="true"' in html
    assert '<p class="help" id="id_v-retries_help">How often to retry</p>' in html
    assert '<ul class="errorlist" id="id_v-retries_errors">' in html
    assert "<li>Must be at most 10.</li>" in html


def test_the_partial_marks_required_fields(engine: Any) -> None:
    html = _render(engine, _fields()["required_count"])
    assert 'class="required-marker"' in html
    assert " required" in html


def test_the_partial_renders_each_widget(engine: Any) -> None:
    fields = _fields({"enabled": True, "tags": ["sport"]})
    assert 'type="checkbox"' in _render(engine, fields["enabled"])
    assert " checked" in _render(engine, fields["enabled"])
    select = _render(engine, fields["mode"])
    assert "<select" in select and '<option value="fast" selected>fast</option>' in select
    multi = _render(engine, fields["tags"])
    assert " multiple" in multi and '<option value="sport" selected>sport</option>' in multi
    textarea = _render(engine, fields["address"])
    assert "<textarea" in textarea and "&quot;city&quot;: &quot;Oslo&quot;" in textarea
    assert 'type="text"' in _render(engine, fields["name"])


def test_bounds_are_not_localised(engine: Any) -> None:
    from django.utils import translation

    with translation.override("de"):
        html = _render(engine, _fields()["temperature"])
    assert 'min="0.0"' in html and 'max="2.0"' in html


def test_parse_accepts_a_query_dict(engine: Any) -> None:
    from django.http import QueryDict

    data = QueryDict("v-text=abc&v-times=3")
    assert parse_submission(TOOL_SCHEMA, data, prefix="v-") == ({"text": "abc", "times": 3}, {})


def test_a_catastrophic_pattern_is_not_run_in_the_web_process():
    # (a+)+$ against "aaaa…b" backtracks exponentially in Python's re; the sandbox checks
    # patterns instead, under its CPU limit.
    import time

    from toolhub.toolkits.schema_forms import validate

    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": "(a+)+$"}}}
    started = time.monotonic()
    assert validate(schema, {"x": "a" * 40 + "b"}) == {}
    assert time.monotonic() - started < 1
    # Everything else is still checked.
    assert "x" in validate(schema, {"x": 5})


def test_a_schema_is_checked_once_and_again_when_it_changes() -> None:
    # Validators are kept per schema text: the same schema answers alike on every call, and the
    # same dict changed in place is a new schema, checked anew.
    schema: dict[str, Any] = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert validate(schema, {"n": "x"}) == validate(schema, {"n": "x"}) != {}
    assert validate(schema, {"n": 1}) == {}
    schema["properties"]["n"]["type"] = "no such type"
    assert ALL_ERRORS in validate(schema, {"n": 1})
