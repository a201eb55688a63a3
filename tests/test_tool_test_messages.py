"""A saved tool test's case message and a test run's error stored as messages (toolhub.messages)
beside their English text: the checks and the worker store the code and the parameters (the
call's own error inside "The call failed: …" as the run stored it), and the migration turns
the English stored before into messages. The test run page in French:
tests/test_tool_test_views.py.

People (tests/conftest.py): alice owns the toolkit."""

from __future__ import annotations

import importlib
import re
from datetime import timedelta

import pytest
from django.apps import apps
from django.utils import timezone
from django.utils.translation import gettext, override

from tests.conftest import toolkit_source
from toolhub.messages import FORMS, Message, as_written, message
from toolhub.runs import tool_tests
from toolhub.toolkits.models import ToolTest, ToolTestResult, ToolTestRun, ToolTestStatus
from toolhub.toolkits.tool_checks import evaluate

migration = importlib.import_module("toolhub.toolkits.migrations.0009_tool_test_messages")


@pytest.fixture
def echo(alice, upload):
    return upload(alice, toolkit_source("Echo"), slug="echo")


def test_a_failed_check_is_a_code_with_its_parameters_and_the_calls_error_as_stored():
    equals = evaluate([{"kind": "equals", "value": "hi"}], succeeded=True, result="HI", error="")
    assert equals.message == message("tests.equals_differs", n=1)
    timed_out = message("run.timed_out", seconds=4.0)
    failed = evaluate([], succeeded=False, result=None, error=timed_out.english(), error_message=timed_out)
    assert failed.message == message("tests.call_failed", error=timed_out)
    with override("fr"):
        assert failed.message.render(gettext).startswith(
            "L’appel a échoué : L’outil"
        )
    # Without a stored message, the tool's own error is text as written.
    own = evaluate([], succeeded=False, result=None, error="boom")
    assert own.message == message("tests.call_failed", error=as_written("boom"))


@pytest.mark.django_db
def test_a_case_whose_tool_is_gone_stores_the_code_and_the_tools_name(echo, alice):
    run = ToolTestRun.objects.create(toolkit=echo, revision=echo.latest_revision(), total=1, started_by=alice)
    test = ToolTest.objects.create(toolkit=echo, name="gone", tool="nope", arguments={}, checks=[])
    result = tool_tests._case(run, test, 0)
    assert (result.message_data, result.message) == (
        {"code": "tests.no_tool", "params": {"tool": "'nope'"}}, "This revision has no tool named 'nope'.",
    )


@pytest.mark.django_db
def test_a_run_no_worker_took_stores_the_code(echo, alice):
    run = ToolTestRun.objects.create(toolkit=echo, revision=echo.latest_revision(), total=1, started_by=alice)
    ToolTestRun.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(hours=1))
    assert tool_tests.reap_test_runs() == 1
    run.refresh_from_db()
    assert (run.status, run.error_message) == (ToolTestStatus.FAILED, {"code": "tests.not_taken", "params": {}})
    assert run.error == "No worker took these tests (is a worker serving the sandbox queue?)."


# -- The migration of the texts stored in English ---------------------------------------------


def _filled(form: str) -> str:
    return re.sub(r"%\((\w+)\)s", lambda m: f"<{m.group(1)} 1>", form)


@pytest.mark.parametrize(("code", "form"), migration.FORMS)
def test_the_migration_reads_each_form_as_its_code_and_parameters(code, form):
    text = _filled(form)
    stored = migration.test_message(text)
    assert stored["code"] == code
    assert FORMS[code] == form
    assert Message.from_json(stored).english() == text


def test_the_migration_reads_the_calls_error_as_a_runs_error():
    assert migration.test_message("The call failed: The tool ran longer than 4 s and was stopped.") == (
        message("tests.call_failed", error=message("run.timed_out", seconds="4")).to_json()
    )
    assert migration.test_message("The call failed: Upload failed: timeout") == (
        message("tests.call_failed", error=as_written("Upload failed: timeout")).to_json()
    )
    assert migration.test_message("something else") == as_written("something else").to_json()


@pytest.mark.django_db
def test_the_migration_converts_the_stored_rows(echo, alice):
    run = ToolTestRun.objects.create(toolkit=echo, revision=echo.latest_revision(), total=2, started_by=alice,
                                     error="The worker running these tests stopped before they finished.")
    differs = ToolTestResult.objects.create(run=run, name="a", tool="echo", message="Check 1 (equals): the result differs.")
    passed = ToolTestResult.objects.create(run=run, name="b", tool="echo", passed=True)
    migration.convert_messages(apps, None)
    run.refresh_from_db()
    assert run.error_message == {"code": "tests.worker_stopped", "params": {}}
    assert ToolTestResult.objects.get(pk=differs.pk).message_data == {"code": "tests.equals_differs", "params": {"n": "1"}}
    assert ToolTestResult.objects.get(pk=passed.pk).message_data == {}
    with override("fr"):
        assert ToolTestResult.objects.get(pk=differs.pk).message_shown() == "Vérification 1 (equals) : le résultat diffère."
