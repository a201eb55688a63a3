"""Keyset ("cursor") paging: a page is the rows after the last one shown, found through an
index, so the hundredth page costs what the first does (an OFFSET reads and throws away every
row before it, and a page number needs a COUNT of them all).

A cursor is the sort key of the row to continue from, signed (django.core.signing, with a salt
per list), so a client can hand it back but not forge one: an edited or foreign cursor is
refused as BadCursor, never run as a query. It is opaque to clients, not secret: it holds
values of a row the caller has just been shown."""

from __future__ import annotations

from django.core import signing

# Longer than any cursor ToolHub makes (a sort key of a title of 200 characters and a slug).
MAX_CURSOR_CHARS = 1024


class BadCursor(ValueError):
    pass


def encode(kind: str, key: list) -> str:
    return signing.dumps(key, salt=f"toolhub.keyset.{kind}", compress=True)


def decode(kind: str, cursor: str, *, length: int) -> list:
    """The key a cursor of `kind` holds, a list of `length` values; BadCursor for anything else."""
    if len(cursor) > MAX_CURSOR_CHARS:
        raise BadCursor("The cursor is too long.")
    try:
        key = signing.loads(cursor, salt=f"toolhub.keyset.{kind}")
    except signing.BadSignature:
        raise BadCursor("The cursor is not one this list gave out (it was changed, or is from another list).") from None
    if not isinstance(key, list) or len(key) != length:
        raise BadCursor("The cursor is not one this list gave out.")
    return key
