"""The `$t:` resolver, the shared `llmtools` catalogue, a toolkit's Translations tab (with
JSON import and export), `display` in the API, and the language a signed-in user chose.

People (tests/conftest.py): alice owns the toolkits, bob is another author, carol a plain
user, admin an admin."""

from __future__ import annotations

import ast
import gettext
import json
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.template import Context, Template
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.urls import path
from django.utils import translation

import toolhub.urls
from tests.conftest import EXAMPLES, example
from toolhub.accounts.models import Profile
from toolhub.runtime.loader import ragflow_spec
from toolhub.toolkits import display, lifecycle, services
from toolhub.toolkits.models import Status, Toolkit, Translation
from toolhub.toolkits.views import i18n as views_i18n

# Until toolhub/urls.py routes /i18n/setlang/ to ToolHub's own view, the tests that need it
# use this urlconf: the project's, with that one route put in front.
urlpatterns = [path("i18n/setlang/", views_i18n.set_language, name="set_language"), *toolhub.urls.urlpatterns]
WITH_SETLANG = pytest.mark.urls(__name__)

KEYS = ["bad_calculator.name", "bad_calculator.description", "bad_calculator.params.a", "bad_calculator.params.b"]
FRENCH = {
    "bad_calculator.name": "Calculatrice défaillante",
    "bad_calculator.description": "Additionne deux nombres et se trompe exprès sur la somme : une démonstration, "
    "pas un outil sur lequel compter.",
    "bad_calculator.params.a": "Le premier nombre",
    "bad_calculator.params.b": "Le second nombre",
}
TURKISH = {
    "bad_calculator.name": "Hatalı hesap makinesi",
    "bad_calculator.description": "İki sayıyı toplar ve toplamı bilerek yanlış verir: güvenilecek bir araç değil, "
    "bir gösterimdir.",
    "bad_calculator.params.a": "Birinci sayı",
    "bad_calculator.params.b": "İkinci sayı",
}


@pytest.fixture(autouse=True)
def _english_unless_asked():
    """Each test starts in English and leaves the language as it found it: a request
    activates its language for the rest of the thread, so it would leak into later tests."""
    with translation.override("en"):
        yield


def _plugin_metadata() -> dict:
    """What bad_calculator's `get_metadata()` returns, read from the demo file without
    running it (the web process never runs toolkit code)."""
    tree = ast.parse((EXAMPLES / "bad_calculator.py").read_text())
    function = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "get_metadata")
    returned = next(n for n in ast.walk(function) if isinstance(n, ast.Return))
    return ast.literal_eval(returned.value)


def make_ready(toolkit: Toolkit, *, metadata: dict | None = None, valves_schema: dict | None = None) -> Toolkit:
    """Mark the latest revision ready with what the sandbox's introspection reports, the way
    the worker does, without a build."""
    revision = toolkit.latest_revision()
    if revision.kind == "ragflow":
        metadata = metadata or _plugin_metadata()
        revision.tools = [ragflow_spec(metadata)]
        revision.plugin_metadata = {**metadata, "version": "1.0.0"}
    revision.valves_schema = valves_schema
    revision.set_status(Status.READY)
    revision.save()
    lifecycle.promote(revision=revision)
    return Toolkit.objects.get(pk=toolkit.pk)


@pytest.fixture
def calculator(alice, upload) -> Toolkit:
    """bad_calculator, owned by alice, ready."""
    return make_ready(upload(alice, example("bad_calculator"), slug="bad_calculator"))


def _translate(toolkit: Toolkit, language: str, key: str, text: str) -> None:
    Translation.objects.update_or_create(toolkit=toolkit, language=language, key=key, defaults={"text": text})
    display.forget_translations(toolkit)


KEYED_SOURCE = '''"""
title: $t:notes.title
description: $t:notes.description
author: tests
"""
from pydantic import BaseModel, Field


class Tools:
    class Valves(BaseModel):
        api_key: str = Field("", title="$t:notes.valves.api_key", description="$t:notes.valves.api_key_help")

    def note(self, text: str) -> str:
        """$t:this.is.llm.facing"""
        return text
'''

