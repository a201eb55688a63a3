"""The `$t:` resolver: every display string passes through `resolve` before it reaches a
page. LLM-facing strings (tool names, descriptions, parameter descriptions) never do.

Lookup order for a key: the toolkit's own translations in the active language, then in
the fallback language (English), then ToolHub's shared tool catalogue (the `llmtools`
gettext domain in locale/), then the key itself, marked as untranslated."""

from __future__ import annotations

import gettext as gettext_module
from dataclasses import dataclass
from functools import lru_cache

from django.conf import settings
from django.utils import translation

PREFIX = "$t:"
FALLBACK_LANGUAGE = "en"


@dataclass(frozen=True)
class Resolved:
    text: str
    translated: bool
    key: str | None = None

    def __str__(self) -> str:
        return self.text


@lru_cache(maxsize=16)
def _catalogue(language: str) -> gettext_module.NullTranslations:
    locale = translation.to_locale(language)
    return gettext_module.translation("llmtools", localedir=str(settings.LOCALE_PATHS[0]), languages=[locale], fallback=True)


def _from_catalogue(key: str, language: str) -> str | None:
    text = _catalogue(language).gettext(key)
    return text if text != key else None


def toolkit_translations(toolkit) -> dict[tuple[str, str], str]:
    """All of a toolkit's translations keyed by (language, key); cached on the instance so
    a page resolving many strings asks the database once."""
    cache = getattr(toolkit, "_translations_cache", None)
    if cache is None:
        cache = {(t.language, t.key): t.text for t in toolkit.translations.all()}
        toolkit._translations_cache = cache
    return cache


def resolve(text: str | None, *, toolkit=None, language: str | None = None) -> Resolved:
    if not text or not text.startswith(PREFIX):
        return Resolved(text or "", translated=True)
    key = text[len(PREFIX):].strip()
    language = (language or translation.get_language() or FALLBACK_LANGUAGE).lower()
    own = toolkit_translations(toolkit) if toolkit is not None else {}
    for lang in dict.fromkeys([language, language.split("-")[0], FALLBACK_LANGUAGE]):
        if (lang, key) in own:
            return Resolved(own[(lang, key)], translated=True, key=key)
    for lang in dict.fromkeys([language, FALLBACK_LANGUAGE]):
        found = _from_catalogue(key, lang)
        if found:
            return Resolved(found, translated=True, key=key)
    return Resolved(key, translated=False, key=key)
