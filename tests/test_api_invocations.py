"""The invocation endpoints of the API (docs/api.md, "Invocations"): argument checks
before anything is queued, the states a caller must be told about (not ready, unknown tool,
no broker), who may read and answer an invocation, and the error shape. The toolkits here
are made ready by hand with a stored spec (the sandboxed introspection and real runs are
covered by tests/test_invocations.py), so nothing here needs bubblewrap or a worker."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from tests.conftest import example
from tests.helpers import bearer_headers, broker_at, ready_string_reverse, reverse_tool
from toolhub.runs.models import Event, Invocation, RunStatus, Surface
from toolhub.toolkits.models import Status

pytestmark = pytest.mark.django_db

PARAMETERS = {
    "type": "object",
    "properties": {
        "string": {"type": "string", "description": "The string to reverse", "maxLength": 20},
        "times": {"type": "integer", "minimum": 1, "maximum": 3, "default": 1},
        "mode": {"type": "string", "enum": ["plain", "fancy"], "default": "plain"},
    },
    "required": ["string"],
}


@pytest.fixture
def toolkit(upload, alice):
    """alice's ready toolkit with one tool, `reverse_string`."""
    return ready_string_reverse(upload, alice, tools=[reverse_tool(PARAMETERS, description="Reverses the input string.")])


bearer = bearer_headers


def post(client, url: str, body, headers: dict):
    return client.post(url, json.dumps(body), content_type="application/json", **headers)


def invoke_url(toolkit, tool: str = "reverse_string") -> str:
    return f"/api/v1/toolkits/{toolkit.slug}/tools/{tool}/invoke"


def made_invocation(toolkit, user, **fields) -> Invocation:
    """An invocation row as the worker would have left it (no broker involved)."""
    return Invocation.objects.create(
        toolkit=toolkit, revision=toolkit.current_revision, tool="reverse_string",
        arguments={"string": "abc"}, user=user, **fields,
    )


def broker_unreachable():
    """Point the Celery app at a port where no broker listens."""
    return broker_at("redis://127.0.0.1:1/0")


# Invoke
# ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({}, "string"),
        ({"string": 42}, "string"),
        ({"string": "x" * 21}, "string"),
        ({"string": "abc", "times": 9}, "times"),
        ({"string": "abc", "times": "2"}, "times"),
        ({"string": "abc", "mode": "loud"}, "mode"),
        ({"string": "abc", "__user__": {"role": "admin"}}, "__user__"),
    ],
)
def test_it_rejects_arguments_that_do_not_fit_the_schema_and_queues_nothing(client, toolkit, carol, arguments, field):
    response = post(client, invoke_url(toolkit), {"arguments": arguments, "wait": False}, bearer(carol))

    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert [e["field"] for e in errors] == [field]
    assert set(errors[0]) == {"message", "field", "line"} and errors[0]["line"] is None
    assert errors[0]["message"]
    assert Invocation.objects.count() == 0


def test_it_reports_every_bad_field_at_once(client, toolkit, carol):
    response = post(client, invoke_url(toolkit), {"arguments": {"times": 0, "mode": "x"}}, bearer(carol))
    assert response.status_code == 400
    assert sorted(e["field"] for e in response.json()["errors"]) == ["mode", "string", "times"]
    assert Invocation.objects.count() == 0


def test_it_rejects_arguments_that_are_not_an_object(client, toolkit, carol):
    response = post(client, invoke_url(toolkit), {"arguments": ["abc"]}, bearer(carol))
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "arguments"
    assert Invocation.objects.count() == 0


def test_a_broken_schema_is_a_400_not_a_crash(client, toolkit, carol):
    # The schema comes from the toolkit's author: an invalid regular expression in it.
    revision = toolkit.current_revision
    revision.tools[0]["function"]["parameters"]["properties"]["string"]["pattern"] = "("
    revision.save()
    response = post(client, invoke_url(toolkit), {"arguments": {"string": "abc"}}, bearer(carol))
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] is None
    assert Invocation.objects.count() == 0


def test_it_answers_409_with_the_reason_when_the_toolkit_is_not_ready(client, upload, alice, carol):
    toolkit = upload(alice, example("friendly_sizes"))
    assert toolkit.current_revision.status == Status.AWAITING_APPROVAL

    response = post(client, invoke_url(toolkit, "natural_size"), {"arguments": {"num_bytes": 1}}, bearer(carol))

    assert response.status_code == 409
    [error] = response.json()["errors"]
    assert "not ready" in error["message"] and "approve" in error["message"]
    assert "humanize" in error["message"]
    assert Invocation.objects.count() == 0


