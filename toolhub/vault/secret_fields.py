"""Which valve fields are secret, and how secrets are masked and kept across edits.

No Django here. A field of a Valves/UserValves JSON schema is secret when any of these holds
(DESIGN.md, "Valves / UserValves"):

1. its schema says `format: password` (pydantic's `SecretStr`/`SecretBytes` also add
   `writeOnly: true`, which counts on its own too: a write-only value must not be shown back);
2. Open WebUI's `json_schema_extra={"input": {"type": "password"}}`, which lands in the property
   as `"input": {"type": "password"}`;
3. LibreChat's `sensitive: true`;
4. its name looks like a credential (see `name_looks_secret`).

Rules 1-3 are also looked for inside `$ref` targets and `anyOf`/`oneOf`/`allOf` branches, so
`Optional[SecretStr]` is secret.

Masking: a secret that has a value is shown as `MASK`; a form or API client that sends `MASK` (or
an empty string) back keeps the stored value. Clearing a secret is a separate, explicit request.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "MASK",
    "is_value_set",
    "mask_values",
    "merge_submitted",
    "name_looks_secret",
    "secret_fields",
    "split_words",
]

MASK = "********"

# Word parts that name a credential on their own.
_SECRET_WORDS = frozenset(
    {
        "key",
        "token",
        "secret",
        "secrets",
        "password",
        "passwords",
        "passwd",
        "pwd",
        "passphrase",
        "credential",
        "credentials",
        "auth",
        "authorization",
        "authentication",
        "bearer",
        "jwt",
        # The same ideas written as one word, as environment variables often are.
        "apikey",
        "apikeys",
        "apitoken",
        "accesskey",
        "accesstoken",
        "authtoken",
        "bearertoken",
        "refreshtoken",
        "secretkey",
        "privatekey",
        "clientsecret",
    }
)

# "tokens" and "keys" usually count LLM tokens (`max_tokens`) or name dictionary keys
# (`keys_to_keep`), so the plural is secret only right after a word that makes it a credential
# (`api_keys`, `access_tokens`).
_PLURALS = frozenset({"tokens", "keys"})
_CREDENTIAL_QUALIFIERS = frozenset({"api", "access", "auth", "bearer", "refresh", "secret", "private", "session", "id"})

# "key" is also a plain data-structure word; after these it is not a credential (`sort_key`).
_NON_CREDENTIAL_KEY_QUALIFIERS = frozenset(
    {
        "sort",
        "cache",
        "group",
        "partition",
        "primary",
        "foreign",
        "lookup",
        "index",
        "dedup",
        "dedupe",
        "routing",
        "idempotency",
        "hot",
        "shortcut",
        "music",
        "column",
        "field",
        "json",
        "dict",
        "map",
        "object",
        "label",
        "translation",
        "i18n",
    }
)

# A name that measures or limits something is a number about credentials, not a credential:
# `token_limit`, `max_token`, `key_length`, `token_ttl`.
_QUANTITY_WORDS = frozenset(
    {
        "max",
        "min",
        "num",
        "number",
        "count",
        "limit",
        "limits",
        "length",
        "len",
        "size",
        "ttl",
        "timeout",
        "budget",
        "expiry",
        "expires",
        "expiration",
        "lifetime",
        "window",
        "rate",
        "quota",
        "usage",
    }
)

# After the credential word, these turn the name into something about the credential rather
# than the credential itself: `api_key_header`, `token_url`, `auth_type`, `secret_name`,
# `aws_access_key_id`.
_DESCRIPTOR_WORDS = frozenset(
    {
        "type",
        "kind",
        "name",
        "names",
        "header",
        "id",
        "ids",
        "url",
        "uri",
        "endpoint",
        "path",
        "file",
        "filename",
        "dir",
        "env",
        "var",
        "variable",
        "field",
        "param",
        "parameter",
        "prefix",
        "format",
        "mode",
        "method",
        "scheme",
        "enabled",
        "required",
        "location",
        "source",
        "style",
    }
)

# Splits snake_case, kebab-case, camelCase, PascalCase, SCREAMING_CASE and digits apart:
# "OPENAI_API_KEY" -> OPENAI API KEY, "accessToken" -> access Token, "APIKey2" -> API Key 2.
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def split_words(name: str) -> list[str]:
    """Split an identifier into its word parts, keeping their case."""
    return _WORD.findall(name)


def name_looks_secret(name: str) -> bool:
    """Tell whether a field name names a credential.

    The name is split into lower-case word parts; it is secret when a part is a credential word
    (`key`, `token`, `secret`, `password`, `passwd`, `credential(s)`, `auth`, `apikey`, ...), unless

    - a quantity word appears anywhere (`max_token`, `token_limit`, `key_length`);
    - a descriptor word follows the last credential word (`api_key_header`, `token_url`,
      `auth_type`, `aws_access_key_id`);
    - the credential word is `key` right after a data-structure word (`sort_key`, `cache_key`).

    Whole-word matching keeps `keyword`, `monkey`, `tokenizer` and `authority` out. The plurals
    `tokens`/`keys` count only after `api`, `access`, ... (`api_keys` yes; `max_tokens`,
    `tokens_limit`, `keys` no).
    """
    parts = [part.lower() for part in split_words(name)]
    last_secret: int | None = None
    for index, part in enumerate(parts):
        previous = parts[index - 1] if index else ""
        if part in _SECRET_WORDS:
            if part == "key" and previous in _NON_CREDENTIAL_KEY_QUALIFIERS:
                continue
            last_secret = index
        elif part in _PLURALS and previous in _CREDENTIAL_QUALIFIERS:
            last_secret = index
    if last_secret is None:
        return False
    if any(part in _QUANTITY_WORDS for part in parts):
        return False
    return not any(part in _DESCRIPTOR_WORDS for part in parts[last_secret + 1 :])


def secret_fields(schema: Mapping[str, Any] | None) -> set[str]:
    """Return the names of the schema's top-level properties that hold secrets."""
    if not isinstance(schema, Mapping):
        return set()
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return set()
    found: set[str] = set()
    for name, prop in properties.items():
        if not isinstance(name, str) or not isinstance(prop, Mapping):
            continue
        if _marked_secret(prop, schema, seen=set()):
            found.add(name)
        elif not _is_plain_boolean(prop, schema) and name_looks_secret(name):
            # A flag cannot hold a credential, so `use_api_key: bool` is not secret.
            found.add(name)
    return found