NOTES_VALVES_SCHEMA = {
    "title": "Valves",
    "type": "object",
    "properties": {
        "api_key": {"type": "string", "default": "$t:a.default.is.data", "title": "$t:notes.valves.api_key",
                    "description": "$t:notes.valves.api_key_help"},
        "style": {"$ref": "#/$defs/Style", "description": "$t:notes.valves.style"},
    },
    "$defs": {"Style": {"title": "Style", "enum": ["$t:enum.values.are.data"], "type": "string"}},
}


# -- The resolver --------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["Bad calculator", "", "t:bad_calculator.name", " $t:bad_calculator.name", "$t:"])
def test_text_without_the_prefix_is_shown_unchanged(text):
    resolved = display.resolve(text, language="fr")
    assert resolved.text == text
    assert resolved.translated


def test_none_is_shown_as_nothing():
    assert display.resolve(None).text == ""


def test_the_lookup_order_is_toolkit_language_then_toolkit_english_then_catalogue_then_key(calculator):
    key = "$t:bad_calculator.name"
    _translate(calculator, "fr", "bad_calculator.name", "Calculette de la boîte")
    _translate(calculator, "en", "bad_calculator.name", "Our calculator")
    assert display.resolve(key, toolkit=calculator, language="fr").text == "Calculette de la boîte"
    # The toolkit's English beats the catalogue's French: the toolkit's own words win.
    Translation.objects.filter(toolkit=calculator, language="fr").delete()
    display.forget_translations(calculator)
    assert display.resolve(key, toolkit=calculator, language="fr").text == "Our calculator"
    Translation.objects.filter(toolkit=calculator).delete()
    display.forget_translations(calculator)
    resolved = display.resolve(key, toolkit=calculator, language="fr")
    assert (resolved.text, resolved.source) == ("Calculatrice défaillante", "catalogue")
    missing = display.resolve("$t:bad_calculator.nowhere", toolkit=calculator, language="fr")
    assert (missing.text, missing.translated, missing.source) == ("bad_calculator.nowhere", False, "missing")


def test_it_uses_the_active_language_when_none_is_given(calculator):
    with translation.override("tr"):
        assert display.resolve("$t:bad_calculator.params.a", toolkit=calculator).text == "Birinci sayı"


@pytest.mark.parametrize(
    ("requested", "expected"),
    [("pl-PL", "pl"), ("pl_PL", "pl"), ("PL", "pl"), ("zh-Hans", "zh-hans"), ("zh_Hans", "zh-hans"), ("zh-CN", "zh-hans")],
)
def test_a_regional_or_differently_written_code_falls_back_to_its_language(calculator, requested, expected):
    _translate(calculator, expected, "bad_calculator.name", f"name in {expected}")
    assert display.resolve("$t:bad_calculator.name", toolkit=calculator, language=requested).text == f"name in {expected}"


def test_a_language_toolhub_lacks_falls_back_to_english(calculator):
    assert display.resolve("$t:bad_calculator.name", toolkit=calculator, language="de").text == "Bad calculator"
    _translate(calculator, "en", "bad_calculator.name", "Toolkit's English")
    assert display.resolve("$t:bad_calculator.name", toolkit=calculator, language="de-AT").text == "Toolkit's English"


@pytest.mark.parametrize("requested", ["../../etc", "fr/../pl", "fr;q=1", "x" * 40])
def test_a_malformed_language_reads_english(calculator, requested):
    # A `?lang=` value is whatever a client sends: it never becomes part of a catalogue path.
    assert display.language_chain(requested) == ["en"]
    assert display.resolve("$t:bad_calculator.name", toolkit=calculator, language=requested).text == "Bad calculator"


def test_the_simplified_chinese_catalogue_is_found_under_zh_hans():
    assert translation.to_locale("zh-hans") == "zh_Hans"
    assert display.resolve("$t:bad_calculator.params.b", language="zh-hans").text == "第二个数"


def test_a_page_reads_the_translations_of_a_toolkit_once(calculator, django_assert_num_queries):
    with django_assert_num_queries(1):
        for key in KEYS:
            display.resolve(f"$t:{key}", toolkit=calculator, language="pl")


def _render_display(user, text: str, toolkit=None) -> str:
    template = Template("{% load toolhub %}{% display text toolkit %}")
    with translation.override("fr"):
        return template.render(Context({"user": user, "text": text, "toolkit": toolkit}))


