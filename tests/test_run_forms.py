"""The Run form generator over every schema construct the runtime's parity table produces
(tests/test_runtime.py PARITY and IMPROVEMENTS): each property gets a widget, required ones
are marked, and an empty submission is refused for exactly the required fields."""

from __future__ import annotations

import json

import pytest
from django.http import QueryDict

from tests.test_runtime import IMPROVEMENTS, PARITY
from toolhub.toolkits import schema_forms

CASES = [expected for _source, expected in PARITY + IMPROVEMENTS]
KINDS = {"text", "number", "integer", "checkbox", "select", "multiselect", "json", "password"}


@pytest.mark.parametrize("schema", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_every_parameter_gets_a_field_and_required_ones_are_marked(schema):
    fields = schema_forms.build_fields(schema, prefix="tool__")
    assert [f.name for f in fields] == list(schema.get("properties", {}))
    required = set(schema.get("required", []))
    for field in fields:
        assert field.kind in KINDS, field
        assert field.required == (field.name in required)


@pytest.mark.parametrize("schema", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_an_empty_submission_is_refused_for_exactly_the_required_fields(schema):
    values, errors = schema_forms.parse_submission(schema, QueryDict(""), prefix="tool__")
    errors = {**errors, **schema_forms.validate(schema, values)}
    required = set(schema.get("required", []))
    # A checkbox has no "empty": unchecked is false, which satisfies `required`.
    checkboxes = {f.name for f in schema_forms.build_fields(schema) if f.kind == "checkbox"}
    assert set(errors) == required - checkboxes


def _shown(kind: str, spec: dict):
    """What a field of `kind` shows before anything is typed: its default as the widget writes
    it, or the widget's empty value."""
    if kind == "checkbox":
        return spec.get("default") is True
    if "default" not in spec or spec["default"] is None:
        return [] if kind == "multiselect" else ""
    default = spec["default"]
    if kind == "json":
        return json.dumps(default, indent=2)
    return str(default)


@pytest.mark.parametrize("schema", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_each_field_shows_its_default_or_nothing(schema):
    fields = schema_forms.build_fields(schema)
    properties = schema.get("properties", {})
    assert {f.name: f.value for f in fields} == {f.name: _shown(f.kind, properties[f.name]) for f in fields}
    assert len(fields) == len(properties)


def test_the_cases_prefill_a_default_of_each_kind():
    """The parity table has defaults of every kind the form shows, so the test above checks a
    prefilled value of each, not only empty fields."""
    kinds = {
        field.kind
        for schema in CASES
        for field in schema_forms.build_fields(schema)
        if schema["properties"][field.name].get("default") not in (None, "", False)
    }
    assert kinds >= {"text", "integer", "number", "select", "json"}
