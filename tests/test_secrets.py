"""toolhub.vault.secret_fields: which fields are secret, masking, and merging a submission."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, Field, SecretStr

from toolhub.vault.secret_fields import (
    MASK,
    mask_values,
    merge_submitted,
    name_looks_secret,
    secret_fields,
    split_words,
)


def _one(prop: dict, name: str = "value") -> bool:
    return name in secret_fields({"type": "object", "properties": {name: prop}})


# Explicit markers


def test_format_password_is_secret() -> None:
    assert _one({"type": "string", "format": "password"})


def test_write_only_is_secret() -> None:
    assert _one({"type": "string", "writeOnly": True})


def test_open_webui_password_input_is_secret() -> None:
    assert _one({"type": "string", "input": {"type": "password"}})


def test_librechat_sensitive_is_secret() -> None:
    assert _one({"type": "string", "sensitive": True})


def test_other_inputs_and_false_flags_are_not_secret() -> None:
    assert not _one({"type": "string", "input": {"type": "select", "options": ["a"]}})
    assert not _one({"type": "string", "sensitive": False})
    assert not _one({"type": "string", "format": "email"})


def test_markers_are_found_through_refs_and_optional() -> None:
    schema = {
        "$defs": {"Token": {"type": "string", "format": "password"}},
        "properties": {
            "via_ref": {"$ref": "#/$defs/Token"},
            "optional": {"anyOf": [{"type": "string", "sensitive": True}, {"type": "null"}]},
            "wrapped": {"allOf": [{"$ref": "#/$defs/Token"}]},
            "plain": {"type": "string"},
        },
    }
    assert secret_fields(schema) == {"via_ref", "optional", "wrapped"}


def test_a_self_referencing_schema_does_not_loop() -> None:
    schema = {"$defs": {"A": {"$ref": "#/$defs/A"}}, "properties": {"x": {"$ref": "#/$defs/A"}}}
    assert secret_fields(schema) == set()


def test_pydantic_models_give_the_expected_secrets() -> None:
    class Valves(BaseModel):
        api_key: str = ""
        signing: SecretStr = SecretStr("")
        maybe: SecretStr | None = None
        hidden: str = Field("", json_schema_extra={"input": {"type": "password"}})
        flagged: str = Field("", json_schema_extra={"sensitive": True})
        max_tokens: int = 256
        use_api_key: bool = False
        mode: Literal["a", "b"] = "a"

    assert secret_fields(Valves.model_json_schema()) == {
        "api_key",
        "signing",
        "maybe",
        "hidden",
        "flagged",
    }


def test_odd_schemas_have_no_secrets() -> None:
    assert secret_fields({}) == set()
    assert secret_fields(None) == set()
    assert secret_fields({"properties": ["not", "a", "mapping"]}) == set()
    assert secret_fields({"properties": {"api_key": "not a mapping"}}) == set()


# Names


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        # Credential words, any case style.
        ("key", True),
        ("api_key", True),
        ("OPENAI_API_KEY", True),
        ("apiKey", True),
        ("APIKey", True),
        ("apikey", True),
        ("x-api-key", True),
        ("token", True),
        ("accessToken", True),
        ("refresh_token", True),
        ("bearer", True),
        ("secret", True),
        ("client_secret", True),
        ("password", True),
        ("db_passwd", True),
        ("passphrase", True),
        ("credential", True),
        ("credentials", True),
        ("auth", True),
        ("authorization", True),
        ("private_key", True),
        ("privateKey", True),
        ("ssh_key", True),
        ("secret_key2", True),
        ("api_keys", True),
        ("access_tokens", True),
        # Whole words only.
        ("keyword", False),
        ("keywords", False),
        ("monkey", False),
        ("tokenizer", False),
        ("author", False),
        ("authority", False),
        # Plurals that count or list things.
        ("max_tokens", False),
        ("tokens_limit", False),
        ("num_tokens", False),
        ("keys", False),
        # Quantities about credentials.
        ("token_limit", False),
        ("max_token", False),
        ("key_length", False),
        ("password_min_length", False),
        ("token_ttl", False),
        # Descriptions of credentials.
        ("api_key_header", False),
        ("token_url", False),
        ("auth_type", False),
        ("secret_name", False),
        ("aws_access_key_id", False),
        ("private_key_path", False),
        # Data-structure keys.
        ("sort_key", False),
        ("cache_key", False),
        # Nothing credential-like.
        ("model", False),
        ("base_url", False),
        ("", False),
    ],
)
def test_name_rule(name: str, secret: bool) -> None:
    assert name_looks_secret(name) is secret


def test_names_are_split_on_every_case_style() -> None:
    assert split_words("OPENAI_API_KEY") == ["OPENAI", "API", "KEY"]
    assert split_words("accessToken") == ["access", "Token"]
    assert split_words("APIKey2") == ["API", "Key", "2"]
    assert split_words("x-api-key") == ["x", "api", "key"]


def test_the_name_rule_ignores_booleans() -> None:
    assert not _one({"type": "boolean"}, name="api_key")
    assert not _one({"anyOf": [{"type": "boolean"}, {"type": "null"}]}, name="token")
    assert _one({"type": "string"}, name="api_key")
    assert _one({"type": "integer"}, name="api_key")
    assert _one({}, name="api_key")


def test_max_tokens_is_never_secret() -> None:
    assert not _one({"type": "integer", "default": 256}, name="max_tokens")
    assert not _one({"type": "string"}, name="max_tokens")


# Masking


def test_mask_hides_set_secrets_and_reports_which_are_set() -> None:
    values = {"api_key": "sk-123", "empty": "", "none": None, "model": "gpt"}
    masked, is_set = mask_values(values, {"api_key", "empty", "none", "absent"})
    assert masked == {"api_key": MASK, "empty": "", "none": None, "model": "gpt"}
    assert is_set == {"api_key": True, "empty": False, "none": False, "absent": False}
    assert values["api_key"] == "sk-123"


def test_mask_hides_non_string_secrets() -> None:
    masked, is_set = mask_values({"keys": ["a", "b"], "pin": 1234}, {"keys", "pin"})
    assert masked == {"keys": MASK, "pin": MASK}
    assert is_set == {"keys": True, "pin": True}


# Merging


STORED = {"api_key": "sk-old", "token": "t-old", "model": "gpt", "limit": 3}
SECRETS = {"api_key", "token"}


def test_the_mask_keeps_the_stored_secret() -> None:
    merged = merge_submitted(STORED, {"api_key": MASK, "token": MASK, "model": "x"}, SECRETS)
    assert merged == {"api_key": "sk-old", "token": "t-old", "model": "x"}


def test_an_empty_secret_keeps_the_stored_secret() -> None:
    merged = merge_submitted(STORED, {"api_key": "", "model": "x"}, SECRETS)
    assert merged["api_key"] == "sk-old"


def test_a_missing_secret_keeps_the_stored_secret() -> None:
    merged = merge_submitted(STORED, {"model": "x"}, SECRETS)
    assert merged == {"api_key": "sk-old", "token": "t-old", "model": "x"}


def test_clear_clears() -> None:
    merged = merge_submitted(STORED, {"api_key": MASK, "token": "", "model": "x"}, SECRETS, {"api_key"})
    assert "api_key" not in merged
    assert merged["token"] == "t-old"


def test_a_new_secret_replaces_the_stored_one_even_with_clear() -> None:
    merged = merge_submitted(STORED, {"api_key": "sk-new"}, SECRETS, {"api_key"})
    assert merged["api_key"] == "sk-new"


def test_none_is_an_explicit_value() -> None:
    assert merge_submitted(STORED, {"api_key": None}, SECRETS)["api_key"] is None


def test_non_secrets_come_only_from_the_submission() -> None:
    merged = merge_submitted(STORED, {"model": ""}, SECRETS)
    assert merged["model"] == ""
    assert "limit" not in merged


def test_clear_only_applies_to_secrets() -> None:
    merged = merge_submitted(STORED, {"model": "x"}, SECRETS, {"model"})
    assert merged["model"] == "x"


def test_the_mask_is_never_stored() -> None:
    merged = merge_submitted({}, {"api_key": MASK}, SECRETS)
    assert merged == {}
    assert MASK not in merge_submitted(STORED, {"api_key": MASK}, SECRETS).values()


def test_merge_does_not_modify_its_inputs() -> None:
    stored = dict(STORED)
    submitted = {"api_key": MASK}
    merge_submitted(stored, submitted, SECRETS, {"token"})
    assert stored == STORED
    assert submitted == {"api_key": MASK}
