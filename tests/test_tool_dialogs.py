"""What a tool shows is framed as the toolkit's: a question from
`__event_call__` says "<toolkit> asks:" and that it comes from the toolkit's code, a password
input carries a warning, and status lines, notifications and messages are captioned with the
toolkit's name, so "Confirm your ToolHub password" from a tool cannot pass as ToolHub's own."""

from __future__ import annotations

import pytest

from tests.helpers import ready_string_reverse
from toolhub.runs.models import Event, Invocation, RunStatus

pytestmark = pytest.mark.django_db

TOOLS = [{"type": "function", "function": {"name": "reverse_string", "description": "", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture
def toolkit(upload, alice):
    toolkit = ready_string_reverse(upload, alice, tools=TOOLS)
    toolkit.title = "Event Demo"
    toolkit.save()
    return toolkit


def _asking(toolkit, user, call) -> Invocation:
    return Invocation.objects.create(
        toolkit=toolkit, revision=toolkit.current_revision, tool="reverse_string", user=user, arguments={},
        status=RunStatus.AWAITING_INPUT, pending_call=call,
    )


def _dialog(client, user, invocation, suffix="") -> str:
    client.force_login(user)
    response = client.get(f"/invocations/{invocation.id}/{suffix}")
    assert response.status_code == 200
    html = response.content.decode()
    return html.split('<dialog open class="ask"')[1].split("</dialog>")[0]


@pytest.mark.parametrize("suffix", ["", "live/"])
def test_a_password_question_names_the_toolkit_and_warns(client, toolkit, carol, suffix):
    call = {"type": "input", "data": {"title": "Confirm your ToolHub password", "message": "Your session expired.", "type": "password"}}
    dialog = _dialog(client, carol, _asking(toolkit, carol, call), suffix)
    origin = dialog.index("Event Demo asks:")
    assert origin < dialog.index("Confirm your ToolHub password")
    assert "This question comes from the toolkit's code, not from ToolHub." in dialog
    assert "Never enter your ToolHub password here." in dialog
    assert 'type="password" aria-describedby="ask-password-warning"' in dialog


def test_a_plain_question_is_framed_without_the_password_warning(client, toolkit, carol):
    call = {"type": "confirmation", "data": {"title": "Sure?", "message": "Delete it?"}}
    dialog = _dialog(client, carol, _asking(toolkit, carol, call))
    assert "Event Demo asks:" in dialog
    assert "Never enter your ToolHub password" not in dialog


def test_a_hostile_toolkit_title_is_escaped_in_the_frame(client, toolkit, carol):
    toolkit.title = "<b>ToolHub</b>"
    toolkit.save()
    call = {"type": "input", "data": {"title": "Name", "message": "?"}}
    dialog = _dialog(client, carol, _asking(toolkit, carol, call))
    assert "&lt;b&gt;ToolHub&lt;/b&gt; asks:" in dialog


def test_status_lines_and_notifications_are_captioned_with_the_toolkit(client, toolkit, carol):
    invocation = Invocation.objects.create(
        toolkit=toolkit, revision=toolkit.current_revision, tool="reverse_string", user=carol, arguments={},
        status=RunStatus.SUCCEEDED, result="ok", result_type="text",
    )
    Event.objects.create(invocation=invocation, seq=1, type="status", data={"description": "ToolHub: your session expired", "done": True})
    Event.objects.create(invocation=invocation, seq=2, type="notification", data={"type": "warning", "content": "Log in again"})
    client.force_login(carol)
    html = client.get(f"/invocations/{invocation.id}/").content.decode()
    caption = html.index("From the toolkit Event Demo:")
    assert caption < html.index("ToolHub: your session expired") and caption < html.index("Log in again")
    assert 'class="status-lines from-toolkit"' in html


def test_the_frame_is_translated(client, toolkit, carol):
    call = {"type": "input", "data": {"title": "Password", "message": "?", "type": "password"}}
    invocation = _asking(toolkit, carol, call)
    client.cookies["django_language"] = "fr"
    dialog = _dialog(client, carol, invocation)
    assert "Event Demo" in dialog and "asks:" not in dialog and "Never enter" not in dialog
