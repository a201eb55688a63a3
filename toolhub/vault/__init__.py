"""Secrets at rest and in forms, without Django: `crypto` encrypts valve values with
MultiFernet, `secret_fields` says which schema fields are secret and masks them."""