def test_a_missing_key_is_marked_untranslated_for_admins_only(calculator, admin, alice, carol):
    marked = _render_display(admin, "$t:bad_calculator.nowhere", calculator)
    assert 'class="untranslated"' in marked and "bad_calculator.nowhere" in marked
    for user in (alice, carol):
        assert _render_display(user, "$t:bad_calculator.nowhere", calculator) == "bad_calculator.nowhere"
    # A translated key carries no mark, for admins either.
    assert _render_display(admin, "$t:bad_calculator.name", calculator) == "Calculatrice défaillante"


def test_the_mark_escapes_the_key(admin):
    assert "<b>" not in _render_display(admin, "$t:<b>x</b>")


# -- The shipped catalogue ------------------------------------------------------------------


@pytest.mark.parametrize(("language", "expected"), [("fr", FRENCH), ("tr", TURKISH)])
def test_every_key_of_bad_calculator_resolves_from_the_shipped_catalogue(calculator, language, expected):
    keys = [use.key for use in display.revision_keys(calculator.current_revision)]
    assert keys == KEYS
    assert not calculator.translations.exists()
    for key in keys:
        resolved = display.resolve(f"$t:{key}", toolkit=calculator, language=language)
        assert resolved.source == "catalogue"
        assert resolved.text == expected[key]


@pytest.mark.parametrize("language", ["en", "fr", "pl", "tr", "zh-hans"])
def test_the_catalogue_of_every_language_has_every_demo_key(language):
    for key in KEYS:
        assert display.catalogue_text(key, language), f"{language} lacks {key}"


def _po_entries(path: Path) -> dict[str, str]:
    """msgid → msgstr of a simple .po file (one-line strings, as the catalogue is written)."""
    entries, msgid = {}, None
    for line in path.read_text().splitlines():
        assert not line.startswith("#,"), f"{path} has a flagged (fuzzy?) entry: {line}"
        if line.startswith("msgid "):
            msgid = json.loads(line[6:])
        elif line.startswith("msgstr ") and msgid:
            entries[msgid] = json.loads(line[7:])
    return entries


@pytest.mark.parametrize("locale_name", ["en", "fr", "pl", "tr", "zh_Hans"])
def test_the_compiled_catalogue_matches_its_source(locale_name):
    folder = Path(django_settings.LOCALE_PATHS[0]) / locale_name / "LC_MESSAGES"
    source = _po_entries(folder / "llmtools.po")
    assert sorted(source) == sorted(KEYS)
    assert all(source.values())
    with (folder / "llmtools.mo").open("rb") as handle:
        compiled = gettext.GNUTranslations(handle)
    assert {key: compiled.gettext(key) for key in KEYS} == source


# -- The keys a revision uses ---------------------------------------------------------------


def test_it_collects_the_keys_of_frontmatter_plugin_metadata_and_valve_schemas(alice, upload):
    toolkit = make_ready(upload(alice, KEYED_SOURCE, slug="notes"), valves_schema=NOTES_VALVES_SCHEMA)
    uses = {use.key: use.places for use in display.revision_keys(toolkit.current_revision)}
    assert list(uses) == [
        "notes.title", "notes.description", "notes.valves.api_key", "notes.valves.api_key_help", "notes.valves.style",
    ]
    assert uses["notes.valves.api_key"] == ("Valves › api_key › title",)
    # Defaults and enum values are data, and a docstring is what the model reads.
    revision = toolkit.current_revision
    revision.tools = [{"type": "function", "function": {"name": "note", "description": "$t:this.is.llm.facing"}}]
    assert "this.is.llm.facing" not in {use.key for use in display.revision_keys(revision)}


def test_llm_facing_plugin_fields_are_never_keys(alice, upload):
    metadata = {**_plugin_metadata(), "description": "$t:llm.description"}
    metadata["parameters"] = {"a": {"type": "number", "description": "$t:llm.param", "required": True}}
    toolkit = make_ready(upload(alice, example("bad_calculator"), slug="bad_calculator"), metadata=metadata)
    keys = {use.key for use in display.revision_keys(toolkit.current_revision)}
    assert keys == {"bad_calculator.name", "bad_calculator.description"}
    shown = display.tool_display(revision=toolkit.current_revision, toolkit=toolkit, language="fr")["bad_calculator"]
    # Without a displayDescription the parameter shows its LLM-facing text as written.
    assert shown.parameters == {"a": display.Resolved("$t:llm.param", translated=True)}