def test_it_answers_404_for_a_tool_the_toolkit_does_not_have(client, toolkit, carol):
    response = post(client, invoke_url(toolkit, "nope"), {"arguments": {}}, bearer(carol))
    assert response.status_code == 404
    assert response.json()["errors"][0]["field"] == "tool"
    assert Invocation.objects.count() == 0


def test_it_answers_404_for_an_unknown_toolkit(client, carol):
    response = post(client, "/api/v1/toolkits/nope/tools/x/invoke", {"arguments": {}}, bearer(carol))
    assert response.status_code == 404
    assert response.json() == {"errors": [{"message": "Not found.", "field": None, "line": None}]}


def test_wait_false_answers_202_with_the_queued_invocation(client, toolkit, carol):
    response = post(client, invoke_url(toolkit), {"arguments": {"string": "abc"}, "wait": False}, bearer(carol))

    assert response.status_code == 202
    body = response.json()
    invocation = Invocation.objects.get()
    assert body == {"id": str(invocation.id), "status": "queued"}
    assert (invocation.user, invocation.tool, invocation.arguments) == (carol, "reverse_string", {"string": "abc"})
    assert invocation.revision == toolkit.current_revision


def test_wait_true_gives_up_at_the_server_side_limit_with_the_state_reached(client, toolkit, carol, settings):
    # No worker runs here: after the wait limit the caller gets the invocation as it is.
    settings.TOOLHUB_INVOKE_WAIT_SECONDS = 0.2
    response = post(client, invoke_url(toolkit), {"arguments": {"string": "abc"}, "wait": True}, bearer(carol))

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "queued" and body["toolkit"] == toolkit.slug and body["result"] is None


def test_a_broker_that_is_down_answers_503_and_leaves_nothing_queued(client, toolkit, carol):
    with broker_unreachable():
        started = time.monotonic()
        response = post(client, invoke_url(toolkit), {"arguments": {"string": "abc"}, "wait": False}, bearer(carol))
        elapsed = time.monotonic() - started

    assert response.status_code == 503
    # Promptly: not after kombu's seconds of reconnecting.
    assert elapsed < 3
    assert "worker" in response.json()["errors"][0]["message"]
    invocation = Invocation.objects.get()
    assert invocation.status == RunStatus.FAILED
    assert invocation.finished_at is not None and "broker" in invocation.error
    assert not Invocation.objects.filter(status=RunStatus.QUEUED).exists()


def test_the_task_is_sent_before_the_row_is_stored(client, toolkit, carol, monkeypatch):
    # So the worker's way to the run overlaps the INSERT (the worker waits for a row it does
    # not see yet: tests/test_invocations.py).
    from toolhub import broker

    sent_before_stored: list[bool] = []
    real_send = broker.send

    def send(task_name, invocation_id):
        sent_before_stored.append(not Invocation.objects.filter(pk=invocation_id).exists())
        real_send(task_name, invocation_id)

    monkeypatch.setattr(broker, "send", send)
    response = post(client, invoke_url(toolkit), {"arguments": {"string": "abc"}, "wait": False}, bearer(carol))

    assert response.status_code == 202
    assert sent_before_stored == [True]
    assert Invocation.objects.get(pk=response.json()["id"]).status == RunStatus.QUEUED


def test_a_take_that_found_nothing_looks_again_while_the_row_may_still_come(toolkit, carol, monkeypatch):
    from toolhub.runs import engine

    pk = uuid.uuid4()
    patience = engine._RowPatience(pk)
    assert patience.still_to_come()  # no row yet: look again after a pause
    made_invocation(toolkit, carol, id=pk)
    assert patience.still_to_come()  # it came after the last look, queued: look again
    Invocation.objects.filter(pk=pk).update(status=RunStatus.RUNNING)
    assert not patience.still_to_come()  # run for another message: nothing left to do
    assert not patience.gave_up
    monkeypatch.setattr(engine, "ROW_PATIENCE_SECONDS", 0.05)
    never = engine._RowPatience(uuid.uuid4())
    started = time.monotonic()
    while never.still_to_come():
        assert time.monotonic() - started < 2
    assert time.monotonic() - started >= 0.05
    assert never.gave_up


