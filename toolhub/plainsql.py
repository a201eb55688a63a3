"""Reading rows with one plain SQL statement, converted back to Python as the ORM would.

For the few reads that every tool call makes (the web process's share of `POST .../invoke`),
Django compiling a query costs more than PostgreSQL answering it: 0.5-1 ms of Python for a
lookup by key that the server answers in well under 0.1 ms. Such a statement is made once per
connection vendor from the models' metadata (table and column names), so a changed model
changes it too, and each value goes through the field's own converters (JSON, datetimes,
booleans on SQLite), so the result is what the ORM would have given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from django.db import connection
from django.db.models import Field, Model


def table(model: type[Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def column(model: type[Model], name: str) -> str:
    return connection.ops.quote_name(cast(str, field(model, name).column))


def field(model: type[Model], name: str) -> Field:
    return cast(Field, model._meta.get_field(name))


def param(model: type[Model], name: str, value: Any) -> Any:
    """`value` as the database takes it for that field (a UUID on SQLite is hex text)."""
    return field(model, name).get_db_prep_value(value, connection)


Converters = tuple[tuple[Any, tuple[Any, ...]], ...]


def converters(model: type[Model], alias: str, names: Sequence[str]) -> Converters:
    """For each named field of `model` (read from the table aliased `alias`): its column
    expression and the converters the ORM would apply to its value."""
    found = []
    for name in names:
        col = field(model, name).get_col(alias)
        found.append((col, tuple(connection.ops.get_db_converters(col)) + tuple(col.get_db_converters(connection))))
    return tuple(found)


def convert(values: Sequence[Any], fields: Converters) -> list[Any]:
    """The raw `values` (one per field, in order) as the ORM would give them."""
    out = []
    for value, (col, chain) in zip(values, fields, strict=True):
        for step in chain:
            value = step(value, col, connection)
        out.append(value)
    return out