def test_valve_titles_and_descriptions_are_resolved_on_the_valves_form(client, admin, alice, upload):
    toolkit = make_ready(upload(alice, KEYED_SOURCE, slug="notes"), valves_schema=NOTES_VALVES_SCHEMA)
    _translate(toolkit, "fr", "notes.valves.api_key", "Clé d'API")
    _translate(toolkit, "fr", "notes.valves.api_key_help", "Votre clé personnelle")
    client.force_login(admin)
    page = client.get("/toolkits/notes/valves/", HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    assert "Clé d&#x27;API" in page and "Votre clé personnelle" in page
    assert "$t:notes.valves" not in page


# -- Translations belong to the toolkit -----------------------------------------------------


def test_translations_survive_a_new_revision_and_unused_keys_are_kept(calculator, alice):
    _translate(calculator, "fr", "bad_calculator.name", "Calculette")
    _translate(calculator, "fr", "bad_calculator.params.b", "Le nombre b")
    source = example("bad_calculator").replace('"b": {', '"c": {').replace("$t:bad_calculator.params.b", "$t:bad_calculator.params.c")
    metadata = _plugin_metadata()
    metadata["parameters"]["c"] = {**metadata["parameters"].pop("b"), "displayDescription": "$t:bad_calculator.params.c"}
    services.revision_upload(toolkit=calculator, source=source, user=alice)
    toolkit = make_ready(Toolkit.objects.get(pk=calculator.pk), metadata=metadata)
    assert toolkit.current_revision.number == 2
    assert display.resolve("$t:bad_calculator.name", toolkit=toolkit, language="fr").text == "Calculette"
    rows = {row.key: row for row in display.translation_table(toolkit=toolkit, revision=toolkit.current_revision)}
    assert [key for key, row in rows.items() if row.used] == [
        "bad_calculator.name", "bad_calculator.description", "bad_calculator.params.a", "bad_calculator.params.c",
    ]
    assert not rows["bad_calculator.params.b"].used
    assert Translation.objects.filter(toolkit=toolkit, key="bad_calculator.params.b").exists()


# -- Import and export ----------------------------------------------------------------------


def test_import_then_export_round_trips(calculator, upload, bob):
    document = {
        "fr": {"bad_calculator.name": "Calculette", "old.key": "Ancienne clé"},
        "zh_Hans": {"bad_calculator.name": "计算器"},
        "pl": {"bad_calculator.params.a": "Liczba a", "bad_calculator.params.b": ""},
    }
    assert display.translation_import(toolkit=calculator, data=json.dumps(document)) == 4
    exported = display.translation_export(toolkit=calculator, revision=calculator.current_revision)
    assert list(exported) == ["en", "fr", "pl", "tr", "zh-hans"]
    assert exported["fr"] == {
        "bad_calculator.name": "Calculette", "bad_calculator.description": "",
        "bad_calculator.params.a": "", "bad_calculator.params.b": "", "old.key": "Ancienne clé",
    }
    assert exported["zh-hans"]["bad_calculator.name"] == "计算器"
    assert exported["tr"] == dict.fromkeys(KEYS, "")
    # The export imported into another toolkit gives it the same translations.
    other = make_ready(upload(bob, example("bad_calculator"), slug="bad_calculator_2"))
    display.translation_import(toolkit=other, data=exported)
    texts = set(calculator.translations.values_list("language", "key", "text"))
    assert set(other.translations.values_list("language", "key", "text")) == texts
    assert display.translation_export(toolkit=other, revision=other.current_revision) == exported
    # Importing the same document again changes nothing.
    assert display.translation_import(toolkit=calculator, data=exported) == 0


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"de": {"bad_calculator.name": "Schlechter Rechner"}}, "Unknown language"),
        ({"fr": {"bad_calculator.name": 3}}, "must be a string, not number"),
        ({"fr": {"bad_calculator.name": None}}, "must be a string, not null"),
        ({"fr": ["bad_calculator.name"]}, "expected an object"),
        ({"fr": {"$t:bad_calculator.name": "x"}}, "without the $t: prefix"),
        ({"fr": {"": "x"}}, "non-empty"),
        ({"fr": {"k" * 201: "x"}}, "at most 200"),
        (["fr"], "Expected a JSON object"),
        ("{not json", "not valid JSON"),
    ],
)
def test_an_import_with_any_error_changes_nothing(calculator, document, message):
    _translate(calculator, "fr", "bad_calculator.name", "Avant")
    good = {"pl": {"bad_calculator.name": "Zły"}, "tr": {"bad_calculator.name": "Kötü"}}
    data = document if isinstance(document, str) else json.dumps({**good, **document} if isinstance(document, dict) else document)
    with pytest.raises(display.TranslationsInvalid) as caught:
        display.translation_import(toolkit=calculator, data=data)
    assert any(message in error for error in caught.value.errors), caught.value.errors
    assert list(calculator.translations.values_list("language", "text")) == [("fr", "Avant")]


