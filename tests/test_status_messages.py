"""A revision's status detail stored as a message (toolhub.messages: a code and its
parameters), and a refused egress host pattern explained by one: the writers store the code
and the parameters with the English text beside it, pages render the message in the reader's
language with the parameters as written, and the migration turns the English details stored
before into messages.

People (tests/conftest.py): alice owns the toolkits, admin decides on packages."""

from __future__ import annotations

import importlib
import re
from collections import deque

import pytest
from django.apps import apps
from django.utils import translation
from django.utils.translation import gettext

from tests.conftest import toolkit_source
from toolhub.messages import FORMS, Message, as_written, joined, message
from toolhub.packages import envbuild as envlib
from toolhub.packages.build_runner import BuildFailed, Outcome, explain_failure
from toolhub.sandbox.egress.rules import HostPatternRefused, validate_host_pattern
from toolhub.toolkits import building, lifecycle
from toolhub.toolkits.models import Revision, Status

migration = importlib.import_module("toolhub.toolkits.migrations.0008_revision_status_message")


# -- Messages -------------------------------------------------------------------------------


def test_a_message_renders_its_form_with_its_parameters_as_written():
    failed = message("introspection.load_failed", error=message("sandbox.limit", limit="memory"))
    assert failed.english() == "Loading the toolkit failed: a sandbox limit was hit (memory)"
    assert message("build.timed_out", seconds=600.0).english() == "build timed out after 600 s"
    with translation.override("fr"):
        assert failed.render(gettext) == (
            "Le chargement de la boîte à outils a échoué : une limite du bac à sable a été atteinte (memory)"
        )
        # The parameter is the toolkit's own text, even where it reads like one of the forms.
        own = message("introspection.load_failed", error=as_written("the sandbox ran out of time"))
        assert own.render(gettext) == "Le chargement de la boîte à outils a échoué : the sandbox ran out of time"


def test_a_list_is_rendered_part_by_part_and_a_reason_keeps_its_semicolons():
    rejected = joined([
        message("package.rejected_because", name="a", reason="use x; not y"),
        message("package.rejected", name="b"),
    ])
    assert rejected.english() == "package a was rejected: use x; not y; package b was rejected"
    with translation.override("fr"):
        assert rejected.render(gettext) == "le paquet a a été refusé : use x; not y; le paquet b a été refusé"


def test_a_message_survives_its_json_and_refuses_parameters_its_form_lacks():
    stored = message("review.waiting", what=message("review.secrets", names="api_key")).to_json()
    assert stored == {"code": "review.waiting", "params": {"what": {"code": "review.secrets", "params": {"names": "api_key"}}}}
    assert Message.from_json(stored) == message("review.waiting", what=message("review.secrets", names="api_key"))
    assert Message.from_json({}) is None
    with pytest.raises(ValueError, match="names"):
        message("approval.waiting", name="humanize")


def test_every_form_has_a_translation_that_keeps_its_placeholders():
    for language in ("fr", "pl", "tr", "zh-hans"):
        with translation.override(language):
            for form in FORMS.values():
                translated = gettext(form)
                assert translated != form, (language, form)
                assert set(re.findall(r"%\(\w+\)s", translated)) == set(re.findall(r"%\(\w+\)s", form))


# -- The writers ----------------------------------------------------------------------------


def test_a_refused_host_pattern_carries_its_code_and_the_pattern_as_written():
    with pytest.raises(HostPatternRefused) as refused:
        validate_host_pattern("*.org")
    assert refused.value.message == message("host.whole_tld", pattern="'*.org'")
    assert str(refused.value) == "'*.org' would allow a whole top-level domain"
    with translation.override("fr"):
        assert refused.value.message.render(gettext) == "'*.org' autoriserait tout un domaine de premier niveau"


@pytest.mark.django_db
def test_waiting_for_approval_stores_its_code_and_the_package_names(alice, upload):
    toolkit = upload(alice, toolkit_source("Sizes", "humanize>=4"), slug="sizes")
    revision = toolkit.latest_revision()
    assert revision.status_message == {"code": "approval.waiting", "params": {"names": "humanize"}}
    assert revision.status_detail == "Waiting for an admin to approve: humanize"


@pytest.mark.django_db
def test_a_failed_lock_stores_why_as_a_code_with_its_parameters(alice, upload, monkeypatch):
    toolkit = upload(alice, toolkit_source("Echo"), slug="echo")
    revision = toolkit.latest_revision()
    assert (revision.status, revision.status_message) == (Status.BUILDING, {"code": "build.queued", "params": {}})
    output = Outcome(1, deque(["ERROR: No matching distribution found for humanize>=99"]))

    def refuse(revision, log):
        raise BuildFailed(explain_failure("pip-compile", output, index_url=None))

    monkeypatch.setattr(building, "lock_for", refuse)
    building.build(revision.pk)
    revision.refresh_from_db()
    assert revision.status == Status.FAILED
    assert revision.status_message == {"code": "step.no_distribution", "params": {"name": "humanize>=99"}}
    assert revision.status_detail == "No matching distribution for humanize>=99"