def test_after_running_another_call_a_message_takes_again_only_while_its_own_waits(toolkit, carol, monkeypatch):
    """A message whose row never comes must not keep a worker process taking others' calls
    for good: its patience counts from its start. Its own call still queued is taken whatever
    the time; one the queue never takes (a tool test's) leaves nothing to wait for."""
    from toolhub.runs import engine

    monkeypatch.setattr(engine, "ROW_PATIENCE_SECONDS", 0.05)
    never = engine._RowPatience(uuid.uuid4())
    assert never.waits()
    time.sleep(0.06)
    assert not never.waits() and never.gave_up

    queued = made_invocation(toolkit, carol)
    patience = engine._RowPatience(queued.pk)
    time.sleep(0.06)
    assert patience.waits() and not patience.gave_up
    Invocation.objects.filter(pk=queued.pk).update(status=RunStatus.SUCCEEDED)
    assert not patience.waits()

    test_call = made_invocation(toolkit, carol, surface=Surface.TEST)
    assert not engine._RowPatience(test_call.pk).waits()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("post", "/api/v1/toolkits/{slug}/tools/reverse_string/invoke"),
        ("get", "/api/v1/invocations/{id}"),
        ("post", "/api/v1/invocations/{id}/respond"),
        ("post", "/api/v1/invocations/{id}/cancel"),
    ],
)
def test_anonymous_callers_get_401(client, toolkit, alice, method, path):
    invocation = made_invocation(toolkit, alice)
    url = path.format(slug=toolkit.slug, id=invocation.id)
    if method == "get":
        response = client.get(url)
    else:
        response = client.post(url, json.dumps({"arguments": {"string": "a"}, "value": 1}), content_type="application/json")
    assert response.status_code == 401
    assert response.json()["errors"][0]["field"] is None
    assert Invocation.objects.count() == 1


def test_a_bad_token_gets_401(client, toolkit):
    response = post(client, invoke_url(toolkit), {"arguments": {"string": "a"}}, {"HTTP_AUTHORIZATION": "Bearer nope"})
    assert response.status_code == 401


# Reading
# ------------------------------------------------------------------------------


def test_the_invoker_reads_their_invocation_with_its_events(client, toolkit, carol):
    invocation = made_invocation(toolkit, carol, status=RunStatus.SUCCEEDED, result="cba", result_type="text",
                                 traceback="Traceback: secret internals")
    Event.objects.create(invocation=invocation, seq=1, type="status", data={"description": "working", "done": True})

    response = client.get(f"/api/v1/invocations/{invocation.id}", **bearer(carol))

    assert response.status_code == 200
    body = response.json()
    assert body["id"] == str(invocation.id)
    assert (body["toolkit"], body["revision"], body["tool"]) == (toolkit.slug, 1, "reverse_string")
    assert (body["status"], body["result"], body["error"]) == ("succeeded", "cba", None)
    assert body["events"] == [{"seq": 1, "type": "status", "data": {"description": "working", "done": True}}]
    # The traceback is for pages shown to the owner, never in the API.
    assert "traceback" not in body and "secret internals" not in response.content.decode()


def test_an_admin_reads_anyones_invocation(client, toolkit, carol, admin):
    invocation = made_invocation(toolkit, carol)
    assert client.get(f"/api/v1/invocations/{invocation.id}", **bearer(admin)).status_code == 200


@pytest.mark.parametrize("who", ["bob", "alice"])
def test_another_user_gets_404_even_the_toolkits_owner(client, toolkit, carol, who, request):
    invocation = made_invocation(toolkit, carol)
    response = client.get(f"/api/v1/invocations/{invocation.id}", **bearer(request.getfixturevalue(who)))
    assert response.status_code == 404
    assert response.json() == {"errors": [{"message": "Not found.", "field": None, "line": None}]}


@pytest.mark.parametrize("invocation_id", ["5a35e8f5-cff8-4ab8-b20c-1c7f9b13bbd9", "not-a-uuid"])
def test_an_unknown_invocation_is_404(client, carol, invocation_id):
    assert client.get(f"/api/v1/invocations/{invocation_id}", **bearer(carol)).status_code == 404


# Answering an __event_call__
# ------------------------------------------------------------------------------


def _waiting(toolkit, user) -> Invocation:
    return made_invocation(
        toolkit, user, status=RunStatus.AWAITING_INPUT,
        pending_call={"type": "confirmation", "data": {"title": "Sure?", "message": "Go?"}},
    )


def test_the_invoker_answers_a_pending_call(client, toolkit, carol):
    invocation = _waiting(toolkit, carol)
    response = post(client, f"/api/v1/invocations/{invocation.id}/respond", {"value": True}, bearer(carol))

    assert response.status_code == 200
    assert response.json()["id"] == str(invocation.id)
    invocation.refresh_from_db()
    assert invocation.call_answer == {"value": True}

    # One answer per call: a second one finds nothing waiting for it.
    again = post(client, f"/api/v1/invocations/{invocation.id}/respond", {"value": False}, bearer(carol))
    assert again.status_code == 409
    invocation.refresh_from_db()
    assert invocation.call_answer == {"value": True}