def test_an_import_lists_every_problem_at_once(calculator):
    with pytest.raises(display.TranslationsInvalid) as caught:
        display.translation_import(toolkit=calculator, data={"de": {}, "fr": {"a": 1, "b": True}})
    assert len(caught.value.errors) == 3


# -- The Translations tab -------------------------------------------------------------------


def _tab(slug: str = "bad_calculator") -> str:
    return f"/toolkits/{slug}/translations/"


@pytest.mark.parametrize("who", ["alice", "admin"])
def test_the_owner_and_admins_may_open_the_tab(client, calculator, request, who):
    client.force_login(request.getfixturevalue(who))
    response = client.get(_tab())
    assert response.status_code == 200
    assert response.templates[0].name == "toolkits/translations.html"
    page = response.content.decode()
    assert f'href="{_tab()}" aria-current="page"' in page
    for key in KEYS:
        assert f"<code>{key}</code>" in page


@pytest.mark.parametrize("who", ["bob", "carol"])
def test_other_authors_and_plain_users_get_404_everywhere(client, calculator, request, who):
    client.force_login(request.getfixturevalue(who))
    assert client.get(_tab()).status_code == 404
    assert client.post(_tab(), {"key-0": "bad_calculator.name", "text-0-fr": "Piraté"}).status_code == 404
    assert client.get(_tab() + "export/").status_code == 404
    assert client.post(_tab() + "import/", {"json": '{"fr": {"x": "y"}}'}).status_code == 404
    assert not calculator.translations.exists()
    # Nor is the tab linked for them.
    assert _tab() not in client.get(f"/toolkits/{calculator.slug}/").content.decode()


@pytest.mark.parametrize("suffix", ["", "export/"])
def test_anonymous_visitors_are_sent_to_log_in(client, calculator, suffix):
    response = client.get(_tab() + suffix)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


def test_it_rejects_wrong_methods(client, calculator, alice):
    client.force_login(alice)
    assert client.put(_tab()).status_code == 405
    assert client.delete(_tab()).status_code == 405
    assert client.post(_tab() + "export/").status_code == 405
    assert client.get(_tab() + "import/").status_code == 405


def test_an_unknown_toolkit_is_404(client, admin):
    client.force_login(admin)
    assert client.get(_tab("nope")).status_code == 404


