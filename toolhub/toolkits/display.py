"""The `$t:` resolver: every display string passes through `resolve` before it reaches a
page. LLM-facing strings (tool names, descriptions, parameter descriptions) never do.

A display string that starts with `$t:` is a translation key (`$t:bad_calculator.name`);
anything else is shown exactly as written. Lookup order for a key:

1. the toolkit's own translations in the requested language (`pl-PL` is tried as `pl-pl`,
   then as the dashboard language it falls back to, `pl`),
2. the toolkit's own translations in English,
3. ToolHub's shared tool catalogue, the `llmtools` gettext domain in `locale/` (requested
   language, then English),
4. the key itself, flagged as untranslated so admins can see what needs a translation.

This module also lists the keys a revision uses (`revision_keys`) and holds the writes of the
Translations tab (`translation_save`, `translation_import`), so everything that touches a
toolkit's translations is in one place.
"""

from __future__ import annotations

import gettext as gettext_module
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from django.utils import translation
from django.utils.translation import gettext as _

from toolhub.toolkits.models import Revision, Toolkit, Translation

PREFIX = "$t:"
FALLBACK_LANGUAGE = "en"
CATALOGUE_DOMAIN = "llmtools"
# The length of Translation.key; a longer key could not be stored.
MAX_KEY_LENGTH = 200
MAX_TEXT_LENGTH = 10_000


@dataclass(frozen=True)
class Resolved:
    text: str
    translated: bool
    key: str | None = None
    # Where the text came from: "text" (no key), "toolkit", "catalogue" or "missing".
    source: str = "text"

    def __str__(self) -> str:
        return self.text


# -- Languages ------------------------------------------------------------------------------


def language_codes() -> list[str]:
    """The dashboard's languages (settings.LANGUAGES), in their order."""
    return [code for code, _name in settings.LANGUAGES]


def normalise_language(code: str | None) -> str | None:
    """The dashboard language a code stands for (`pl-PL` → `pl`, `zh_Hans` and `zh-CN` →
    `zh-hans`), or None when ToolHub has no such language."""
    if not code:
        return None
    code = code.strip().replace("_", "-").lower()
    if code in language_codes():
        return code
    try:
        return translation.get_supported_language_variant(code)
    except LookupError:
        return None


# What a language tag looks like. Anything else (a `?lang=` value is whatever a client
# sends) is never turned into a catalogue path.
_LANGUAGE_TAG = re.compile(r"[a-z]{2,3}(?:-[a-z0-9]{1,8})*")


def language_chain(language: str | None) -> list[str]:
    """The languages to try for a request, most specific first, ending in English."""
    requested = (language or translation.get_language() or FALLBACK_LANGUAGE).strip().replace("_", "-").lower()
    if not _LANGUAGE_TAG.fullmatch(requested):
        return [FALLBACK_LANGUAGE]
    chain = [requested, requested.split("-")[0], normalise_language(requested), FALLBACK_LANGUAGE]
    return [code for code in dict.fromkeys(chain) if code]


# -- The shared catalogue -------------------------------------------------------------------


@lru_cache(maxsize=32)
def _catalogue(language: str) -> gettext_module.NullTranslations | None:
    """The compiled `llmtools` catalogue of one language, read straight from its .mo file.

    The stdlib reader is used rather than Django's: Django only loads the `django` domain,
    and `gettext.translation()` would guess at locale aliases (`zh_Hans`) we do not want."""
    locale_name = translation.to_locale(language)
    for base in settings.LOCALE_PATHS:
        path = Path(base) / locale_name / "LC_MESSAGES" / f"{CATALOGUE_DOMAIN}.mo"
        if path.is_file():
            with path.open("rb") as handle:
                return gettext_module.GNUTranslations(handle)
    return None


def catalogue_text(key: str, language: str) -> str | None:
    catalogue = _catalogue(language)
    if catalogue is None:
        return None
    text = catalogue.gettext(key)
    return text if text and text != key else None


