"""Messages people read, in their language: validation of values against a schema, the static
checks of an uploaded file, stored build and rejection details, why a toolkit cannot run, and
the package queue's tabs, each with the plural form its count asks for. The catalogues being
complete is tests/test_i18n_catalogue.py's job; this shows the messages go through them.

People (tests/conftest.py): alice owns the toolkits, admin decides on packages."""

from __future__ import annotations

import re
from collections import deque
from types import SimpleNamespace

import pytest
from django.utils import translation

from tests.conftest import toolkit_source
from toolhub.messages import FORMS, as_written, joined, message
from toolhub.packages.build_runner import Outcome, explain_failure
from toolhub.packages.models import Package
from toolhub.runs.services import not_ready_reason
from toolhub.toolkits import lifecycle
from toolhub.toolkits.sandboxing import outcome_reason
from toolhub.toolkits.schema_forms import parse_submission, validate
from toolhub.toolkits.source_checks import ToolkitSourceInvalid, parse_toolkit_source


@pytest.fixture(autouse=True)
def _english_unless_asked():
    with translation.override("en"):
        yield


def _text(minimum: int) -> dict:
    return {"type": "object", "properties": {"s": {"type": "string", "minLength": minimum}}}


# -- Validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("language", "minimum", "message"),
    [
        ("en", 1, "Must be at least 1 character long."),
        ("en", 3, "Must be at least 3 characters long."),
        ("fr", 1, "Doit comporter au moins 1 caractère."),
        ("fr", 3, "Doit comporter au moins 3 caractères."),
        ("pl", 3, "Musi mieć co najmniej 3 znaki."),
        ("pl", 5, "Musi mieć co najmniej 5 znaków."),
        ("pl", 22, "Musi mieć co najmniej 22 znaki."),
        ("zh-hans", 3, "长度必须至少为 3 个字符。"),
    ],
)
def test_a_length_message_takes_the_plural_form_of_its_limit(language, minimum, message):
    with translation.override(language):
        assert validate(_text(minimum), {"s": ""}) == {"s": [message]}


def test_required_unknown_and_unreadable_values_are_translated():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "j": {}}, "required": ["n"],
              "additionalProperties": False}
    with translation.override("fr"):
        assert validate(schema, {"zz": 1, "yy": 2}) == {
            "n": ["Ce champ est obligatoire."], "__all__": ["Champs inconnus : yy, zz."]
        }
        assert validate(schema, {"n": "x"}) == {"n": ["Doit être un nombre entier."]}
        _values, errors = parse_submission(schema, {"n": ["abc"], "j": ["{"]})
    # The JSON decoder's position goes in as placeholders, the decoder's own words as written.
    assert errors == {
        "n": ["Saisissez un nombre entier."],
        "j": ["Saisissez du JSON valide : Expecting property name enclosed in double quotes (ligne 1, colonne 2)."],
    }
    with translation.override("zh-hans"):
        assert validate(schema, {"n": 1, "zz": 1}) == {"__all__": ["未知字段：zz。"]}


# -- Static checks of a file ------------------------------------------------------------------


def _problems(source: str, language: str) -> list[str]:
    with translation.override(language), pytest.raises(ToolkitSourceInvalid) as refused:
        parse_toolkit_source(source)
    return [error.message for error in refused.value.errors]


def test_a_syntax_error_is_translated_with_its_line_and_column():
    source = '"""\ntitle: Broken\n"""\n\nclass Tools:\n    def f(self:\n        pass\n'
    [english] = _problems(source, "en")
    assert english.startswith("Syntax error at line 6, column ")
    [french] = _problems(source, "fr")
    assert french.startswith("Erreur de syntaxe à la ligne 6, colonne ")
    [chinese] = _problems(source, "zh-hans")
    assert chinese.startswith("第 6 行第 ")


def test_requirement_and_class_problems_are_translated():
    source = toolkit_source("Paths", "./local.whl, -i https://x").replace("class Tools:", "class Helpers:")
    english = _problems(source, "en")
    french = _problems(source, "fr")
    assert len(french) == len(english) == 3
    assert "`./local.whl` dans `requirements:` à la ligne 6 est un chemin de fichier." in french[1]
    assert "est une option de pip, pas une dépendance" in french[2]
    assert french[0].startswith("Aucune `class Tools` au niveau du module")
    assert "`./local.whl` w `requirements:` w wierszu 6 to ścieżka pliku." in _problems(source, "pl")[1]


