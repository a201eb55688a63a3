"""The Tests tab, a run's page, "Save as test" and the API of tool tests (docs/tool-tests.md):
the owner's and an admin's happy paths, anonymous callers, wrong methods, someone else's
toolkit, hostile input, and the query counts of the lists. The runs themselves (worker and
sandbox) are in tests/test_tool_tests_gate.py."""

from __future__ import annotations

import json
import re

import pytest
from django.utils import timezone

from tests.conftest import toolkit_source
from tests.helpers import bearer_headers
from toolhub.messages import message
from toolhub.runs.models import Invocation, RunStatus
from toolhub.toolkits.models import Status, Toolkit, ToolTest, ToolTestResult, ToolTestRun, ToolTestStatus, Use
from toolhub.toolkits.tool_tests import MAX_TESTS, tool_test_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def echo(upload, alice):
    toolkit = upload(alice, toolkit_source("Echo"), slug="echo")
    toolkit.current_revision.__class__.objects.filter(pk=toolkit.current_revision_id).update(status=Status.READY)
    return Toolkit.objects.select_related("current_revision").get(pk=toolkit.pk)


def _test(toolkit, alice, name="says hi", **kwargs):
    return tool_test_create(toolkit=toolkit, name=name, tool="echo", arguments={"text": "hi"},
                            checks=kwargs.get("checks", [{"kind": "equals", "value": "hi"}]), by=alice)


def _failed_run(toolkit, alice, test):
    run = ToolTestRun.objects.create(toolkit=toolkit, revision=toolkit.current_revision, status=ToolTestStatus.FAILED,
                                     total=1, failed=1, started_by=alice, gate=True)
    result = ToolTestResult(run=run, test=test, name=test.name, tool="echo", expected="hi", actual="HI")
    result.set_message(message("tests.equals_differs", n=1))
    result.save()
    return run


# Pages
# ------------------------------------------------------------------------------


def test_the_owner_adds_a_test_from_the_tests_tab(client, echo, alice):
    client.force_login(alice)
    assert client.get("/toolkits/echo/tests/").status_code == 200
    response = client.post("/toolkits/echo/tests/", {
        "name": "round trip", "tool": "echo", "arguments": '{"text": "hi"}',
        "check-0-kind": "equals", "check-0-value": "hi", "check-1-kind": "json_path", "check-1-path": "$.a", "check-1-value": "[1]",
    })
    assert response.status_code == 302
    test = ToolTest.objects.get(toolkit=echo)
    assert (test.name, test.arguments, test.checks) == ("round trip", {"text": "hi"}, [
        {"kind": "equals", "value": "hi"}, {"kind": "json_path", "value": [1], "path": "$.a"}])
    page = client.get("/toolkits/echo/tests/").content.decode()
    assert "round trip" in page and "Run tests" in page
    # Shown as JSON, as typed, not as Python.
    assert "{&quot;text&quot;: &quot;hi&quot;}" in page and "<code>[1]</code>" in page


@pytest.mark.parametrize(("form", "says"), [
    ({"name": "x", "tool": "echo", "arguments": "{not json"}, "not valid JSON"),
    ({"name": "x", "tool": "nope", "arguments": "{}"}, "no tool of that name"),
    ({"name": "", "tool": "echo", "arguments": "{}"}, "Give the test a name"),
    ({"name": "x", "tool": "echo", "arguments": "[1]"}, "must be a JSON object"),
    ({"name": "x", "tool": "echo", "arguments": "{}", "check-0-kind": "regex", "check-0-value": "("}, "regular expression is invalid"),
])
def test_hostile_input_on_the_tests_tab_is_a_clear_400_and_saves_nothing(client, echo, alice, form, says):
    client.force_login(alice)
    response = client.post("/toolkits/echo/tests/", form)
    assert response.status_code == 400 and says in response.content.decode()
    assert not ToolTest.objects.exists()


