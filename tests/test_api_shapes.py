"""Each response shape of the API is defined once, by its schema: the schema reads the model
(toolhub.api.schemas), and no code builds the same dict by hand beside it, where a field added
to one and not the other would drift (read from the source with `ast`, like test_architecture).
Reading the model in the schema keeps the API's answer to a database gone away: 503."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest
from django.db import OperationalError
from ninja import Schema

from tests.helpers import bearer_headers, ready_string_reverse, reverse_tool
from tests.test_api_invocations import made_invocation
from toolhub.api import schemas
from toolhub.api.api import api

ROOT = Path(__file__).resolve().parent.parent

# Shapes still built as dicts elsewhere, and why. Do not add one: give the schema resolvers and
# return the object instead.
BUILT_ELSEWHERE = {
    # Errors are composed where they are raised, from a message and the field it is about.
    "ErrorItem": "errors",
    # Data the agent engine writes to the run's log as it goes, and the API shows as stored.
    "AgentLogNode": "stored data",
    # The page wrappers of toolhub.api.api._page, around items the schema builds.
    "PackageList": "page", "ReviewList": "page",
    # Still built by hand in their endpoints' modules.
    "AccessOut": "toolkits.access.access_out, also the audit record of a change",
    "ImportEntryOut": "toolkits.bulk verdicts", "UserOut": "people", "GroupOut": "people",
    "ToolTestOut": "tool_tests", "OverrideOut": "tool_tests", "CaseOut": "tool_tests",
    "UsageOut": "usage", "UsageItemOut": "usage", "UsageBucketOut": "usage",
}


def _schemas_in(annotation: object, found: dict[str, type[Schema]]) -> None:
    if isinstance(annotation, type) and issubclass(annotation, Schema):
        if annotation.__name__ not in found:
            found[annotation.__name__] = annotation
            for field in annotation.model_fields.values():
                _schemas_in(field.annotation, found)
        return
    for argument in typing.get_args(annotation):
        _schemas_in(argument, found)


def _response_schemas() -> dict[str, type[Schema]]:
    """Every schema the API answers with, and the schemas inside them."""
    found: dict[str, type[Schema]] = {}
    for _prefix, router in api._routers:
        for view in router.path_operations.values():
            for operation in view.operations:
                for model in operation.response_models.values():
                    fields = getattr(model, "model_fields", {})
                    if "response" in fields:
                        _schemas_in(fields["response"].annotation, found)
    return found


def _dicts_built(path: Path) -> list[tuple[int, frozenset[str]]]:
    """The keys of each dict this file writes out: a literal with string keys, or dict(a=...)."""
    built = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Dict) and node.keys and all(
            isinstance(key, ast.Constant) and isinstance(key.value, str) for key in node.keys
        ):
            built.append((node.lineno, frozenset(key.value for key in node.keys if isinstance(key, ast.Constant))))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and node.keywords:
            built.append((node.lineno, frozenset(k.arg for k in node.keywords if k.arg)))
    return built


def _hand_built(paths: list[Path], shapes: dict[str, type[Schema]], root: Path = ROOT) -> list[str]:
    """Where these files build a dict with exactly the fields of a response shape. Shapes of one
    or two fields ({"id", "status"}) are left out: such dicts are too common to tell apart."""
    names_by_fields: dict[frozenset[str], set[str]] = {}
    for name, schema in shapes.items():
        if len(schema.model_fields) > 2 and name not in BUILT_ELSEWHERE:
            names_by_fields.setdefault(frozenset(schema.model_fields), set()).add(name)
    return [
        f"{path.relative_to(root)}:{line} builds {' or '.join(sorted(names_by_fields[keys]))}"
        for path in paths
        for line, keys in _dicts_built(path)
        if keys in names_by_fields
    ]


def test_the_api_answers_with_the_shapes_this_test_watches():
    shapes = _response_schemas()
    assert {"ToolkitSummary", "ToolkitOut", "RevisionOut", "ReviewOut", "PackageOut", "PackageIndexOut",
            "PackageRequestOut", "EventOut", "InvocationOut", "ModelConnectionOut", "AgentRunOut"} <= set(shapes)
    assert set(BUILT_ELSEWHERE) <= set(shapes), "an exemption for a shape the API no longer has"


def test_no_response_shape_is_also_built_by_hand():
    shapes = _response_schemas()
    assert _hand_built(sorted((ROOT / "toolhub").rglob("*.py")), shapes) == []


def test_the_check_sees_a_dict_built_like_a_response(tmp_path):
    shapes = _response_schemas()
    fields = list(shapes["EventOut"].model_fields)
    module = tmp_path / "toolhub" / "serializers.py"
    module.parent.mkdir()
    module.write_text(
        "def event_out(event):\n"
        f"    return {{{', '.join(f'{name!r}: getattr(event, {name!r})' for name in fields)}}}\n"
        f"def model_out(model):\n    return dict({', '.join(f'{name}=1' for name in shapes['ModelConnectionOut'].model_fields)})\n"
    )
    assert _hand_built([module], shapes, root=tmp_path) == [
        "toolhub/serializers.py:2 builds EventOut", "toolhub/serializers.py:4 builds ModelConnectionOut",
    ]


@pytest.mark.django_db
def test_a_database_lost_while_the_answer_is_read_gets_503_not_500(client, upload, alice, monkeypatch):
    ready = ready_string_reverse(upload, alice, tools=[reverse_tool({"type": "object", "properties": {}})])
    invocation = made_invocation(ready, alice)

    def gone(*args, **kwargs):
        raise OperationalError("the database went away")

    # The events are read by the schema, after the endpoint returned the invocation.
    monkeypatch.setattr(schemas, "events_after", gone)
    response = client.get(f"/api/v1/invocations/{invocation.pk}", **bearer_headers(alice))
    assert response.status_code == 503, response.content
    assert response["Retry-After"] == "1"