# -- Stored details ---------------------------------------------------------------------------


def test_every_form_of_a_stored_detail_has_a_translation_that_keeps_its_placeholders():
    for language in ("fr", "pl", "tr", "zh-hans"):
        with translation.override(language):
            for form in FORMS.values():
                translated = translation.gettext(form)
                assert translated != form, (language, form)
                assert set(re.findall(r"%\(\w+\)s", translated)) == set(re.findall(r"%\(\w+\)s", form))


def test_details_the_lifecycle_and_the_build_write_are_shown_in_the_readers_language():
    # outcome_reason reads only these fields of a SandboxOutcome.
    for status in ("timed_out", "limit_exceeded", "crashed"):
        reason = outcome_reason(SimpleNamespace(status=status, limit="memory", exit_code=-9))
        with translation.override("pl"):
            assert reason.render(translation.gettext) != reason.english(), reason
    conflict = Outcome(1, deque(["ERROR: No matching distribution found for humanize>=99"]))
    failed = Outcome(2, deque(["Preparing metadata", "ERROR: something broke"]))
    with translation.override("fr"):
        assert explain_failure("pip-compile", conflict, index_url=None).render(translation.gettext) == (
            "Aucune distribution ne correspond à humanize>=99"
        )
        assert explain_failure("uv pip install", failed, index_url=None).render(translation.gettext) == (
            "uv pip install a échoué : something broke"
        )
        capped = Outcome(2, deque(["egress refused: byte limit reached (1048576 bytes per invocation)"]))
        assert explain_failure("uv pip install", capped, index_url=None).render(translation.gettext) == (
            "uv pip install s'est arrêté à la limite de téléchargement de la construction : 1 MiB"
        )
        timed_out = message("introspection.load_failed", error=message("sandbox.timed_out"))
        assert timed_out.render(translation.gettext) == (
            "Le chargement de la boîte à outils a échoué : le bac à sable a dépassé son temps"
        )
        own = message("introspection.load_failed", error=as_written("NameError: name 'x' is not defined"))
        assert own.render(translation.gettext) == (
            "Le chargement de la boîte à outils a échoué : NameError: name 'x' is not defined"
        )
        assert lifecycle.INTERRUPTED.render(translation.gettext) == (
            "La construction a été interrompue (son worker s’est arrêté) ; appuyez sur Réessayer pour reconstruire."
        )


def test_a_list_of_rejections_is_translated_part_by_part_and_a_reason_keeps_its_semicolons():
    with translation.override("fr"):
        both = joined([message("package.rejected_because", name="a", reason="too old"), message("package.rejected", name="b")])
        assert both.render(translation.gettext) == "le paquet a a été refusé : too old; le paquet b a été refusé"
        one = joined([message("package.rejected_because", name="a", reason="use x; not y")])
        assert one.render(translation.gettext) == "le paquet a a été refusé : use x; not y"
        # Text no form describes is shown as written.
        assert as_written("Something else entirely").render(translation.gettext) == "Something else entirely"


