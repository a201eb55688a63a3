"""Why a run failed stored as a message (toolhub.messages) beside its English text: the workers
store the code and the parameters (a tool's own error as written), the run pages render the
message in the reader's language, and the migration turns the English errors stored before
into messages.

People (tests/conftest.py): alice starts the runs."""

from __future__ import annotations

import importlib
import re
from datetime import timedelta

import pytest
from django.apps import apps
from django.utils import timezone
from django.utils.translation import override

from tests.conftest import toolkit_source
from toolhub.agents import engine as agent_engine
from toolhub.agents.models import AgentRun, AgentRunStatus
from toolhub.messages import FORMS, Message, as_written, message
from toolhub.runs import engine
from toolhub.runs.models import Invocation, RunStatus

migration = importlib.import_module("toolhub.runs.migrations.0010_invocation_error_message")


@pytest.fixture
def echo(alice, upload):
    return upload(alice, toolkit_source("Echo"), slug="echo")


def _agent_run(user, toolkit, **fields) -> AgentRun:
    return AgentRun.objects.create(
        user=user, connection=None, connection_name="gone", model="m", strategy=toolkit,
        strategy_revision=toolkit.latest_revision(), query="q", **fields,
    )


# -- The writers ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_invocation_no_worker_took_stores_the_code_the_count_and_why(echo, alice, settings):
    old = timezone.now() - timedelta(hours=1)
    run = Invocation.objects.create(
        toolkit=echo, revision=echo.latest_revision(), tool="echo", user=alice, arguments={},
        sends=settings.TOOLHUB_RESEND_MAX + 1, sent_at=old,
    )
    assert engine.reap_stale_invocations() == 1
    run.refresh_from_db()
    count = settings.TOOLHUB_RESEND_MAX + 1
    assert run.error_message == {
        "code": "run.not_taken", "params": {"count": count, "why": {"code": "run.no_worker", "params": {}}},
    }
    assert run.error == (
        f"No worker took this invocation although its task was sent {count} times (is a worker serving the sandbox queue?)."
    )


@pytest.mark.django_db
def test_an_agent_run_whose_connection_is_gone_stores_the_code_and_shows_it_in_french(client, echo, alice):
    run = _agent_run(alice, echo, status=AgentRunStatus.RUNNING)
    agent_engine.execute(run)
    run.refresh_from_db()
    assert (run.status, run.error_message) == (AgentRunStatus.FAILED, {"code": "agent.connection_deleted", "params": {}})
    assert run.error == "The model connection was deleted."
    client.force_login(alice)
    page = client.get(run.get_absolute_url(), HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    assert "La connexion au modèle a été supprimée." in page


@pytest.mark.django_db
def test_the_run_page_shows_the_workers_words_translated_and_the_parameters_as_written(client, echo, alice):
    run = Invocation.objects.create(toolkit=echo, revision=echo.latest_revision(), tool="echo", user=alice, arguments={})
    Invocation.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
    engine._finish(run, RunStatus.FAILED, error=message("run.sandbox_limit", limit="memory <1 GiB>"))
    run.refresh_from_db()
    assert run.error == "The tool hit a sandbox limit (memory <1 GiB>) and was stopped."
    client.force_login(alice)
    page = client.get(f"/invocations/{run.id}/", HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    shown = "L’outil a atteint une limite du bac à sable (memory &lt;1 GiB&gt;) et a été arrêté."
    assert f'<p class="error" id="error">{shown}</p>' in page


# -- The migration of the errors stored in English ---------------------------------------------


def _filled(form: str) -> str:
    return re.sub(r"%\((\w+)\)s", lambda m: f"<{m.group(1)} 1>", form)


@pytest.mark.parametrize(("code", "form"), migration.FORMS)
def test_the_migration_reads_each_form_as_its_code_and_parameters(code, form):
    text = _filled(form)
    stored = migration.error_message(text)
    assert stored["code"] == code
    assert FORMS[code] == form
    assert Message.from_json(stored).english() == text


def test_the_migration_reads_build_failures_why_and_keeps_a_tools_own_error():
    assert migration.error_message(
        "The toolkit's environment could not be built on w1: No matching distribution for x"
    ) == message("run.environment_failed_on", host="w1", reason=message("step.no_distribution", name="x")).to_json()
    assert migration.error_message(
        "No worker took this invocation although its task was sent 4 times (the workers were busy with other invocations)."
    ) == message("run.not_taken", count="4", why=message("run.workers_busy")).to_json()
    assert migration.error_message("Upload failed: timeout") == as_written("Upload failed: timeout").to_json()
    assert migration.error_message("The strategy failed: ValueError: no") == (
        message("agent.strategy_failed", error="ValueError: no").to_json()
    )
    assert migration.error_message("") == {}


@pytest.mark.django_db
def test_the_migrations_convert_the_stored_rows(echo, alice):
    agents = importlib.import_module("toolhub.agents.migrations.0004_agentrun_error_message")
    made = [
        Invocation.objects.create(toolkit=echo, revision=echo.latest_revision(), tool="echo", user=alice, arguments={},
                                  status=RunStatus.FAILED, error=error)
        for error in ("Cancelled by alice.", "ValueError: nope", "")
    ]
    agent_run = _agent_run(alice, echo, status=AgentRunStatus.FAILED, error="The model connection was deleted.")
    migration.convert_errors(apps, None)
    agents.convert_errors(apps, None)
    stored = dict(Invocation.objects.values_list("pk", "error_message"))
    assert [stored[run.pk] for run in made] == [
        {"code": "run.cancelled", "params": {"user": "alice"}}, as_written("ValueError: nope").to_json(), {},
    ]
    agent_run.refresh_from_db()
    assert agent_run.error_message == {"code": "agent.connection_deleted", "params": {}}
    with override("pl"):
        assert Invocation.objects.get(pk=made[0].pk).error_shown() == "Anulowane przez alice."
