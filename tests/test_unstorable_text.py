"""Text that cannot be encoded or stored: a lone UTF-16 surrogate or a
NUL character, which JSON escapes can spell, is refused with 400 at the API, and replaced by
U+FFFD in whatever a run sends back (result, events), so the run ends with its own outcome."""

from __future__ import annotations

import pytest

from tests.helpers import bearer_headers, ready_string_reverse, reverse_tool
from tests.sandbox_fixtures import require_sandbox
from toolhub.runs.models import Event, Invocation, RunStatus
from toolhub.runs.services import invocation_create
from toolhub.runs.tasks import run_invocation
from toolhub.sandbox.session import storable
from toolhub.toolkits.models import Status

PARAMETERS = {"type": "object", "properties": {"string": {"type": "string"}}, "required": ["string"]}


@pytest.fixture
def toolkit(upload, alice):
    return ready_string_reverse(upload, alice, tools=[reverse_tool(PARAMETERS)])


_bearer = bearer_headers


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"arguments": {"string": "a\\ud800b"}}', "arguments.string"),
        (b'{"arguments": {"string": "\\udfff"}}', "arguments.string"),
        (b'{"arguments": {"string": "nul\\u0000here"}}', "arguments.string"),
        (b'{"arguments": {"string": "ok"}, "messages": [{"content": "\\ud83d"}]}', "messages[0].content"),
        # A surrogate encoded straight into the bytes (CESU-8), which Python's JSON decoder lets through.
        (b'{"arguments": {"string": "\xed\xa0\x80"}}', "arguments.string"),
    ],
)
def test_unstorable_text_in_arguments_gets_400_and_nothing_is_queued(client, toolkit, carol, body, field):
    response = client.post(
        f"/api/v1/toolkits/{toolkit.slug}/tools/reverse_string/invoke", body, content_type="application/json", **_bearer(carol)
    )
    assert response.status_code == 400, response.content
    error = response.json()["errors"][0]
    assert "cannot be stored" in error["message"]
    assert error["field"] == field
    assert not Invocation.objects.exists()


@pytest.mark.django_db
def test_unstorable_text_in_a_valve_gets_400(client, toolkit, alice):
    response = client.put(
        f"/api/v1/toolkits/{toolkit.slug}/user-valves", b'{"values": {"key": "\\ud800"}}', content_type="application/json", **_bearer(alice)
    )
    assert response.status_code == 400
    assert "cannot be stored" in response.json()["errors"][0]["message"]


@pytest.mark.django_db
def test_a_proper_pair_of_surrogates_is_an_ordinary_character(client, toolkit, carol):
    response = client.post(
        f"/api/v1/toolkits/{toolkit.slug}/tools/reverse_string/invoke", b'{"arguments": {"string": "\\ud83d\\ude00"}, "wait": false}',
        content_type="application/json", **_bearer(carol),
    )
    assert response.status_code in (202, 503), response.content
    if response.status_code == 202:
        assert Invocation.objects.get().arguments == {"string": "\U0001f600"}


def test_the_host_replaces_what_it_cannot_store_in_a_sandbox_message():
    assert storable({"a\ud800": ["x\x00y", 1, None, {"k": "\udfff"}]}) == {"a\ufffd": ["x\ufffdy", 1, None, {"k": "\ufffd"}]}


LONELY = '''"""
title: Lonely Surrogates
author: tests
description: Sends text no database can store.
version: 1.0.0
"""

import gc


class Tools:
    def lonely(self, __event_emitter__=None) -> str:
        """Return and emit a lone surrogate."""
        if __event_emitter__:
            __event_emitter__({"type": "status", "data": {"description": "half \\ud83d of a face", "done": True}})
        return "a\\ud800b"

    def forged(self) -> str:
        """Write the final line by hand, with escaped surrogates and NUL."""
        for obj in gc.get_objects():
            if type(obj).__name__ == "Channel" and hasattr(obj, "finish"):
                obj._writer.write(b'{"kind": "result", "result": "x\\\\ud800\\\\u0000y", "result_type": "text"}\\n')
                obj._writer.flush()
                import os
                os._exit(0)
        return "no channel"
'''


@pytest.mark.sandbox
@pytest.mark.django_db(transaction=True)
def test_a_run_that_returns_unstorable_text_succeeds_with_it_replaced(upload, build, alice):
    require_sandbox()
    toolkit = build(upload(alice, LONELY))
    assert toolkit.current_revision.status == Status.READY, toolkit.current_revision.status_detail
    for tool, expected in (("lonely", "a\ufffdb"), ("forged", "x\ufffd\ufffdy")):
        invocation = invocation_create(toolkit=toolkit, tool=tool, arguments={}, user=alice)
        run_invocation.run(str(invocation.id))
        invocation.refresh_from_db()
        assert (invocation.status, invocation.result, invocation.error) == (RunStatus.SUCCEEDED, expected, ""), invocation.traceback
    event = Event.objects.filter(invocation__tool="lonely", type="status").get()
    assert "half \ufffd of a face" in str(event.data)