@pytest.mark.django_db
def test_a_rejection_and_why_the_toolkit_cannot_run_are_shown_in_the_readers_language(client, alice, admin, upload):
    toolkit = upload(alice, toolkit_source("Sizes", "humanize>=4"), slug="sizes")
    client.force_login(alice)
    waiting = client.get("/toolkits/sizes/environment/", HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    assert "En attente de l’approbation d’un administrateur : humanize" in waiting
    lifecycle.package_reject(name="humanize", user=admin, reason="Use the stdlib instead.")
    page = client.get("/toolkits/sizes/environment/", HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    assert "le paquet humanize a été refusé : Use the stdlib instead." in page
    # The API keeps the stored English.
    toolkit.refresh_from_db()
    assert toolkit.latest_revision().status_detail == "package humanize was rejected: Use the stdlib instead."
    assert toolkit.latest_revision().status_message == joined(
        [message("package.rejected_because", name="humanize", reason="Use the stdlib instead.")]
    ).to_json()
    with translation.override("pl"):
        assert not_ready_reason(toolkit) == (
            "Zestaw narzędzi nie jest gotowy: administrator odrzucił jeden z jego pakietów. "
            "(pakiet humanize został odrzucony: Use the stdlib instead.)"
        )


# -- The package queue's tabs -----------------------------------------------------------------


@pytest.mark.django_db
def test_the_queue_tabs_agree_with_their_counts_in_french(client, admin):
    Package.objects.create(name="one", status="approved")
    client.force_login(admin)
    page = client.get("/packages/", HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    assert ">Approuvé (1)</a>" in page and ">Refusé (0)</a>" in page
    Package.objects.create(name="two", status="approved")
    page = client.get("/packages/", HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    assert ">Approuvés (2)</a>" in page and ">En attente (0)</a>" in page
    english = client.get("/packages/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert ">Approved (2)</a>" in english


@pytest.mark.django_db
def test_a_refused_egress_host_is_explained_in_the_readers_language(alice, upload):
    from toolhub.toolkits.services import InvalidEgressHosts, toolkit_set_egress

    toolkit = upload(alice, toolkit_source("Net"), slug="net")
    with translation.override("fr"), pytest.raises(InvalidEgressHosts) as refused:
        toolkit_set_egress(toolkit=toolkit, granted=True, hosts=["*.org"], by=alice)
    assert str(refused.value) == "'*.org' autoriserait tout un domaine de premier niveau"
    with translation.override("zh-hans"), pytest.raises(InvalidEgressHosts) as refused:
        toolkit_set_egress(toolkit=toolkit, granted=True, hosts=["a*b.org"], by=alice)
    assert "既不是主机名" in str(refused.value)


@pytest.mark.django_db
def test_a_refused_run_is_explained_in_the_readers_language(alice, upload):
    from toolhub.runs.services import InvocationRejected, invocation_create

    toolkit = upload(alice, toolkit_source("Echo"), slug="echo")
    revision = toolkit.current_revision
    revision.tools = [{"type": "function", "function": {"name": "echo", "parameters": {"type": "object"}}}]
    revision.set_status("ready")
    revision.save()
    with translation.override("fr"), pytest.raises(InvocationRejected) as refused:
        invocation_create(toolkit=toolkit, tool="nope", arguments={}, user=alice)
    assert refused.value.errors == [("La boîte à outils n’a pas d’outil nommé 'nope'.", "tool")]
    with translation.override("tr"), pytest.raises(InvocationRejected) as refused:
        invocation_create(toolkit=toolkit, tool="echo", arguments=[1], user=alice)
    assert refused.value.errors == [("Argümanlar bir JSON nesnesi olmalıdır.", "arguments")]


def test_why_a_run_failed_is_translated_when_the_worker_wrote_it_and_a_tools_error_is_not():
    with translation.override("fr"):
        timed_out = message("run.timed_out", seconds=30.0)
        assert timed_out.render(translation.gettext) == "L’outil a tourné plus de 30 s et a été arrêté."
        assert message("run.cancelled", user="alice").render(translation.gettext) == "Annulée par alice."
        unbuilt = message("run.environment_failed", reason=message("step.no_distribution", name="x"))
        assert unbuilt.render(translation.gettext) == (
            "L’environnement de la boîte à outils n’a pas pu être construit : Aucune distribution ne correspond à x"
        )
        model = message("agent.model_failed", error="HTTP 500")
        assert model.render(translation.gettext) == "L’appel au modèle a échoué : HTTP 500"
        # The tool's own words, even when they look like one of ToolHub's forms.
        assert as_written("Cancelled by alice.").render(translation.gettext) == "Cancelled by alice."


@pytest.mark.django_db
def test_the_run_page_shows_a_cancelled_runs_error_in_the_readers_language(client, alice, upload):
    from toolhub.runs.models import Invocation
    from toolhub.runs.services import invocation_cancel

    toolkit = upload(alice, toolkit_source("Echo"), slug="echo")
    run = Invocation.objects.create(
        toolkit=toolkit, revision=toolkit.current_revision, tool="echo", user=alice, arguments={},
    )
    invocation_cancel(invocation=run, by=alice)
    run.refresh_from_db()
    assert (run.error, run.error_message) == ("Cancelled by alice.", {"code": "run.cancelled", "params": {"user": "alice"}})
    client.force_login(alice)
    page = client.get(f"/invocations/{run.id}/", HTTP_ACCEPT_LANGUAGE="pl").content.decode()
    assert '<p class="error" id="error">Anulowane przez alice.</p>' in page