# -- Resolving ------------------------------------------------------------------------------


def is_key(text: Any) -> bool:
    return isinstance(text, str) and text.startswith(PREFIX) and bool(text[len(PREFIX):].strip())


def key_of(text: str) -> str:
    return text[len(PREFIX):].strip()


def toolkit_translations(toolkit: Toolkit) -> dict[tuple[str, str], str]:
    """All of a toolkit's translations keyed by (language, key); cached on the instance so
    a page resolving many strings asks the database once."""
    cache = getattr(toolkit, "_translations_cache", None)
    if cache is None:
        cache = {(t.language, t.key): t.text for t in toolkit.translations.all() if t.text}
        toolkit._translations_cache = cache
    return cache


def forget_translations(toolkit: Toolkit) -> None:
    """Drop the per-instance cache after a write, so the same request shows the new texts."""
    toolkit.__dict__.pop("_translations_cache", None)


def resolve(text: str | None, *, toolkit: Toolkit | None = None, language: str | None = None) -> Resolved:
    """A display string for the active (or given) language. Text without the `$t:` prefix
    comes back unchanged."""
    if not is_key(text):
        return Resolved(text or "", translated=True)
    key = key_of(text)
    chain = language_chain(language)
    own = toolkit_translations(toolkit) if toolkit is not None else {}
    # The toolkit's own words win over the shared catalogue, even its English ones: a
    # toolkit that reuses a catalogue key on purpose gave it its own meaning.
    for lang in chain:
        if (lang, key) in own:
            return Resolved(own[(lang, key)], translated=True, key=key, source="toolkit")
    for lang in chain:
        found = catalogue_text(key, lang)
        if found:
            return Resolved(found, translated=True, key=key, source="catalogue")
    return Resolved(key, translated=False, key=key, source="missing")


def _display_or_written(display: Any, written: Any, *, toolkit: Toolkit | None, language: str | None) -> Resolved:
    """A display string resolved, or, where there is none, the LLM-facing text as written
    (never resolved, even if it happens to start with the prefix)."""
    if isinstance(display, str) and display.strip():
        return resolve(display, toolkit=toolkit, language=language)
    return Resolved(written if isinstance(written, str) else "", translated=True)


@dataclass(frozen=True)
class ToolDisplay:
    name: Resolved
    description: Resolved
    parameters: dict[str, Resolved]


def tool_display(*, revision: Revision | None, toolkit: Toolkit | None, language: str | None = None) -> dict[str, ToolDisplay]:
    """What a person is shown for each tool of a revision, by tool name. A RAGFlow plugin's
    `displayName`/`displayDescription` (its own and its parameters') are resolved; tools
    without display strings show their LLM-facing name and descriptions as written."""
    if revision is None:
        return {}
    meta = revision.plugin_metadata if isinstance(revision.plugin_metadata, Mapping) else {}
    shown: dict[str, ToolDisplay] = {}

    def shown_as(display: Any, text: Any) -> Resolved:
        return _display_or_written(display, text, toolkit=toolkit, language=language)

    for spec in revision.tools or []:
        function = spec.get("function", {}) if isinstance(spec, Mapping) else {}
        name = function.get("name", "")
        properties = (function.get("parameters") or {}).get("properties") or {}
        written = {pname: (p or {}).get("description", "") for pname, p in properties.items()}
        if meta and meta.get("name") == name:
            declared = meta.get("parameters") if isinstance(meta.get("parameters"), Mapping) else {}
            params = {pname: p for pname, p in declared.items() if isinstance(p, Mapping)}
            for pname, param in params.items():
                written.setdefault(pname, param.get("description", ""))

            shown[name] = ToolDisplay(
                name=shown_as(meta.get("displayName"), name),
                description=shown_as(meta.get("displayDescription"), function.get("description", "")),
                parameters={
                    pname: shown_as(params.get(pname, {}).get("displayDescription"), text)
                    for pname, text in written.items()
                },
            )
        else:
            shown[name] = ToolDisplay(
                name=Resolved(name, translated=True),
                description=Resolved(function.get("description", ""), translated=True),
                parameters={pname: Resolved(text or "", translated=True) for pname, text in written.items()},
            )
    return shown


