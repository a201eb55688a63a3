"""A JSON model field that keeps the key order of objects on every database.

PostgreSQL's `jsonb` (Django's JSONField there) reorders object keys, but the order of a
schema's `properties` is the order of a form's fields and of a tool's parameters, and the
order of a manifest is the author's. This field stores JSON as text instead. Nothing queries
inside these values, so nothing is lost."""

from __future__ import annotations

import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models


class OrderedJSONField(models.TextField):
    description = "JSON stored as text, key order kept"
    # For django-stubs: the field holds any JSON value, not a str.
    _pyi_private_set_type: Any
    _pyi_private_get_type: Any
    _pyi_lookup_exact_type: Any

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return None if value is None else json.loads(value)

    def get_prep_value(self, value: Any) -> Any:
        if value is None:
            return None
        return json.dumps(value, ensure_ascii=False, cls=DjangoJSONEncoder)

    def value_to_string(self, obj: Any) -> str:
        return self.get_prep_value(self.value_from_object(obj)) or ""
