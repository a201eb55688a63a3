"""toolhub.vault.crypto: key parsing, JSON encryption, rotation, and messages that leak nothing."""

from __future__ import annotations

import base64

import pytest
from cryptography.fernet import Fernet

from toolhub.vault.crypto import (
    GENERATE_KEY_COMMAND,
    DecryptionError,
    EncryptionKeyError,
    Vault,
    generate_key,
    parse_keys,
)

KEY_A = Fernet.generate_key().decode()
KEY_B = Fernet.generate_key().decode()
KEY_C = Fernet.generate_key().decode()
PLAINTEXT = "sk-live-do-not-leak-4242"


def _key_error(value: object) -> str:
    with pytest.raises(EncryptionKeyError) as caught:
        parse_keys(value)  # type: ignore[arg-type]
    return str(caught.value)


# parse_keys


def test_it_accepts_a_single_key() -> None:
    assert parse_keys(KEY_A) == [KEY_A.encode()]


def test_it_accepts_a_comma_separated_string_with_spaces() -> None:
    assert parse_keys(f" {KEY_A} , {KEY_B}\n") == [KEY_A.encode(), KEY_B.encode()]


def test_it_accepts_a_list_of_str_and_bytes() -> None:
    assert parse_keys([KEY_A, KEY_B.encode()]) == [KEY_A.encode(), KEY_B.encode()]


def test_generate_key_makes_a_valid_key() -> None:
    assert parse_keys(generate_key())


@pytest.mark.parametrize("value", [None, "", "   ", []])
def test_it_rejects_a_missing_key(value: object) -> None:
    message = _key_error(value)
    assert "No encryption key is configured" in message
    assert GENERATE_KEY_COMMAND in message


def test_it_names_an_empty_entry_from_a_stray_comma() -> None:
    message = _key_error(f"{KEY_A},")
    assert "Encryption key 2 of 2 is empty" in message


def test_it_rejects_a_key_of_the_wrong_length() -> None:
    message = _key_error([KEY_A, KEY_B[:40]])
    assert "Encryption key 2 of 2 is 40 characters long" in message
    assert "32 bytes" in message
    assert GENERATE_KEY_COMMAND in message


def test_it_rejects_characters_outside_the_alphabet() -> None:
    message = _key_error("!" * 44)
    assert "Encryption key 1 of 1 contains characters outside the url-safe base64" in message


def test_it_explains_standard_base64() -> None:
    # A 32-byte key whose standard base64 form contains '+' or '/'.
    raw = bytes([0xFB, 0xFF] * 16)
    standard = base64.b64encode(raw).decode()
    assert "+" in standard or "/" in standard
    message = _key_error(standard)
    assert "standard base64" in message


def test_it_rejects_quoted_keys() -> None:
    message = _key_error(f'"{KEY_A}"')
    assert "wrapped in quotes" in message


def test_it_rejects_misplaced_padding() -> None:
    message = _key_error("=" + KEY_A[:-1])
    assert "exactly one '='" in message


def test_it_rejects_a_repeated_key() -> None:
    message = _key_error([KEY_A, KEY_B, KEY_A])
    assert "Encryption key 3 is the same as key 1" in message


def test_it_rejects_non_ascii_bytes() -> None:
    message = _key_error([b"\xff" * 44])
    assert "non-ASCII" in message


def test_key_errors_never_quote_the_key() -> None:
    bad_keys = [
        [KEY_A, KEY_B[:40]],
        [KEY_A, f"'{KEY_B}'"],
        [KEY_A, KEY_A],
        [KEY_B[:-1] + "!"],
        [KEY_C + "AAAA"],
    ]
    for keys in bad_keys:
        message = _key_error(keys)
        for key in (KEY_A, KEY_B, KEY_C):
            assert key not in message
            assert key[:20] not in message


def test_key_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        Vault("not a key")


# Vault


def test_it_round_trips_json_values() -> None:
    vault = Vault([KEY_A])
    for value in ["text", 42, 1.5, True, None, ["a", 1], {"nested": {"ü": "ß"}}]:
        token = vault.encrypt_json(value)
        assert isinstance(token, str)
        assert vault.decrypt_json(token) == value