@pytest.mark.parametrize("who", ["admin", "bob", "alice"])
def test_only_the_invoker_may_answer(client, toolkit, carol, who, request):
    invocation = _waiting(toolkit, carol)
    response = post(client, f"/api/v1/invocations/{invocation.id}/respond", {"value": True},
                    bearer(request.getfixturevalue(who)))
    assert response.status_code == 404
    invocation.refresh_from_db()
    assert invocation.call_answer is None


@pytest.mark.parametrize("status", [RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.SUCCEEDED, RunStatus.FAILED])
def test_answering_when_nothing_waits_is_409(client, toolkit, carol, status):
    invocation = made_invocation(toolkit, carol, status=status)
    response = post(client, f"/api/v1/invocations/{invocation.id}/respond", {"value": True}, bearer(carol))
    assert response.status_code == 409
    [error] = response.json()["errors"]
    assert set(error) == {"message", "field", "line"} and "not waiting" in error["message"]
    invocation.refresh_from_db()
    assert invocation.call_answer is None


# -- Cancelling (POST /invocations/{id}/cancel) -------------------------------------------------


@pytest.mark.parametrize("status", [RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_INPUT])
def test_the_invoker_cancels_an_unfinished_invocation(client, toolkit, carol, status):
    invocation = made_invocation(toolkit, carol, status=status, pending_call={"type": "confirmation", "data": {}})
    response = client.post(f"/api/v1/invocations/{invocation.id}/cancel", **bearer(carol))
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["error"]) == ("failed", "Cancelled by carol.")
    invocation.refresh_from_db()
    assert (invocation.status, invocation.error) == (RunStatus.FAILED, "Cancelled by carol.")
    assert invocation.finished_at is not None and invocation.pending_call is None


def test_an_admin_cancels_anyones_invocation(client, toolkit, carol, admin):
    invocation = made_invocation(toolkit, carol, status=RunStatus.RUNNING)
    response = client.post(f"/api/v1/invocations/{invocation.id}/cancel", **bearer(admin))
    assert response.status_code == 200
    assert response.json()["error"] == "Cancelled by admin."


def test_nobody_else_may_cancel(client, toolkit, carol, bob, alice):
    invocation = made_invocation(toolkit, carol, status=RunStatus.RUNNING)
    # bob cannot see carol's run at all; alice owns the toolkit, which does not make the run hers.
    assert client.post(f"/api/v1/invocations/{invocation.id}/cancel", **bearer(bob)).status_code == 404
    response = client.post(f"/api/v1/invocations/{invocation.id}/cancel", **bearer(alice))
    assert response.status_code in (403, 404)
    invocation.refresh_from_db()
    assert invocation.status == RunStatus.RUNNING and invocation.error == ""


def test_a_finished_invocation_cannot_be_cancelled(client, toolkit, carol):
    invocation = made_invocation(toolkit, carol, status=RunStatus.SUCCEEDED, result="cba", result_type="text")
    response = client.post(f"/api/v1/invocations/{invocation.id}/cancel", **bearer(carol))
    assert response.status_code == 409
    assert "already finished" in response.json()["errors"][0]["message"]
    invocation.refresh_from_db()
    assert (invocation.status, invocation.result) == (RunStatus.SUCCEEDED, "cba")


def test_cancel_rejects_get_and_unknown_ids(client, toolkit, carol):
    invocation = made_invocation(toolkit, carol, status=RunStatus.RUNNING)
    assert client.get(f"/api/v1/invocations/{invocation.id}/cancel", **bearer(carol)).status_code == 405
    assert client.post(f"/api/v1/invocations/{uuid.uuid4()}/cancel", **bearer(carol)).status_code == 404
    assert client.post("/api/v1/invocations/not-a-uuid/cancel", **bearer(carol)).status_code == 404


def test_a_cancelled_queued_invocation_is_never_run(client, toolkit, carol):
    from toolhub.runs import engine

    invocation = made_invocation(toolkit, carol, status=RunStatus.QUEUED)
    client.post(f"/api/v1/invocations/{invocation.id}/cancel", **bearer(carol))
    engine.run(str(invocation.id))  # what a worker that picks it up later does
    invocation.refresh_from_db()
    assert (invocation.status, invocation.error, invocation.started_at) == (RunStatus.FAILED, "Cancelled by carol.", None)
