"""Encryption at rest for valve values: JSON in, Fernet tokens out.

This module knows nothing about Django. Settings hand it the configured list of keys
(`parse_keys` turns an environment string into that list and refuses anything malformed),
and models keep one `Vault` to encrypt and decrypt values.

The first key encrypts; every key decrypts. Rotating means putting a new key first, re-encrypting
every stored token (`Vault.rotate`, skipping those `Vault.needs_rotation` says are current), then
dropping the old key from the list.

No message raised from here ever contains a key or a plaintext value: these exceptions end up in
logs, error pages and the output of management commands.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Sequence
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

__all__ = [
    "GENERATE_KEY_COMMAND",
    "DecryptionError",
    "EncryptionKeyError",
    "Vault",
    "generate_key",
    "parse_keys",
]

GENERATE_KEY_COMMAND = 'python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"'

# A Fernet key is 32 random bytes written as url-safe base64 with its padding: 43 characters
# from the url-safe alphabet and a final "=".
_KEY_LENGTH = 44
_URLSAFE_ALPHABET = re.compile(r"[A-Za-z0-9_=-]*")
_KEY_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}=")
_QUOTES = "\"'`"


class EncryptionKeyError(ValueError):
    """The configured encryption keys are missing or malformed.

    The message names the offending key by its position (1-based), never by its value, and ends
    with the command that generates a fresh key.
    """

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(f"{problem} Generate a key with: {GENERATE_KEY_COMMAND}")


class DecryptionError(ValueError):
    """A stored token cannot be decrypted with any configured key, or does not hold JSON."""


def generate_key() -> str:
    """Return a fresh Fernet key as text, ready to be written to a settings file."""
    return Fernet.generate_key().decode("ascii")


def parse_keys(value: str | bytes | Sequence[str | bytes] | None) -> list[bytes]:
    """Turn the configured keys into a validated list, first key first.

    `value` is either one string holding comma-separated keys (the shape an environment variable
    has) or a sequence of keys. Surrounding whitespace is ignored; anything else that is not a
    well-formed Fernet key raises `EncryptionKeyError` saying which key and what is wrong.
    """
    if value is None:
        raise EncryptionKeyError("No encryption key is configured.")
    if isinstance(value, bytes):
        value = value.decode("ascii", errors="replace")
    if isinstance(value, str):
        if not value.strip():
            raise EncryptionKeyError("No encryption key is configured (the setting is empty).")
        raw_keys: list[str | bytes] = list(value.split(","))
    else:
        raw_keys = list(value)
        if not raw_keys:
            raise EncryptionKeyError("No encryption key is configured (the list is empty).")

    keys: list[bytes] = []
    for position, raw in enumerate(raw_keys, start=1):
        key = _check_key(raw, position=position, count=len(raw_keys))
        if key in keys:
            first = keys.index(key) + 1
            raise EncryptionKeyError(f"Encryption key {position} is the same as key {first}; list each key once.")
        keys.append(key)
    return keys


def _check_key(raw: str | bytes, *, position: int, count: int) -> bytes:
    """Validate one key and return it as bytes; the error messages never quote the key."""
    where = f"Encryption key {position} of {count}"
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("ascii")
        except UnicodeDecodeError:
            raise EncryptionKeyError(f"{where} contains non-ASCII bytes.") from None
    if not isinstance(raw, str):
        raise EncryptionKeyError(f"{where} is a {type(raw).__name__}, not a string.")
    text = raw.strip()
    if not text:
        raise EncryptionKeyError(f"{where} is empty (look for a stray comma or an unset variable).")
    if len(text) >= 2 and text[0] == text[-1] and text[0] in _QUOTES:
        raise EncryptionKeyError(f"{where} is wrapped in quotes; remove them.")
    if not _URLSAFE_ALPHABET.fullmatch(text):
        if "+" in text or "/" in text:
            raise EncryptionKeyError(
                f"{where} uses standard base64 ('+' or '/'); a Fernet key is url-safe base64 ('-' and '_')."
            )
        raise EncryptionKeyError(f"{where} contains characters outside the url-safe base64 alphabet.")
    if len(text) != _KEY_LENGTH:
        raise EncryptionKeyError(
            f"{where} is {len(text)} characters long; a Fernet key is 32 bytes written as"
            f" {_KEY_LENGTH} url-safe base64 characters."
        )
    if not _KEY_SHAPE.fullmatch(text):
        raise EncryptionKeyError(f"{where} must end with exactly one '=' (base64 padding) and have no other '='.")
    try:
        decoded = base64.urlsafe_b64decode(text.encode("ascii"))
    except (binascii.Error, ValueError):
        raise EncryptionKeyError(f"{where} is not valid url-safe base64.") from None
    if len(decoded) != 32:
        raise EncryptionKeyError(f"{where} decodes to {len(decoded)} bytes; a Fernet key is 32 url-safe base64 bytes.")
    return text.encode("ascii")


class Vault:
    """Encrypts JSON values under the first key and decrypts them under any key."""

    def __init__(self, keys: str | bytes | Sequence[str | bytes]) -> None:
        parsed = parse_keys(keys)
        fernets = [Fernet(key) for key in parsed]
        self._primary = fernets[0]
        self._all = MultiFernet(fernets)
        self._key_count = len(fernets)

    def __repr__(self) -> str:
        # The default repr would be harmless, but debug pages print locals: say nothing useful.
        return f"<Vault with {self._key_count} key(s)>"

    @property
    def key_count(self) -> int:
        return self._key_count

    def encrypt_json(self, obj: Any) -> str:
        """Serialise `obj` as JSON and encrypt it under the first key."""
        try:
            text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError):
            # The json module's messages can quote the offending value, so they are dropped.
            raise TypeError(f"A {type(obj).__name__} value could not be encoded as JSON for encryption.") from None
        return self._primary.encrypt(text.encode("utf-8")).decode("ascii")

    def decrypt_json(self, token: str | bytes) -> Any:
        """Decrypt a token made by `encrypt_json` with whichever configured key made it."""
        plaintext = self._decrypt(token)
        try:
            return json.loads(plaintext.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            # The decoder keeps the whole plaintext on the exception object, so it is not chained.
            raise DecryptionError("The decrypted value is not valid JSON.") from None

    def rotate(self, token: str | bytes) -> str:
        """Re-encrypt a token under the first key (whichever key encrypted it)."""
        try:
            rotated = self._all.rotate(_as_bytes(token))
        except InvalidToken:
            raise _undecryptable() from None
        return rotated.decode("ascii")

    def needs_rotation(self, token: str | bytes) -> bool:
        """Tell whether a token was encrypted under a key other than the first.

        Fernet tokens do not record which key made them, so this tries the first key alone and
        then all of them. A token no key can read raises `DecryptionError`: rotating cannot fix it.
        """
        data = _as_bytes(token)
        try:
            self._primary.decrypt(data)
        except InvalidToken:
            pass
        else:
            return False
        try:
            self._all.decrypt(data)
        except InvalidToken:
            raise _undecryptable() from None
        return True

    def _decrypt(self, token: str | bytes) -> bytes:
        try:
            return self._all.decrypt(_as_bytes(token))
        except InvalidToken:
            raise _undecryptable() from None


def _as_bytes(token: str | bytes) -> bytes:
    if isinstance(token, bytes):
        return token
    if isinstance(token, str):
        try:
            return token.encode("ascii")
        except UnicodeEncodeError:
            # A Fernet token is pure ASCII; anything else cannot be one.
            raise DecryptionError("The stored value is not a Fernet token.") from None
    raise TypeError(f"A token must be str or bytes, not {type(token).__name__}.")


def _undecryptable() -> DecryptionError:
    return DecryptionError(
        "The stored value cannot be decrypted with any configured encryption key (was the key"
        " that encrypted it removed from the list before rotation finished?)."
    )