def test_a_failure_too_long_for_one_line_is_kept_as_written():
    failed = envlib.BuildFailed(message("step.failed", tool="uv", error="x" * 400))
    assert failed.message == as_written(failed.reason)
    assert len(failed.reason) == 300


@pytest.mark.django_db
def test_a_failed_load_shows_in_french_with_the_toolkits_own_error_as_written(client, alice, upload):
    toolkit = upload(alice, toolkit_source("Echo"), slug="echo")
    revision = toolkit.latest_revision()
    error = as_written("NameError: name x is not defined")
    lifecycle.fail(revision_id=revision.pk, reason=message("introspection.load_failed", error=error))
    client.force_login(alice)
    page = client.get("/toolkits/echo/", HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    assert "Le chargement de la boîte à outils a échoué : NameError: name x is not defined" in page
    revision.refresh_from_db()
    assert revision.status_detail == "Loading the toolkit failed: NameError: name x is not defined"


# -- The migration of the details stored in English -------------------------------------------


def _filled(form: str) -> str:
    return re.sub(r"%\((\w+)\)s", lambda m: f"<{m.group(1)} 1>", form)


@pytest.mark.parametrize(("code", "form"), migration.FORMS)
def test_the_migration_reads_each_form_as_its_code_and_parameters(code, form):
    text = _filled(form)
    stored = migration.detail_message(text)
    if code.startswith("package."):
        # Rejected packages are a list, as the lifecycle writes them.
        assert stored["code"] == "list"
        [stored] = stored["params"]["items"]
    assert stored["code"] == code
    assert FORMS[code] == form
    # What holds a message of its own holds one: here text as written, as it has no form.
    assert stored["params"] == {
        name: as_written(f"<{name} 1>").to_json() if (code, name) in migration.NESTED else f"<{name} 1>"
        for name in re.findall(r"%\((\w+)\)s", form)
    }
    assert Message.from_json(migration.detail_message(text)).english() == text


def test_the_migration_reads_nested_reasons_lists_and_unknown_text():
    assert migration.detail_message("Loading the toolkit failed: the sandbox ran out of time") == (
        message("introspection.load_failed", error=message("sandbox.timed_out")).to_json()
    )
    assert migration.detail_message("Loading the toolkit failed: NameError: x") == (
        message("introspection.load_failed", error=as_written("NameError: x")).to_json()
    )
    assert migration.detail_message("Waiting for an admin to review it: it would receive the network egress grant.") == (
        message("review.waiting", what=message("review.grant")).to_json()
    )
    assert migration.detail_message("package a was rejected: too old; package b was rejected") == joined([
        message("package.rejected_because", name="a", reason="too old"), message("package.rejected", name="b")
    ]).to_json()
    assert migration.detail_message("package a was rejected: use x; not y") == joined([
        message("package.rejected_because", name="a", reason="use x; not y")
    ]).to_json()
    assert migration.detail_message("Rejected in review by admin: leaks; no") == (
        message("review.rejected", admin="admin", reason="leaks; no").to_json()
    )
    assert migration.detail_message("invalid requirement 'x y'") == as_written("invalid requirement 'x y'").to_json()
    assert migration.detail_message("") == {}


@pytest.mark.django_db
def test_the_migration_converts_the_stored_rows(alice, upload):
    first = upload(alice, toolkit_source("One"), slug="one").latest_revision()
    second = upload(alice, toolkit_source("Two"), slug="two").latest_revision()
    third = upload(alice, toolkit_source("Three"), slug="three").latest_revision()
    Revision.objects.filter(pk=first.pk).update(status_detail="build timed out after 900 s", status_message={})
    Revision.objects.filter(pk=second.pk).update(status_detail="no output for 300 s", status_message={})
    Revision.objects.filter(pk=third.pk).update(status_detail="", status_message={})
    migration.convert_details(apps, None)
    stored = dict(Revision.objects.values_list("pk", "status_message"))
    assert stored[first.pk] == {"code": "build.timed_out", "params": {"seconds": "900"}}
    assert stored[second.pk] == as_written("no output for 300 s").to_json()
    assert stored[third.pk] == {}
    with translation.override("fr"):
        assert Revision.objects.get(pk=first.pk).detail_shown() == "la construction a dépassé le délai de 900 s"