def test_tokens_do_not_contain_the_plaintext() -> None:
    token = Vault([KEY_A]).encrypt_json(PLAINTEXT)
    assert PLAINTEXT not in token
    assert PLAINTEXT.encode() not in base64.urlsafe_b64decode(token)


def test_the_first_key_encrypts_and_every_key_decrypts() -> None:
    old = Vault([KEY_A]).encrypt_json({"v": 1})
    vault = Vault([KEY_B, KEY_A])
    assert vault.decrypt_json(old) == {"v": 1}
    new = vault.encrypt_json({"v": 2})
    assert Vault([KEY_B]).decrypt_json(new) == {"v": 2}
    with pytest.raises(DecryptionError):
        Vault([KEY_A]).decrypt_json(new)


def test_rotation_survives_dropping_the_old_key() -> None:
    values = [PLAINTEXT, {"api_key": PLAINTEXT}, 7]
    tokens = [Vault([KEY_A]).encrypt_json(value) for value in values]

    during = Vault([KEY_B, KEY_A])
    assert all(during.needs_rotation(token) for token in tokens)
    rotated = [during.rotate(token) for token in tokens]
    assert not any(during.needs_rotation(token) for token in rotated)

    after = Vault([KEY_B])
    assert [after.decrypt_json(token) for token in rotated] == values


def test_rotation_can_be_rerun_safely() -> None:
    vault = Vault([KEY_B, KEY_A])
    token = vault.encrypt_json("x")
    assert not vault.needs_rotation(token)
    assert vault.decrypt_json(vault.rotate(token)) == "x"


def test_needs_rotation_refuses_tokens_no_key_reads() -> None:
    token = Vault([KEY_C]).encrypt_json("x")
    with pytest.raises(DecryptionError):
        Vault([KEY_A, KEY_B]).needs_rotation(token)
    with pytest.raises(DecryptionError):
        Vault([KEY_A, KEY_B]).rotate(token)


def test_it_rejects_garbage_tokens() -> None:
    vault = Vault([KEY_A])
    for token in ["", "garbage", "gAAAAA" + "x" * 80, "ünïcode"]:
        with pytest.raises(DecryptionError):
            vault.decrypt_json(token)


def test_it_refuses_values_that_are_not_json() -> None:
    with pytest.raises(TypeError) as caught:
        Vault([KEY_A]).encrypt_json({PLAINTEXT: object()})
    assert PLAINTEXT not in str(caught.value)
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


def test_it_refuses_nan_without_quoting_it() -> None:
    with pytest.raises(TypeError) as caught:
        Vault([KEY_A]).encrypt_json({"x": float("nan")})
    assert "nan" not in str(caught.value).lower()


def test_decryption_errors_never_contain_plaintext_or_keys() -> None:
    # A token that decrypts but does not hold JSON: the decoder would keep the plaintext.
    not_json = Fernet(KEY_A.encode()).encrypt(PLAINTEXT.encode()).decode()
    vault = Vault([KEY_A, KEY_B])
    with pytest.raises(DecryptionError) as caught:
        vault.decrypt_json(not_json)
    error = caught.value
    assert PLAINTEXT not in str(error)
    assert error.__cause__ is None and error.__suppress_context__

    foreign = Vault([KEY_C]).encrypt_json(PLAINTEXT)
    with pytest.raises(DecryptionError) as caught:
        vault.decrypt_json(foreign)
    for secret in (PLAINTEXT, KEY_A, KEY_B, KEY_C):
        assert secret not in str(caught.value)
        assert secret not in repr(caught.value)


def test_the_vault_repr_shows_no_key() -> None:
    vault = Vault([KEY_A, KEY_B])
    assert KEY_A not in repr(vault) and KEY_B not in repr(vault)
    assert vault.key_count == 2


def test_it_rejects_tokens_of_the_wrong_type() -> None:
    with pytest.raises(TypeError):
        Vault([KEY_A]).decrypt_json(42)  # type: ignore[arg-type]