def test_the_tests_pages_answer_anonymous_callers_with_the_login_page(client, echo, alice):
    test = _test(echo, alice)
    run = _failed_run(echo, alice, test)
    for method, url in (("get", "/toolkits/echo/tests/"), ("post", "/toolkits/echo/tests/run/"),
                        ("get", f"/toolkits/echo/tests/runs/{run.pk}/"), ("post", f"/toolkits/echo/tests/{test.pk}/delete/")):
        response = getattr(client, method)(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"], url


def test_the_tests_pages_refuse_wrong_methods(client, echo, alice):
    test = _test(echo, alice)
    run = _failed_run(echo, alice, test)
    client.force_login(alice)
    assert client.put("/toolkits/echo/tests/").status_code == 405
    assert client.get("/toolkits/echo/tests/run/").status_code == 405
    assert client.post(f"/toolkits/echo/tests/runs/{run.pk}/").status_code == 405
    assert client.get(f"/toolkits/echo/tests/{test.pk}/delete/").status_code == 405
    assert ToolTest.objects.count() == 1


def test_someone_elses_toolkit_tests_are_403_and_a_hidden_ones_404(client, echo, alice, bob):
    test = _test(echo, alice)
    run = _failed_run(echo, alice, test)
    client.force_login(bob)
    assert client.get("/toolkits/echo/tests/").status_code == 403
    assert client.post("/toolkits/echo/tests/", {"name": "mine", "tool": "echo", "arguments": "{}"}).status_code == 403
    assert client.post(f"/toolkits/echo/tests/{test.pk}/delete/").status_code == 403
    assert client.get(f"/toolkits/echo/tests/runs/{run.pk}/").status_code == 403
    assert client.post("/toolkits/echo/tests/run/").status_code == 403
    Toolkit.objects.filter(pk=echo.pk).update(use=Use.ADMINS)
    assert client.get("/toolkits/echo/tests/").status_code == 404
    assert list(ToolTest.objects.values_list("name", flat=True)) == ["says hi"]


def test_an_admin_manages_any_toolkits_tests(client, echo, alice, admin):
    test = _test(echo, alice)
    client.force_login(admin)
    assert client.get("/toolkits/echo/tests/").status_code == 200
    assert client.post(f"/toolkits/echo/tests/{test.pk}/delete/").status_code == 302
    assert not ToolTest.objects.exists()


def test_a_test_of_another_toolkit_is_not_found_under_this_one(client, echo, upload, alice):
    other = upload(alice, toolkit_source("Other"), slug="other")
    test = _test(echo, alice)
    client.force_login(alice)
    assert client.post(f"/toolkits/{other.slug}/tests/{test.pk}/delete/").status_code == 404
    assert ToolTest.objects.filter(pk=test.pk).exists()


def test_a_runs_page_shows_the_failed_case_with_its_diff(client, echo, alice):
    run = _failed_run(echo, alice, _test(echo, alice))
    client.force_login(alice)
    page = client.get(f"/toolkits/echo/tests/runs/{run.pk}/").content.decode()
    assert "Check 1 (equals): the result differs." in page
    assert '<span class="d-del">-hi</span>' in page and '<span class="d-add">+HI</span>' in page


def test_run_tests_queues_a_run_of_the_current_revision(client, echo, alice):
    _test(echo, alice)
    client.force_login(alice)
    response = client.post("/toolkits/echo/tests/run/")
    run = ToolTestRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/toolkits/echo/tests/runs/{run.pk}/"
    assert (run.gate, run.status, run.revision_id, run.total) == (False, ToolTestStatus.QUEUED, echo.current_revision_id, 1)
    # One run of a toolkit at a time.
    client.post("/toolkits/echo/tests/run/")
    assert ToolTestRun.objects.count() == 1


def test_the_tests_tab_makes_the_same_queries_for_one_or_many(client, echo, alice, django_assert_num_queries):
    client.force_login(alice)
    _failed_run(echo, alice, _test(echo, alice, "t0"))
    client.get("/toolkits/echo/tests/")
    # The session and user, the toolkit, its latest revision, its tests, its runs.
    with django_assert_num_queries(6) as one:
        assert client.get("/toolkits/echo/tests/").status_code == 200
    for n in range(1, 6):
        _failed_run(echo, alice, _test(echo, alice, f"t{n}"))
    with django_assert_num_queries(len(one.captured_queries)):
        page = client.get("/toolkits/echo/tests/").content.decode()
    assert len(re.findall(r"/tests/\d+/delete/", page)) == 6 and page.count("/tests/runs/") == 6


# Save as test
# ------------------------------------------------------------------------------


def _finished(toolkit, user, **fields):
    return Invocation.objects.create(toolkit=toolkit, revision=toolkit.current_revision, tool="echo", arguments={"text": "hi"},
                                     user=user, finished_at=timezone.now(), **fields)


def test_save_as_test_turns_a_finished_run_into_a_test(client, echo, alice):
    ok = _finished(echo, alice, status=RunStatus.SUCCEEDED, result="hi")
    failed = _finished(echo, alice, status=RunStatus.FAILED, error="ValueError: no\nTraceback…")
    client.force_login(alice)
    assert "Save as test" in client.get(f"/invocations/{ok.pk}/").content.decode()
    assert client.post(f"/invocations/{ok.pk}/save-as-test/").status_code == 302
    assert client.post(f"/invocations/{failed.pk}/save-as-test/").status_code == 302
    assert list(ToolTest.objects.values_list("name", "arguments", "checks")) == [
        ("echo 1", {"text": "hi"}, [{"kind": "equals", "value": "hi"}]),
        ("echo 2", {"text": "hi"}, [{"kind": "fails_with", "value": "ValueError: no"}]),
    ]


def test_save_as_test_is_only_for_finished_runs_the_toolkits_managers_and_post(client, echo, alice, bob):
    running = _finished(echo, alice, status=RunStatus.RUNNING)
    bobs = _finished(echo, bob, status=RunStatus.SUCCEEDED, result="hi")
    client.force_login(alice)
    assert client.get(f"/invocations/{bobs.pk}/save-as-test/").status_code == 405
    client.post(f"/invocations/{running.pk}/save-as-test/")
    client.force_login(bob)
    assert "Save as test" not in client.get(f"/invocations/{bobs.pk}/").content.decode()
    assert client.post(f"/invocations/{bobs.pk}/save-as-test/").status_code == 403
    client.logout()
    response = client.post(f"/invocations/{bobs.pk}/save-as-test/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert not ToolTest.objects.exists()


# API
# ------------------------------------------------------------------------------


def test_the_api_saves_lists_runs_and_deletes_tests(client, echo, alice):
    headers = bearer_headers(alice)
    body = {"name": "hi", "tool": "echo", "arguments": {"text": "hi"},
            "checks": [{"kind": "regex", "value": "^h"}, {"kind": "json_path", "path": "$[0]", "value": 1}]}
    created = client.post("/api/v1/toolkits/echo/tests", json.dumps(body), content_type="application/json", **headers)
    assert created.status_code == 201, created.content
    test_id = created.json()["id"]
    listed = client.get("/api/v1/toolkits/echo/tests", **headers).json()["items"]
    assert [(t["name"], t["checks"][1]["path"]) for t in listed] == [("hi", "$[0]")]
    started = client.post("/api/v1/toolkits/echo/revisions/1/test-runs", **headers)
    assert started.status_code == 202 and started.json()["status"] == "queued"
    run = client.get(f"/api/v1/toolkits/echo/revisions/1/test-runs/{started.json()['id']}", **headers).json()
    assert (run["status"], run["cases"], run["gate"]) == ("queued", [], False)
    assert [r["id"] for r in client.get("/api/v1/toolkits/echo/test-runs", **headers).json()["items"]] == [run["id"]]
    assert client.delete(f"/api/v1/toolkits/echo/tests/{test_id}", **headers).status_code == 204
    assert not ToolTest.objects.exists()


def test_a_revisions_detail_says_how_its_tests_went(client, echo, alice):
    run = _failed_run(echo, alice, _test(echo, alice))
    revisions = client.get("/api/v1/toolkits/echo", **bearer_headers(alice)).json()["revisions"]
    assert revisions[0]["tests"] == {"status": "failed", "run": run.pk}


@pytest.mark.parametrize(("body", "field", "status"), [
    ({"name": "x", "tool": "echo", "arguments": {}, "checks": [{"kind": "regex", "value": "(("}]}, "checks", 400),
    ({"name": "x", "tool": "echo", "arguments": {}, "checks": [{"kind": "json_path", "path": "$..x", "value": 1}]}, "path", 400),
    ({"name": "x", "tool": "gone", "arguments": {}}, "tool", 400),
    ({"name": "x", "tool": "echo", "arguments": {"_user": 1}}, "arguments", 400),
    ({"name": "x", "tool": "echo", "arguments": {"text": "y" * 20_000}}, "arguments", 400),
    ({"name": "says hi", "tool": "echo"}, "name", 409),
])
def test_the_api_refuses_hostile_tests_with_the_error_shape(client, echo, alice, body, field, status):
    _test(echo, alice)
    response = client.post("/api/v1/toolkits/echo/tests", json.dumps(body), content_type="application/json", **bearer_headers(alice))
    assert response.status_code == status, response.content
    assert response.json()["errors"][0]["field"] == field
    assert ToolTest.objects.count() == 1


def test_the_api_caps_the_tests_of_a_toolkit(client, echo, alice):
    for n in range(MAX_TESTS):
        _test(echo, alice, f"t{n}")
    body = {"name": "one more", "tool": "echo"}
    response = client.post("/api/v1/toolkits/echo/tests", json.dumps(body), content_type="application/json", **bearer_headers(alice))
    assert response.status_code == 409 and "at most 25 tests" in response.json()["errors"][0]["message"]


def test_the_api_of_tests_is_for_owners_and_admins(client, echo, alice, bob, admin):
    test = _test(echo, alice)
    run = _failed_run(echo, alice, test)
    urls = [("get", "/api/v1/toolkits/echo/tests"), ("post", "/api/v1/toolkits/echo/tests"),
            ("delete", f"/api/v1/toolkits/echo/tests/{test.pk}"), ("get", "/api/v1/toolkits/echo/test-runs"),
            ("post", "/api/v1/toolkits/echo/revisions/1/test-runs"), ("get", f"/api/v1/toolkits/echo/revisions/1/test-runs/{run.pk}")]
    body = json.dumps({"name": "bob's", "tool": "echo"})
    def call(method, url, **headers):
        if method == "get":
            return client.get(url, **headers)
        return getattr(client, method)(url, body, content_type="application/json", **headers)

    for method, url in urls:
        assert call(method, url).status_code == 401, url
        response = call(method, url, **bearer_headers(bob))
        assert response.status_code == 403 and response.json()["errors"][0]["message"], url
    assert client.get("/api/v1/toolkits/echo/test-runs", **bearer_headers(admin)).status_code == 200
    assert client.put("/api/v1/toolkits/echo/tests", **bearer_headers(alice)).status_code == 405
    Toolkit.objects.filter(pk=echo.pk).update(use=Use.ADMINS)
    assert client.get("/api/v1/toolkits/echo/tests", **bearer_headers(bob)).status_code == 404
    assert list(ToolTest.objects.values_list("name", flat=True)) == ["says hi"]
    assert ToolTestRun.objects.count() == 1


def test_an_admin_approves_a_revision_whose_tests_failed_only_with_a_reason(client, echo, alice, admin):
    revision = echo.current_revision
    type(revision).objects.filter(pk=revision.pk).update(status=Status.AWAITING_REVIEW)
    run = _failed_run(echo, alice, _test(echo, alice))
    headers = bearer_headers(admin)
    url = "/api/v1/toolkits/echo/revisions/1/approve"
    refused = client.post(url, "{}", content_type="application/json", **headers)
    assert refused.status_code == 400 and refused.json()["errors"][0]["field"] == "reason"
    approved = client.post(url, json.dumps({"reason": "known flake"}), content_type="application/json", **headers)
    assert approved.status_code == 200, approved.content
    run.refresh_from_db()
    assert (run.status, run.overridden_by, run.override_reason) == (ToolTestStatus.OVERRIDDEN, admin, "known flake")
    assert approved.json()["revisions"][0]["tests"]["status"] == "overridden"


# UserValves saved with a test
# ------------------------------------------------------------------------------

SECRET = "sk-test-7731-never-shown"


@pytest.fixture
def with_user_valves(echo):
    schema = {"type": "object", "properties": {"api_key": {"type": "string", "format": "password"}, "region": {"type": "string"}}}
    type(echo.current_revision).objects.filter(pk=echo.current_revision_id).update(user_valves_schema=schema)
    return Toolkit.objects.select_related("current_revision").get(pk=echo.pk)


def test_user_valves_saved_with_a_test_are_stored_encrypted_and_never_shown(client, with_user_valves, alice, admin):
    client.force_login(admin)
    response = client.post("/toolkits/echo/tests/", {
        "name": "with key", "tool": "echo", "arguments": '{"text": "hi"}', "user_valves": json.dumps({"api_key": SECRET, "region": "eu"}),
    })
    assert response.status_code == 302
    test = ToolTest.objects.get()
    assert SECRET not in test.user_valves_ciphertext and test.user_valve_names == ["api_key", "region"]
    # The owner (and the admin who saved it) see the names, never the values.
    client.force_login(alice)
    page = client.get("/toolkits/echo/tests/").content.decode()
    assert "api_key" in page and SECRET not in page
    listed = client.get("/api/v1/toolkits/echo/tests", **bearer_headers(alice)).content.decode()
    assert '"user_valves": ["api_key", "region"]' in listed and SECRET not in listed


@pytest.mark.parametrize(("user_valves", "says"), [
    ({"nope": 1}, "no setting named nope"),
    ({"api_key": "x" * 20_000}, "at most 16000 characters"),
])
def test_user_valves_the_toolkit_does_not_define_are_refused(client, with_user_valves, alice, user_valves, says):
    body = {"name": "x", "tool": "echo", "user_valves": user_valves}
    response = client.post("/api/v1/toolkits/echo/tests", json.dumps(body), content_type="application/json", **bearer_headers(alice))
    assert response.status_code == 400 and says in response.json()["errors"][0]["message"]
    assert response.json()["errors"][0]["field"] == "user_valves"
    client.force_login(alice)
    response = client.post("/toolkits/echo/tests/", {"name": "x", "tool": "echo", "user_valves": "{nope"})
    assert response.status_code == 400 and "The UserValves are not valid JSON." in response.content.decode()
    assert not ToolTest.objects.exists()


def test_a_runs_messages_are_shown_in_the_readers_language(client, echo, alice):
    run = _failed_run(echo, alice, _test(echo, alice))
    hangs = ToolTestResult(run=run, name="hangs", tool="echo", position=1)
    hangs.set_message(message("tests.call_failed", error=message("run.timed_out", seconds=4.0)))
    hangs.save()
    ToolTestRun.objects.filter(pk=run.pk).update(**ToolTestRun.error_fields(message("tests.worker_stopped")))
    client.force_login(alice)
    page = client.get(f"/toolkits/echo/tests/runs/{run.pk}/", HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    assert "Vérification 1 (equals) : le résultat diffère." in page
    assert "L’appel a échoué : L’outil" in page
    assert "Le worker qui exécutait ces tests s’est arrêté avant la fin." in page


def test_the_revisions_tab_links_each_revisions_test_run_for_its_managers(client, echo, alice, bob):
    run = _failed_run(echo, alice, _test(echo, alice))
    client.force_login(alice)
    assert f"/toolkits/echo/tests/runs/{run.pk}/" in client.get("/toolkits/echo/revisions/").content.decode()
    client.force_login(bob)
    assert "/tests/runs/" not in client.get("/toolkits/echo/revisions/").content.decode()


def test_user_valves_an_admin_saved_reach_only_code_an_admin_wrote_or_approved(with_user_valves, alice, admin):
    from toolhub.toolkits import lifecycle
    from toolhub.toolkits.services import revision_upload
    from toolhub.toolkits.tool_tests import saved_user_valves

    test = tool_test_create(toolkit=with_user_valves, name="admin's", tool="echo", arguments={"text": "hi"}, checks=[],
                            user_valves={"api_key": SECRET}, by=admin)
    owners = revision_upload(toolkit=with_user_valves, source=toolkit_source("Echo", version="9"), user=alice).revision

    def case_for(revision):
        run = ToolTestRun.objects.create(toolkit=with_user_valves, revision=revision, started_by=alice)
        invocation = Invocation.objects.create(toolkit=with_user_valves, revision=revision, tool="echo", user=alice)
        ToolTestResult.objects.create(run=run, test=test, name=test.name, tool="echo", invocation=invocation)
        return invocation.pk

    # The owner's new revision could send the admin's secret back: it runs without it.
    assert saved_user_valves(case_for(owners)) is None
    type(owners).objects.filter(pk=owners.pk).update(status=Status.AWAITING_REVIEW)
    lifecycle.review_decide(revision_id=owners.pk, user=admin, approve=True)
    owners.refresh_from_db()
    assert saved_user_valves(case_for(owners)) == {"api_key": SECRET}
