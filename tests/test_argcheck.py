"""A warm sandbox checks the arguments of a tool with simple parameter types without building
its pydantic model (toolhub.runtime.argcheck): what the tool receives, and every refusal's
message, must be exactly what the model gives."""

from __future__ import annotations

import math
import typing
from collections.abc import Iterator
from typing import Any, List, Optional  # noqa: UP035 - the old spellings are what toolkits write

import pytest

from toolhub.runtime import argcheck, specs
from toolhub.runtime.invoke import InvalidArguments, validate_arguments


@pytest.fixture
def prepared() -> Iterator[None]:
    argcheck.prepare()
    try:
        yield
    finally:
        argcheck._SCHEMAS = None


def _tool(hint: Any, default: Any = "required") -> Any:
    namespace: dict[str, Any] = {"hint": hint}
    if default == "required":
        exec("def tool(self, x: hint, y: int = 2):\n    return x", namespace)  # noqa: S102 - a test's own text
    else:
        namespace["default"] = default
        exec("def tool(self, x: hint = default, y: int = 2):\n    return x", namespace)  # noqa: S102
    return namespace["tool"].__get__(object())


def _outcome(function: Any, arguments: dict) -> tuple[str, str]:
    try:
        kwargs = validate_arguments(function, arguments)
    except InvalidArguments as exc:
        return ("refused", str(exc))
    except Exception as exc:  # noqa: BLE001 - whatever the model raises, the check must too
        return ("raised", f"{type(exc).__name__}: {exc}")
    return ("accepted", repr(sorted((name, type(value).__name__, repr(value)) for name, value in kwargs.items())))


def _both(function: Any, arguments: dict) -> tuple[tuple[str, str], tuple[str, str]]:
    saved = argcheck._SCHEMAS
    argcheck._SCHEMAS = None
    try:
        by_model = _outcome(function, arguments)
    finally:
        argcheck._SCHEMAS = saved
    return by_model, _outcome(function, arguments)


PLAIN = [str, int, float, bool]
SIMPLE = [
    Any, *PLAIN,
    *(Optional[p] for p in PLAIN),  # noqa: UP045
    *(p | None for p in PLAIN),
    *(list[p] for p in PLAIN),  # type: ignore[valid-type]
    *(List[p] for p in PLAIN),  # type: ignore[valid-type]  # noqa: UP006
    *(Optional[list[p]] for p in PLAIN),  # type: ignore[valid-type]  # noqa: UP045
]
VALUES = [
    "text", "", " 42 ", "42", "4.5", "1e3", "true", "False", "yes", "off", "0", "1", "nan", "inf", "é\u2028",
    0, 1, 2, -7, 2**70, True, False, 0.0, 1.0, 2.5, -0.5, 1e300, math.inf, math.nan, None,
    [], ["a", "b"], [1, 2], [1.5], [True, "x"], ["1", 2, None], [[1]], {}, {"a": 1},
]


@pytest.mark.parametrize("hint", SIMPLE, ids=repr)
def test_a_simple_parameter_is_checked_exactly_as_by_its_model(prepared, hint) -> None:
    function = _tool(hint)
    assert argcheck.validator([(p, h) for _i, p, h in specs.call_parameters(function)])
    for value in VALUES:
        by_model, by_check = _both(function, {"x": value})
        assert by_check == by_model, value
    # A missing argument, another one's error too, and an extra one.
    for arguments in ({}, {"y": "many"}, {"x": VALUES[0], "y": 2.5}, {"x": 1, "z": 2}):
        by_model, by_check = _both(function, arguments)
        assert by_check == by_model, arguments


@pytest.mark.parametrize("default", [None, "d", 3, 2.5, False, ["a"]])
def test_defaults_are_given_as_by_the_model(prepared, default) -> None:
    hint = type(default) if default is not None else Optional[str]  # noqa: UP045
    function = _tool(list[str] if isinstance(default, list) else hint, default)
    for arguments in ({}, {"x": None}, {"x": "v"}, {"y": 5}):
        by_model, by_check = _both(function, arguments)
        assert by_check == by_model, arguments


def test_a_mutable_default_is_never_the_tool_s_own_object(prepared) -> None:
    default = ["a"]
    function = _tool(list[str], default)
    kwargs = validate_arguments(function, {})
    assert kwargs["x"] == ["a"] and kwargs["x"] is not default


class str_(str):  # noqa: N801 - a toolkit's own class that looks like str
    pass


@pytest.mark.parametrize(
    "hint",
    [dict, dict[str, Any], typing.Literal["a", "b"], typing.Annotated[str, "meta"], str_, list[str] | int, list[list[str]]],
    ids=repr,
)
def test_other_annotations_are_checked_by_the_model(prepared, hint) -> None:

    function = _tool(hint)
    assert argcheck.validator([(p, h) for _i, p, h in specs.call_parameters(function)]) is None
    by_model, by_check = _both(function, {"x": "a"})
    assert by_check == by_model


def test_a_field_default_is_checked_by_the_model(prepared) -> None:
    from pydantic import Field


    function = _tool(int, Field(default=3, ge=2))
    assert argcheck.validator([(p, h) for _i, p, h in specs.call_parameters(function)]) is None
    assert _outcome(function, {"x": 1})[0] == "refused"


def test_without_prepare_every_tool_is_checked_by_its_model() -> None:

    function = _tool(str)
    assert argcheck._SCHEMAS is None
    assert argcheck.validator([(p, h) for _i, p, h in specs.call_parameters(function)]) is None