# -- The keys a revision uses ---------------------------------------------------------------

# Schema keywords whose values are data (defaults, examples, allowed values), not display
# strings; a `$t:` string inside them is left alone.
_SCHEMA_DATA = frozenset({"default", "examples", "const", "enum"})


def display_texts(*, toolkit: Toolkit, revision: Revision | None, language: str) -> dict[str, Any]:
    """A toolkit's display strings resolved for a language, as the API shows them: the title,
    the frontmatter description, and each tool's display name and descriptions. LLM-facing
    strings are never resolved: where a tool has no display string, its LLM-facing text is
    shown as written."""
    manifest = revision.manifest if revision else {}
    title = revision.title if revision else toolkit.title
    shown_tools = tool_display(revision=revision, toolkit=toolkit, language=language)
    plugin = (revision.plugin_metadata or {}).get("name") if revision else None
    if manifest.get("description"):
        description = resolve(manifest["description"], toolkit=toolkit, language=language).text
    elif plugin in shown_tools:
        # A RAGFlow plugin without frontmatter: people see its displayDescription, as in RAGFlow.
        description = shown_tools[plugin].description.text
    else:
        description = revision.description if revision else ""
    tools = {
        name: {
            "name": shown.name.text,
            "description": shown.description.text,
            "parameters": {pname: text.text for pname, text in shown.parameters.items()},
        }
        for name, shown in shown_tools.items()
    }
    return {
        "title": resolve(title, toolkit=toolkit, language=language).text,
        "description": description,
        "tools": tools,
    }


@dataclass(frozen=True)
class KeyUse:
    key: str
    # Where the revision uses it, e.g. "title" or "tool bad_calculator › parameter a".
    places: tuple[str, ...] = field(default_factory=tuple)


def _schema_strings(node: Any, path: str) -> Iterator[tuple[str, str]]:
    """(place, text) of every `title`/`description` in a JSON schema, nested models included."""
    if isinstance(node, Mapping):
        for name, value in node.items():
            if name in ("title", "description") and isinstance(value, str):
                yield (path + " › " if path else "") + (_("title") if name == "title" else _("description")), value
            elif name in ("properties", "$defs", "definitions") and isinstance(value, Mapping):
                for child, schema in value.items():
                    yield from _schema_strings(schema, f"{path} › {child}" if path else str(child))
            elif name not in _SCHEMA_DATA and isinstance(value, Mapping | list):
                yield from _schema_strings(value, path)
    elif isinstance(node, list):
        for item in node:
            yield from _schema_strings(item, path)


def revision_display_strings(revision: Revision) -> Iterator[tuple[str, str]]:
    """(place, text) of every display string of a revision. LLM-facing strings (a tool's
    `name`, `description`, parameter `description`) are deliberately not among them."""
    yield _("title"), revision.title
    # The frontmatter's description, not `revision.description`: a RAGFlow plugin without
    # one falls back to its LLM-facing description, which is never translated.
    yield _("description"), (revision.manifest or {}).get("description")
    meta = revision.plugin_metadata or {}
    if isinstance(meta, Mapping):
        tool = meta.get("name") or "tool"
        yield _("tool %(tool)s › display name") % {"tool": tool}, meta.get("displayName")
        yield _("tool %(tool)s › display description") % {"tool": tool}, meta.get("displayDescription")
        parameters = meta.get("parameters")
        if isinstance(parameters, Mapping):
            for pname, param in parameters.items():
                if isinstance(param, Mapping):
                    place = _("tool %(tool)s › parameter %(name)s") % {"tool": tool, "name": pname}
                    yield place, param.get("displayDescription")
    for label, schema in (("Valves", revision.valves_schema), ("UserValves", revision.user_valves_schema)):
        for place, text in _schema_strings(schema, ""):
            yield f"{label} › {place}", text


