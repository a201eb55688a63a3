"""Reading rows with one plain SQL statement, converted back to Python as the ORM would.

For the few reads that every tool call makes (the web process's share of `POST .../invoke`),
Django compiling a query costs more than PostgreSQL answering it: 0.5-1 ms of Python for a
lookup by key that the server answers in well under 0.1 ms. Such a statement is made once per
connection vendor from the models' metadata (table and column names), so a changed model
changes it too, and each value goes through the field's own converters (JSON, datetimes,
booleans on SQLite), so the result is what the ORM would have given.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

from django.db import connection
from django.db.models import Field, Model


@contextmanager
def cursor() -> Iterator[Any]:
    """A cursor for these statements: on PostgreSQL with TOOLHUB_DB_PREPARED, one that binds
    its parameters on the server, so that psycopg prepares each statement once per connection
    (after its second run: settings' `prepare_threshold`) instead of PostgreSQL parsing and
    planning it for every call. It is wrapped as Django wraps its own (so errors are Django's,
    for dbretry), and the connection's other cursors are untouched. While queries are logged
    (DEBUG, or a test that counts them) it is Django's own cursor, whose log shows each
    statement with its parameters."""
    prepared = connection.settings_dict.get("OPTIONS", {}).get("prepare_threshold")
    if connection.vendor != "postgresql" or not prepared or connection.queries_logged:
        with connection.cursor() as plain:
            yield plain
        return
    from django.db.backends.postgresql.base import ServerBindingCursor

    connection.ensure_connection()
    connection.validate_thread_sharing()
    # django-stubs type it with its own CursorWrapper; psycopg's own cursor class it is.
    binding: Any = ServerBindingCursor
    with connection.wrap_database_errors:
        raw = binding(connection.connection)
    with connection.make_cursor(raw) as wrapped:
        yield wrapped


def one_row(sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
    """The first row `sql` gives with `params` (on cursor()), or None."""
    with cursor() as statement:
        statement.execute(sql, params)
        return statement.fetchone()


def marks(values: Collection[Any]) -> str:
    """One placeholder per value."""
    return ", ".join(["%s"] * len(values))


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


@dataclass(frozen=True)
class Part:
    """One model's columns in a row read with plain SQL: the model, its table's alias in the
    statement, the attnames read (in the model's field order, as ``Model.from_db`` takes them)
    and their converters."""

    model: type[Model]
    alias: str
    names: tuple[str, ...]
    converters: Converters

    @classmethod
    def of(cls, model: type[Model], alias: str, wanted: Collection[str] | None = None) -> Part:
        """The part of `model` with the `wanted` attnames (all of its columns by default)."""
        names = tuple(f.attname for f in model._meta.concrete_fields if wanted is None or f.attname in wanted)
        return cls(model, alias, names, converters(model, alias, names))

    def select(self) -> str:
        """This part's columns for a SELECT list."""
        return ", ".join(f"{self.alias}.{column(self.model, name)}" for name in self.names)


def instances(row: Sequence[Any], parts: Sequence[Part]) -> list[Any]:
    """Each part of `row` (read with the parts' `select()`s, in order) as a model instance whose
    other fields are read on use; None for a part whose primary key is NULL (the side of a LEFT
    JOIN that found nothing)."""
    found: list[Any] = []
    position = 0
    for part in parts:
        values = convert(row[position : position + len(part.names)], part.converters)
        position += len(part.names)
        pk = part.model._meta.pk.attname
        if pk in part.names and values[part.names.index(pk)] is None:
            found.append(None)
        else:
            found.append(part.model.from_db(connection.alias, part.names, values))
    return found
