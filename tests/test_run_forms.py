"""The Run form generator over every schema construct the runtime's parity table produces
(tests/test_runtime.py PARITY and IMPROVEMENTS): each property gets a widget, required ones
are marked, and an empty submission is refused for exactly the required fields."""

from __future__ import annotations

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


@pytest.mark.parametrize("schema", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_defaults_are_prefilled(schema):
    for field in schema_forms.build_fields(schema):
        default = schema["properties"][field.name].get("default")
        if default not in (None, "", [], {}) and field.kind in {"text", "number", "integer"}:
            assert str(field.value) == str(default)