def test_the_tab_shows_missing_cells_and_unused_keys(client, calculator, alice):
    _translate(calculator, "fr", "bad_calculator.name", "Calculette")
    _translate(calculator, "fr", "gone.key", "Plus utilisée")
    client.force_login(alice)
    with translation.override("en"):
        page = client.get(_tab(), HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert page.count('<tr class="used"') == 4
    assert page.count('<tr class="unused" data-key="gone.key"') == 1
    assert 'title="The current revision no longer uses this key. Its texts are kept.">unused</span>' in page
    # 4 keys × 5 languages, one French text stored: 19 missing cells, each highlighted.
    assert page.count('<td class="missing"') == 19
    assert page.count('<td class="present"') == 2
    assert "Missing; the shared catalogue shows “Le premier nombre”." in page
    assert "4 missing" in page and "3 missing" in page


def test_saving_the_table_writes_only_the_cells_that_changed(client, calculator, alice):
    _translate(calculator, "fr", "bad_calculator.name", "Calculette")
    _translate(calculator, "tr", "bad_calculator.name", "Eski")
    client.force_login(alice)
    shown = {"en": "", "fr": "Calculette", "pl": "", "tr": "Eski", "zh-hans": ""}
    # Someone else changes the French text after this table was shown.
    _translate(calculator, "fr", "bad_calculator.name", "Calculette de Bob")
    response = client.post(_tab(), {
        "key-0": "bad_calculator.name", "was-0": json.dumps(shown),
        "text-0-en": "", "text-0-fr": "Calculette", "text-0-pl": " Zły kalkulator \n", "text-0-tr": "", "text-0-zh-hans": "",
    })
    assert response.status_code == 302 and response["Location"] == _tab()
    stored = dict(calculator.translations.values_list("language", "text"))
    # pl added (trimmed), tr emptied and so removed, the other person's fr left alone.
    assert stored == {"fr": "Calculette de Bob", "pl": "Zły kalkulator"}


def test_saving_an_invalid_key_changes_nothing(client, calculator, alice):
    client.force_login(alice)
    response = client.post(_tab(), {"key-0": "$t:bad", "was-0": "{}", "text-0-fr": "x"})
    assert response.status_code == 400
    assert "without the $t: prefix" in response.content.decode()
    assert not calculator.translations.exists()


def test_the_export_is_a_json_download(client, calculator, admin):
    _translate(calculator, "pl", "bad_calculator.name", "Zły")
    client.force_login(admin)
    response = client.get(_tab() + "export/")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="bad_calculator-translations.json"'
    data = json.loads(response.content)
    assert data["pl"]["bad_calculator.name"] == "Zły"
    assert data["fr"]["bad_calculator.name"] == ""


def test_import_by_file_upload_and_by_paste(client, calculator, alice):
    from django.core.files.uploadedfile import SimpleUploadedFile

    client.force_login(alice)
    upload = SimpleUploadedFile("t.json", json.dumps({"fr": {"bad_calculator.name": "Par fichier"}}).encode())
    response = client.post(_tab() + "import/", {"file": upload})
    assert response.status_code == 302
    response = client.post(_tab() + "import/", {"json": '{"tr": {"bad_calculator.name": "Yapıştırılan"}}'})
    assert response.status_code == 302
    assert dict(calculator.translations.values_list("language", "text")) == {"fr": "Par fichier", "tr": "Yapıştırılan"}


def test_a_rejected_import_shows_its_errors_and_keeps_the_paste(client, calculator, alice):
    client.force_login(alice)
    pasted = '{"klingon": {"bad_calculator.name": "x"}, "fr": {"bad_calculator.name": "ok"}}'
    response = client.post(_tab() + "import/", {"json": pasted})
    assert response.status_code == 400
    page = response.content.decode()
    assert "Unknown language “klingon”" in page
    assert "&quot;klingon&quot;" in page  # The pasted text is shown back, escaped.
    assert not calculator.translations.exists()
    assert client.post(_tab() + "import/", {"json": "  "}).status_code == 400


def test_an_oversized_import_is_refused_unread(client, calculator, alice, monkeypatch):
    from django.core.files.uploadedfile import SimpleUploadedFile

    monkeypatch.setattr(views_i18n, "MAX_IMPORT_BYTES", 10)
    client.force_login(alice)
    response = client.post(_tab() + "import/", {"file": SimpleUploadedFile("t.json", b'{"fr": {"a": "bbbbbbbb"}}')})
    assert response.status_code == 400
    assert not calculator.translations.exists()


def test_the_tab_previews_the_display_name_in_the_readers_language(client, calculator, alice):
    client.force_login(alice)
    page = client.get(_tab(), HTTP_ACCEPT_LANGUAGE="pl").content.decode()
    assert "Zły kalkulator" in page


# -- The API --------------------------------------------------------------------------------


def test_the_api_resolves_display_for_lang_and_leaves_llm_fields_as_written(client, calculator, carol, bearer):
    headers = bearer(carol)
    french = client.get("/api/v1/toolkits/bad_calculator?lang=fr", **headers).json()
    assert french["display"]["tools"]["bad_calculator"] == {
        "name": FRENCH["bad_calculator.name"],
        "description": FRENCH["bad_calculator.description"],
        "parameters": {"a": "Le premier nombre", "b": "Le second nombre"},
    }
    assert french["display"]["title"] == french["title"] == calculator.title
    assert french["display"]["description"] == FRENCH["bad_calculator.description"]
    function = french["tools"][0]["function"]
    assert function["name"] == "bad_calculator"
    assert function["description"] == "A tool to calculate the sum of two numbers (will give wrong answer)"
    assert function["parameters"]["properties"]["a"]["description"] == "The first number"
    assert french["description"] == "A tool to calculate the sum of two numbers (will give wrong answer)"


def test_the_api_follows_accept_language(client, calculator, carol, bearer):
    data = client.get("/api/v1/toolkits/bad_calculator", HTTP_ACCEPT_LANGUAGE="tr-TR,tr;q=0.9,en;q=0.5", **bearer(carol)).json()
    assert data["display"]["tools"]["bad_calculator"]["name"] == "Hatalı hesap makinesi"
    assert data["display"]["tools"]["bad_calculator"]["parameters"]["b"] == "İkinci sayı"
    assert data["tools"][0]["function"]["parameters"]["properties"]["b"]["description"] == "The second number"


def test_lang_wins_over_accept_language_and_the_toolkits_own_text_over_the_catalogue(client, calculator, carol, bearer):
    _translate(calculator, "pl", "bad_calculator.name", "Kalkulator Alicji")
    data = client.get("/api/v1/toolkits/bad_calculator?lang=pl-PL", HTTP_ACCEPT_LANGUAGE="tr", **bearer(carol)).json()
    assert data["display"]["tools"]["bad_calculator"]["name"] == "Kalkulator Alicji"


def test_a_toolkit_with_frontmatter_keys_resolves_them_in_the_api(client, alice, upload, bearer):
    toolkit = make_ready(upload(alice, KEYED_SOURCE, slug="notes"))
    _translate(toolkit, "fr", "notes.title", "Carnet")
    data = client.get("/api/v1/toolkits/notes?lang=fr", **bearer(alice)).json()
    assert data["title"] == "$t:notes.title"
    assert data["display"]["title"] == "Carnet"
    # No translation anywhere: the API shows the bare key (no admin mark in JSON).
    assert data["display"]["description"] == "notes.description"


# -- The dashboard's language ---------------------------------------------------------------


@pytest.fixture
def user_language(settings):
    """ToolHub's middleware, where settings.py puts it (right after authentication), and the
    backend that loads the profile with the user."""
    middleware = list(settings.MIDDLEWARE)
    name = "toolhub.accounts.middleware.UserLanguageMiddleware"
    if name not in middleware:
        middleware.insert(middleware.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1, name)
    settings.MIDDLEWARE = middleware
    settings.AUTHENTICATION_BACKENDS = ["toolhub.accounts.middleware.UserLanguageBackend"]


def test_accept_language_is_the_default(client, carol):
    client.force_login(carol)
    page = client.get("/toolkits/", HTTP_ACCEPT_LANGUAGE="fr-FR,fr;q=0.9").content.decode()
    assert '<html lang="fr">' in page


@WITH_SETLANG
def test_switching_the_language_is_remembered_for_a_signed_in_user(client, carol, user_language):
    client.force_login(carol)
    response = client.post("/i18n/setlang/", {"language": "pl", "next": "/toolkits/"})
    assert response.status_code == 302 and response["Location"] == "/toolkits/"
    assert Profile.objects.get(user=carol).language == "pl"
    # Another browser, with no language cookie and a French Accept-Language, still gets Polish.
    other = client.__class__()
    other.force_login(carol)
    page = other.get("/toolkits/", HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    assert '<html lang="pl">' in page
    # A change in one browser shows in the other on its next request.
    client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/toolkits/"})
    assert '<html lang="zh-hans">' in other.get("/toolkits/").content.decode()


@WITH_SETLANG
def test_an_anonymous_switch_sets_only_the_cookie(client, db, user_language):
    response = client.post("/i18n/setlang/", {"language": "tr", "next": "/accounts/login/"})
    assert response.status_code == 302
    assert response.cookies[django_settings.LANGUAGE_COOKIE_NAME].value == "tr"
    assert not Profile.objects.exists()
    assert '<html lang="tr">' in client.get("/accounts/login/").content.decode()


@WITH_SETLANG
def test_an_unknown_language_is_not_saved(client, carol, user_language):
    client.force_login(carol)
    client.post("/i18n/setlang/", {"language": "xx", "next": "/toolkits/"})
    assert not Profile.objects.exists()


def test_a_saved_language_dropped_from_settings_is_ignored(client, carol, user_language):
    Profile.objects.create(user=carol, language="de")
    client.force_login(carol)
    assert '<html lang="en">' in client.get("/toolkits/", HTTP_ACCEPT_LANGUAGE="en").content.decode()


def test_the_saved_language_costs_no_query_of_its_own(client, carol, user_language):
    Profile.objects.create(user=carol, language="tr")
    client.force_login(carol)
    with CaptureQueriesContext(connection) as queries:
        page = client.get("/toolkits/").content.decode()
    assert '<html lang="tr">' in page
    # The profile comes joined to the user, never in a query of its own.
    assert not [q for q in queries.captured_queries if 'FROM "accounts_profile"' in q["sql"]]
    user_queries = [q for q in queries.captured_queries if 'FROM "auth_user"' in q["sql"]]
    assert len(user_queries) == 1 and "accounts_profile" in user_queries[0]["sql"]


def test_a_user_without_a_profile_gets_the_browsers_language(client, carol, user_language):
    client.force_login(carol)
    assert '<html lang="fr">' in client.get("/toolkits/", HTTP_ACCEPT_LANGUAGE="fr").content.decode()


def test_the_backend_still_refuses_inactive_users(carol):
    from toolhub.accounts.middleware import UserLanguageBackend

    carol.is_active = False
    carol.save()
    assert UserLanguageBackend().get_user(carol.pk) is None
    assert UserLanguageBackend().get_user(10**9) is None


def test_dates_are_shown_in_the_readers_format(client, calculator, alice):
    revision = calculator.current_revision
    client.force_login(alice)
    french = client.get(f"/toolkits/{calculator.slug}/revisions/", HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    english = client.get(f"/toolkits/{calculator.slug}/revisions/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    created = revision.created_at
    assert created.strftime("%d/%m/%Y") in french
    assert created.strftime("%m/%d/%Y") in english


def test_the_navigation_is_translated(client, carol):
    client.force_login(carol)
    page = client.get("/toolkits/", HTTP_ACCEPT_LANGUAGE="pl").content.decode()
    assert ">Zestawy narzędzi<" in page


def test_set_language_view_keeps_djangos_redirect_rules(rf: RequestFactory, carol):
    # An off-site `next` is not followed: Django's own checks still apply.
    from django.contrib.sessions.backends.db import SessionStore

    request = rf.post("/i18n/setlang/", {"language": "fr", "next": "https://evil.example/"})
    request.user = carol
    request.session = SessionStore()
    response = views_i18n.set_language(request)
    assert response.status_code == 302
    assert "evil.example" not in response["Location"]
    assert Profile.objects.get(user=carol).language == "fr"


@pytest.mark.parametrize(("language", "first", "second"), [
    ("fr", "Le premier nombre", "Le second nombre"),
    ("tr", "Birinci sayı", "İkinci sayı"),
])
def test_the_tools_tab_shows_translated_parameter_descriptions(client, calculator, carol, language, first, second):
    client.force_login(carol)
    page = client.get(f"/toolkits/{calculator.slug}/tools/", HTTP_ACCEPT_LANGUAGE=language).content.decode()
    table = page.split('class="table params"')[1].split("</table>")[0]
    assert first in table and second in table
    assert "The first number" not in table


def test_the_tools_tab_in_english_shows_the_written_parameter_descriptions(client, calculator, carol):
    client.force_login(carol)
    page = client.get(f"/toolkits/{calculator.slug}/tools/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    table = page.split('class="table params"')[1].split("</table>")[0]
    assert "$t:" not in table