def _marked_secret(node: Mapping[str, Any], root: Mapping[str, Any], *, seen: set[str]) -> bool:
    """Look for an explicit secret marker in a property, its `$ref` target and its branches."""
    if node.get("format") == "password" or node.get("writeOnly") is True:
        return True
    if node.get("sensitive") is True:
        return True
    hint = node.get("input")
    if isinstance(hint, Mapping) and hint.get("type") == "password":
        return True
    for branch in _branches(node, root, seen=seen):
        if _marked_secret(branch, root, seen=seen):
            return True
    return False


def _is_plain_boolean(node: Mapping[str, Any], root: Mapping[str, Any]) -> bool:
    """True for `bool` and `Optional[bool]` properties."""
    types = _types_of(node)
    if types:
        return types <= {"boolean", "null"} and "boolean" in types
    branch_types: set[str] = set()
    for branch in _branches(node, root, seen=set()):
        branch_types |= _types_of(branch) or {"?"}
    return bool(branch_types) and branch_types <= {"boolean", "null"} and "boolean" in branch_types


def _types_of(node: Mapping[str, Any]) -> set[str]:
    declared = node.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {item for item in declared if isinstance(item, str)}
    return set()


def _branches(node: Mapping[str, Any], root: Mapping[str, Any], *, seen: set[str]) -> Iterable[Mapping[str, Any]]:
    """Yield the sub-schemas a property is made of: its `$ref` target and combinator branches."""
    ref = node.get("$ref")
    if isinstance(ref, str) and ref not in seen:
        seen.add(ref)
        target = follow_local_ref(ref, root)
        if target is not None:
            yield target
    for combinator in ("anyOf", "oneOf", "allOf"):
        branches = node.get(combinator)
        if isinstance(branches, list):
            for branch in branches:
                if isinstance(branch, Mapping):
                    yield branch


def follow_local_ref(ref: str, root: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Resolve a local `#/...` JSON pointer; remote references are never fetched."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return None
    node: Any = root
    for token in ref[2:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, Mapping) or token not in node:
            return None
        node = node[token]
    return node if isinstance(node, Mapping) else None


def is_value_set(value: Any) -> bool:
    """A secret counts as set when it holds something other than nothing or an empty value."""
    return value is not None and value != "" and value != [] and value != {}


def mask_values(values: Mapping[str, Any], secrets: Iterable[str]) -> tuple[dict[str, Any], dict[str, bool]]:
    """Return a copy of `values` with every set secret replaced by `MASK`, and which are set.

    The second dict has an entry for every secret name, present in `values` or not, so a form can
    say "not set" for secrets that were never stored. An unset secret keeps its empty value
    (`None`, `""`) in the masked copy: there is nothing to hide.
    """
    secret_names = set(secrets)
    masked: dict[str, Any] = {}
    for name, value in values.items():
        if name in secret_names and is_value_set(value):
            masked[name] = MASK
        else:
            masked[name] = value
    is_set = {name: is_value_set(values.get(name)) for name in sorted(secret_names)}
    return masked, is_set


def merge_submitted(
    stored: Mapping[str, Any],
    submitted: Mapping[str, Any],
    secrets: Iterable[str],
    clear: Iterable[str] = (),
) -> dict[str, Any]:
    """Combine a submission with the stored values into the values to store next.

    - `submitted` is the complete new set of non-secret values: a non-secret field it leaves out
      goes back to its default (it is not carried over from `stored`).
    - A secret submitted as `MASK` or `""`, or left out, keeps its stored value, unless its name is
      in `clear`, in which case it is removed (its default applies). Leaving a secret out keeps it
      because clearing must be an explicit action.
    - A secret submitted with any other value (including `None`, the API's way of saying "no
      value") takes that value; a new value wins over a clear request for the same field.
    - `MASK` itself is never stored.
    """
    secret_names = set(secrets)
    to_clear = set(clear) & secret_names
    merged: dict[str, Any] = {}
    for name, value in submitted.items():
        if name in secret_names and _means_unchanged(value):
            continue
        merged[name] = value
    for name in secret_names:
        if name in merged:
            continue
        if name in to_clear:
            continue
        if name in stored:
            merged[name] = stored[name]
    return merged


def _means_unchanged(value: Any) -> bool:
    return isinstance(value, str) and value in (MASK, "")