def revision_keys(revision: Revision | None) -> list[KeyUse]:
    """Every `$t:` key a revision uses, in the order a reader meets them, with its places."""
    if revision is None:
        return []
    places: dict[str, list[str]] = {}
    for place, text in revision_display_strings(revision):
        if is_key(text):
            places.setdefault(key_of(text), []).append(place)
    return [KeyUse(key=key, places=tuple(where)) for key, where in places.items()]


# -- The Translations tab -------------------------------------------------------------------


@dataclass
class Cell:
    language: str
    text: str
    # What a reader of this language sees when the toolkit has no text of its own here.
    fallback: Resolved | None = None

    @property
    def missing(self) -> bool:
        return not self.text


@dataclass
class Row:
    key: str
    places: tuple[str, ...]
    used: bool
    cells: list[Cell]

    @property
    def shown_json(self) -> str:
        """The texts the row was shown with, posted back so a save changes only edited cells."""
        return json.dumps({cell.language: cell.text for cell in self.cells}, ensure_ascii=False)


def translation_table(*, toolkit: Toolkit, revision: Revision | None) -> list[Row]:
    """The Translations tab: every key the revision uses (in order), then keys the toolkit
    has translations for but the revision no longer uses (alphabetically), each with one cell
    per dashboard language."""
    own = toolkit_translations(toolkit)
    languages = language_codes()
    uses = revision_keys(revision)
    used = {use.key for use in uses}
    unused = sorted({key for (_lang, key) in own} - used)
    rows = []
    for key, places, is_used in [(u.key, u.places, True) for u in uses] + [(k, (), False) for k in unused]:
        cells = []
        for lang in languages:
            text = own.get((lang, key), "")
            fallback = None
            if not text:
                # Shown beside an empty cell, so a translator sees what readers get today.
                fallback = resolve(PREFIX + key, toolkit=toolkit, language=lang)
            cells.append(Cell(language=lang, text=text, fallback=fallback))
        rows.append(Row(key=key, places=places, used=is_used, cells=cells))
    return rows


def translation_export(*, toolkit: Toolkit, revision: Revision | None) -> dict[str, dict[str, str]]:
    """`{"fr": {"bad_calculator.name": "…"}}` for every language, with every key the
    revision uses (an empty string where a translation is missing, so translators see what
    to fill in) and every stored translation, unused ones included."""
    exported: dict[str, dict[str, str]] = {lang: {} for lang in language_codes()}
    for row in translation_table(toolkit=toolkit, revision=revision):
        for cell in row.cells:
            if cell.text or row.used:
                exported[cell.language][row.key] = cell.text
    return exported


class TranslationsInvalid(ValueError):
    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


def _check_key(key: Any, where: str) -> list[str]:
    if not isinstance(key, str) or not key.strip():
        return [_("%(where)s: a key must be a non-empty string.") % {"where": where}]
    if key.startswith(PREFIX):
        return [_("%(where)s: write the key without the %(prefix)s prefix.") % {"where": where, "prefix": PREFIX}]
    if key != key.strip():
        return [_("%(where)s: a key may not start or end with spaces.") % {"where": where}]
    if len(key) > MAX_KEY_LENGTH:
        return [_("%(where)s: a key may have at most %(n)s characters.") % {"where": where, "n": MAX_KEY_LENGTH}]
    return []


def _json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "array" if isinstance(value, list) else "object"


def parse_translations(data: Any) -> dict[str, dict[str, str]]:
    """Check an import document and return it with language codes normalised. Raises
    TranslationsInvalid listing every problem found; an empty text means "no translation"."""
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise TranslationsInvalid([_("This is not valid JSON: %(error)s") % {"error": exc}]) from None
    if not isinstance(data, Mapping):
        example = '{"fr": {"bad_calculator.name": "…"}}'
        raise TranslationsInvalid([_("Expected a JSON object of languages, such as %(example)s.") % {"example": example}])
    errors: list[str] = []
    parsed: dict[str, dict[str, str]] = {}
    codes = language_codes()
    for raw_lang, texts in data.items():
        lang = str(raw_lang).strip().replace("_", "-").lower()
        if lang not in codes:
            message = _("Unknown language “%(language)s”; ToolHub has %(languages)s.")
            errors.append(message % {"language": raw_lang, "languages": ", ".join(codes)})
            continue
        if lang in parsed:
            errors.append(_("The language “%(language)s” appears twice.") % {"language": lang})
            continue
        if not isinstance(texts, Mapping):
            errors.append(_("%(language)s: expected an object of keys and texts.") % {"language": raw_lang})
            continue
        parsed[lang] = {}
        for key, text in texts.items():
            where = f"{raw_lang} › {key}"
            problems = _check_key(key, where)
            if not isinstance(text, str):
                message = _("%(where)s: the text must be a string, not %(type)s.")
                problems.append(message % {"where": where, "type": _json_type(text)})
            elif len(text) > MAX_TEXT_LENGTH:
                message = _("%(where)s: a text may have at most %(n)s characters.")
                problems.append(message % {"where": where, "n": MAX_TEXT_LENGTH})
            errors.extend(problems)
            if not problems:
                parsed[lang][key] = text
    if errors:
        raise TranslationsInvalid(errors)
    return parsed


def translation_save(*, toolkit: Toolkit, texts: Mapping[tuple[str, str], str]) -> int:
    """Set (language, key) → text for a toolkit; an empty text removes that translation.
    Unknown languages and bad keys are refused before anything is written. Returns how many
    translations changed."""
    errors = []
    codes = language_codes()
    for lang, key in texts:
        if lang not in codes:
            errors.append(_("Unknown language “%(language)s”.") % {"language": lang})
        errors.extend(_check_key(key, f"{lang} › {key}"))
    for (lang, key), text in texts.items():
        if not isinstance(text, str) or len(text) > MAX_TEXT_LENGTH:
            message = _("%(where)s: a text may have at most %(n)s characters.")
            errors.append(message % {"where": f"{lang} › {key}", "n": MAX_TEXT_LENGTH})
    if errors:
        raise TranslationsInvalid(errors)
    changed = 0
    with transaction.atomic():
        stored = {(t.language, t.key): t for t in toolkit.translations.select_for_update()}
        for (lang, key), text in texts.items():
            # Trailing whitespace from a textarea is never meant; inner line breaks are kept.
            text = text.strip()
            current = stored.get((lang, key))
            if not text:
                if current is not None:
                    current.delete()
                    changed += 1
            elif current is None:
                Translation.objects.create(toolkit=toolkit, language=lang, key=key, text=text)
                changed += 1
            elif current.text != text:
                current.text = text
                current.save(update_fields=["text"])
                changed += 1
    forget_translations(toolkit)
    return changed


def translation_import(*, toolkit: Toolkit, data: Any) -> int:
    """Import a JSON document (text, bytes or already parsed): all of it or, on any error,
    none of it. Empty texts are skipped, so importing never deletes. Returns how many
    translations changed."""
    parsed = parse_translations(data)
    texts = {(lang, key): text for lang, entries in parsed.items() for key, text in entries.items() if text.strip()}
    return translation_save(toolkit=toolkit, texts=texts)


def language_names() -> list[tuple[str, str]]:
    """(code, name in the active language) of the dashboard's languages, in settings order."""
    return [(code, str(name)) for code, name in settings.LANGUAGES]


def safe_link(value: str) -> str | None:
    """The URL if hostile text may become a link: only http(s), so a `javascript:` URL in hostile
    frontmatter stays text, and nothing that fails to parse."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number.
    except ValueError:
        return None
    return value if parts.scheme in ("http", "https") and parts.netloc else None
