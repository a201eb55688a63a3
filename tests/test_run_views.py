"""The pages of the fourth journey: the Tools tab (parameter tables and Run forms generated
from the tools' schemas), running from the form, the invocation page and its live fragment,
answering an `__event_call__`, and the admins' history. Most toolkits here are made ready by
hand with a stored spec and most invocations are rows written the way the worker writes them,
so the pages are tested without a sandbox; one test runs a real tool end to end."""

from __future__ import annotations

import html
import re
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.conftest import example
from tests.helpers import ready_string_reverse
from toolhub.messages import message
from toolhub.runs.models import Event, Invocation, RunStatus
from toolhub.toolkits.models import Status

pytestmark = pytest.mark.django_db

PARAMETERS = {
    "type": "object",
    "properties": {
        "string": {"type": "string", "description": "The string to reverse"},
        "times": {"type": "integer", "minimum": 1, "maximum": 3, "default": 1, "description": "How often"},
        "mode": {"type": "string", "enum": ["plain", "fancy"], "default": "plain"},
        "loud": {"type": "boolean", "default": False},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["string"],
}
TOOLS = [
    {"type": "function", "function": {"name": "reverse_string", "description": "Reverses the input string.",
                                      "parameters": PARAMETERS}},
    {"type": "function", "function": {"name": "ping", "description": "Answers pong.",
                                      "parameters": {"type": "object", "properties": {}}}},
]


@pytest.fixture
def toolkit(upload, alice):
    """alice's toolkit, ready, with the two tools above."""
    return ready_string_reverse(upload, alice, tools=TOOLS)


def made(toolkit, user, tool: str = "reverse_string", **fields) -> Invocation:
    fields.setdefault("arguments", {"string": "abc"})
    return Invocation.objects.create(toolkit=toolkit, revision=toolkit.current_revision, tool=tool, user=user, **fields)


def events(invocation: Invocation, *items: tuple[str, dict]) -> None:
    for seq, (type_, data) in enumerate(items, start=1):
        Event.objects.create(invocation=invocation, seq=seq, type=type_, data=data)


def tools_url(toolkit) -> str:
    return f"/toolkits/{toolkit.slug}/tools/"


def run_url(toolkit, tool: str = "reverse_string") -> str:
    return f"/toolkits/{toolkit.slug}/tools/{tool}/run/"


def page(client, user, url: str):
    client.force_login(user)
    return client.get(url)


# The Tools tab
# ------------------------------------------------------------------------------


def test_the_tools_tab_lists_each_tool_with_a_parameter_table(client, toolkit, carol):
    response = page(client, carol, tools_url(toolkit))

    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="tool-reverse_string"' in html
    assert "Reverses the input string." in html
    table = html.split('class="table params"')[1].split("</table>")[0]
    for name, kind in [("string", "string"), ("times", "integer"), ("loud", "boolean"), ("tags", "list of string")]:
        assert f"<code>{name}</code>" in table
        assert f"<td>{kind}</td>" in table
    assert 'one of &quot;plain&quot;, &quot;fancy&quot;' in table
    assert '<code>string</code> <span class="req"' in table
    assert '<code>times</code> <span class="req"' not in table
    assert "The string to reverse" in table
    # One tool is open at a time; the others are in the list, a click (a deep link) away.
    assert 'id="tool-ping"' not in html
    assert 'href="?tool=ping"' in html and 'href="?tool=reverse_string" aria-current="true"' in html
    ping = page(client, carol, f"{tools_url(toolkit)}?tool=ping").content.decode()
    assert 'id="tool-ping"' in ping and 'id="tool-reverse_string"' not in ping
    assert "This tool takes no parameters." in ping


def test_the_tool_list_is_searched_on_the_server_without_javascript(client, toolkit, carol):
    html = page(client, carol, f"{tools_url(toolkit)}?q=PING").content.decode()
    entries = html.split('id="tool-entries"')[1].split("</ul>")[0]
    assert "?tool=ping" in entries and "?tool=reverse_string" not in entries
    assert 'id="tool-ping"' in html
    nothing = page(client, carol, f"{tools_url(toolkit)}?q=zzz").content.decode()
    assert "No tool matches the search." in nothing and "run-form" not in nothing


def test_an_unknown_tool_in_the_address_opens_the_first_one(client, toolkit, carol):
    html = page(client, carol, f"{tools_url(toolkit)}?tool=nope").content.decode()
    assert 'id="tool-reverse_string"' in html


def test_the_run_form_comes_from_the_schema_with_required_marked_and_defaults_prefilled(client, toolkit, carol):
    html = page(client, carol, tools_url(toolkit)).content.decode()
    form = html.split(f'action="{run_url(toolkit)}"')[1].split("</form>")[0]

    assert 'name="reverse_string__string"' in form
    string_label = form.split('for="id_reverse_string__string"')[1].split("</label>")[0]
    assert 'class="required-marker"' in string_label
    times_label = form.split('for="id_reverse_string__times"')[1].split("</label>")[0]
    assert "required-marker" not in times_label
    # Defaults: the number, the enum choice, the unticked box; bounds come along.
    times = form.split('name="reverse_string__times"')[1].split(">")[0]
    assert 'value="1"' in times and 'min="1"' in times and 'max="3"' in times and 'type="number"' not in times
    assert '<option value="plain" selected>' in form
    assert 'name="reverse_string__loud"' in form and "checked" not in form.split('name="reverse_string__loud"')[1].split(">")[0]
    assert 'name="reverse_string__tags"' in form  # free list: a JSON textarea
    # string_reverse's tool takes neither __messages__ nor __files__: the form offers neither.
    assert "____messages__" not in form and "____files__" not in form and "Advanced:" not in form


CHATTY = '''"""
title: Chatty
version: 0.1.0
"""


class Tools:
    def reverse_string(self, string: str, __messages__: list = None) -> str:
        """Reverses the input string."""
        return string[::-1]

    def ping(self, __files__=None, __user__=None) -> str:
        """Answers pong."""
        return "pong"
'''


@pytest.fixture
def chatty(upload, alice):
    toolkit = upload(alice, CHATTY, slug="chatty")
    revision = toolkit.current_revision
    revision.tools = TOOLS
    revision.set_status(Status.READY)
    revision.save()
    return toolkit


def test_only_a_tool_that_takes_messages_or_files_is_offered_them(client, chatty, carol):
    html = page(client, carol, tools_url(chatty)).content.decode()
    reverse = html.split(f'action="{run_url(chatty)}"')[1].split("</form>")[0]
    assert 'name="reverse_string____messages__"' in reverse and "____files__" not in reverse
    assert "Advanced: __messages__</summary>" in reverse
    html = page(client, carol, f"{tools_url(chatty)}?tool=ping").content.decode()
    ping = html.split(f'action="{run_url(chatty, "ping")}"')[1].split("</form>")[0]
    assert 'name="ping____files__"' in ping and "____messages__" not in ping


def test_messages_sent_to_a_tool_that_does_not_take_them_are_dropped(client, toolkit, carol):
    client.force_login(carol)
    client.post(run_url(toolkit), {"reverse_string__string": "abc", "reverse_string____messages__": "{oops"})
    invocation = Invocation.objects.get()
    assert invocation.messages in (None, [])


def test_a_toolkit_that_is_not_ready_says_why_and_offers_no_run_form(client, upload, alice, carol):
    toolkit = upload(alice, example("friendly_sizes"))
    html = page(client, carol, tools_url(toolkit)).content.decode()

    assert "The toolkit is not ready" in html and "approve" in html
    assert "humanize" in html
    assert 'class="run-form"' not in html
    assert "natural_size" in html  # the names found in the source


# Running from the form
# ------------------------------------------------------------------------------


def test_bad_input_is_refused_with_the_error_next_to_the_field_and_nothing_created(client, toolkit, carol):
    client.force_login(carol)
    response = client.post(run_url(toolkit), {"reverse_string__times": "many", "reverse_string__mode": "plain"})

    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="id_reverse_string__times_errors"' in html
    assert 'id="id_reverse_string__string_errors"' in html and "This field is required." in html
    # What was typed is shown back.
    assert 'value="many"' in html.split('name="reverse_string__times"')[1].split(">")[0]
    assert Invocation.objects.count() == 0


def test_a_value_outside_the_schema_is_refused_next_to_its_field(client, toolkit, carol):
    client.force_login(carol)
    response = client.post(run_url(toolkit), {"reverse_string__string": "abc", "reverse_string__times": "7"})

    assert response.status_code == 400
    errors = response.content.decode().split('id="id_reverse_string__times_errors"')[1].split("</ul>")[0]
    assert "at most 3" in errors
    assert Invocation.objects.count() == 0


def test_bad_advanced_json_is_refused_and_shown_back(client, chatty, carol):
    client.force_login(carol)
    response = client.post(run_url(chatty), {"reverse_string__string": "abc", "reverse_string____messages__": "{oops"})

    assert response.status_code == 400
    html = response.content.decode()
    assert "Enter a JSON list." in html
    assert "{oops</textarea>" in html
    assert Invocation.objects.count() == 0


def test_good_input_creates_the_invocation_and_redirects_to_its_page(client, chatty, carol):
    toolkit = chatty
    client.force_login(carol)
    response = client.post(run_url(toolkit), {
        "reverse_string__string": "abc", "reverse_string__times": "2", "reverse_string__mode": "fancy",
        "reverse_string__tags": '["x"]', "reverse_string____messages__": '[{"role": "user", "content": "hi"}]',
    })

    invocation = Invocation.objects.get()
    # The run's deep link in the playground.
    assert response.status_code == 302
    assert response["Location"] == f"{tools_url(toolkit)}?tool=reverse_string&run={invocation.id}"
    assert invocation.arguments == {"string": "abc", "times": 2, "mode": "fancy", "loud": False, "tags": ["x"]}
    assert invocation.messages == [{"role": "user", "content": "hi"}]
    assert (invocation.user, invocation.status) == (carol, RunStatus.QUEUED)


def test_running_from_the_playground_answers_with_the_panel_and_the_runs_address(client, toolkit, carol):
    client.force_login(carol)
    response = client.post(run_url(toolkit), {"reverse_string__string": "abc"}, HTTP_HX_REQUEST="true")
    invocation = Invocation.objects.get()
    assert response.status_code == 200
    assert response["HX-Push-Url"] == f"{tools_url(toolkit)}?tool=reverse_string&run={invocation.id}"
    panel = response.content.decode().split('id="tool-panel"')[1]
    assert 'id="tool-reverse_string"' in panel
    assert f'hx-get="/invocations/{invocation.id}/live/"' in panel
    # The form keeps what was typed, for the next run.
    assert 'value="abc"' in panel.split('name="reverse_string__string"')[1].split(">")[0]


def test_refused_input_in_the_playground_answers_400_with_the_errors_in_the_panel(client, toolkit, carol):
    client.force_login(carol)
    response = client.post(run_url(toolkit), {"reverse_string__times": "9"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 400
    assert "HX-Push-Url" not in response
    assert 'id="tool-panel"' in response.content.decode() and 'class="errorlist' in response.content.decode()
    assert Invocation.objects.count() == 0


def test_a_run_deep_link_shows_the_run_beside_its_tool(client, toolkit, carol, bob, admin):
    invocation = made(toolkit, carol, status=RunStatus.SUCCEEDED, result="cba", result_type="text")
    url = f"{tools_url(toolkit)}?run={invocation.id}"
    html = page(client, carol, url).content.decode()
    panel = html.split('id="run-panel"')[1]
    assert '<pre class="result" id="result">cba</pre>' in panel
    assert f'href="/invocations/{invocation.id}/"' in panel
    assert 'id="tool-reverse_string"' in html
    assert page(client, admin, url).status_code == 200
    # Someone else's run is not there for another user, nor under another toolkit.
    assert page(client, bob, url).status_code == 404
    assert page(client, carol, f"{tools_url(toolkit)}?run=not-a-uuid").status_code == 404


def test_a_run_deep_link_query_count_does_not_grow_with_recent_runs_or_events(client, toolkit, carol):
    client.force_login(carol)
    run = made(toolkit, carol, status=RunStatus.SUCCEEDED, result={"a": [1, 2]}, result_type="json")
    events(run, ("status", {"description": "one", "done": True}))
    few = _count_queries(client, f"{tools_url(toolkit)}?run={run.id}")
    for i in range(6):
        made(toolkit, carol, arguments={"string": str(i)})
    Event.objects.create(invocation=run, seq=2, type="message", data={"content": "**more**"})
    assert _count_queries(client, f"{tools_url(toolkit)}?run={run.id}") == few


def test_running_a_toolkit_that_stopped_being_ready_says_why(client, toolkit, carol):
    revision = toolkit.current_revision
    revision.set_status(Status.BUILDING, message("build.environment"))
    revision.save()
    client.force_login(carol)

    response = client.post(run_url(toolkit), {"reverse_string__string": "abc"}, follow=True)

    assert response.redirect_chain == [(tools_url(toolkit), 302)]
    assert "being built" in response.content.decode()
    assert Invocation.objects.count() == 0


def test_running_an_unknown_tool_is_404(client, toolkit, carol):
    client.force_login(carol)
    assert client.post(run_url(toolkit, "nope"), {}).status_code == 404
    assert Invocation.objects.count() == 0


def test_run_again_prefills_the_form_with_the_previous_arguments(client, toolkit, carol, bob):
    previous = made(toolkit, carol, arguments={"string": "xyz", "times": 3, "mode": "fancy", "loud": True})

    html = page(client, carol, f"{tools_url(toolkit)}?again={previous.id}").content.decode()
    form = html.split(f'action="{run_url(toolkit)}"')[1].split("</form>")[0]
    assert 'value="xyz"' in form.split('name="reverse_string__string"')[1].split(">")[0]
    assert 'value="3"' in form.split('name="reverse_string__times"')[1].split(">")[0]
    assert '<option value="fancy" selected>' in form
    assert "checked" in form.split('name="reverse_string__loud"')[1].split(">")[0]

    # Someone else's arguments are not theirs to see.
    other = page(client, bob, f"{tools_url(toolkit)}?again={previous.id}").content.decode()
    assert "xyz" not in other


def test_the_invocation_page_links_to_run_again(client, toolkit, carol):
    invocation = made(toolkit, carol, status=RunStatus.SUCCEEDED)
    html = page(client, carol, f"/invocations/{invocation.id}/").content.decode()
    assert f'href="{tools_url(toolkit)}?again={invocation.id}#tool-reverse_string"' in html


# The invocation page and its live fragment
# ------------------------------------------------------------------------------


def _finished_with_everything(toolkit, user) -> Invocation:
    now = timezone.now()
    invocation = made(toolkit, user, status=RunStatus.SUCCEEDED, result={"answer": 42}, result_type="json",
                      max_rss_kb=20480, cpu_ms=12, started_at=now - timedelta(milliseconds=250), finished_at=now)
    events(
        invocation,
        ("status", {"description": "Looking up", "done": False}),
        ("status", {"description": "a hidden line", "done": True, "hidden": True}),
        ("message", {"content": "Hello "}),
        ("message", {"content": "world"}),
        ("citation", {"document": ["The glossary entry text"], "metadata": [{"source": "valve"}],
                      "source": {"name": "Glossary: valve", "url": "https://example.org/g#valve"}}),
        ("citation", {"document": ["x"], "source": {"name": "Sneaky", "url": "javascript:alert(1)"}}),
        ("notification", {"type": "warning", "content": "Careful now"}),
        ("log", {"id": "root", "label": "Plan", "status": "start"}),
        ("log", {"id": "child", "parent_id": "root", "label": "Step one", "status": "success"}),
        ("log", {"id": "root", "label": "Plan", "status": "success"}),
        ("call_timeout", {"call": {"type": "confirmation", "data": {"title": "Sure?"}}, "seconds": 5}),
        ("status", {"description": "1 found", "done": True}),
    )
    return invocation


@pytest.mark.parametrize("suffix", ["", "live/"])
def test_the_page_and_fragment_show_statuses_citations_and_the_result(client, toolkit, carol, suffix):
    invocation = _finished_with_everything(toolkit, carol)
    response = page(client, carol, f"/invocations/{invocation.id}/{suffix}")

    assert response.status_code == 200
    html = response.content.decode()
    # A finished run shows its last status line as its state, the list on demand, and no
    # line of it is left pending ("…"): the earlier one that never said done was overtaken.
    assert '<p class="status-current from-toolkit done" id="status-current">1 found</p>' in html
    assert '<li class="overtaken">Looking up</li><li class="done">1 found</li>' in html
    assert 'class="pending' not in html and "2 status lines" in html
    assert "a hidden line" not in html
    assert "Hello world" in html
    card = html.split('class="citation card"')[1].split("</article>")[0]
    assert '<a href="https://example.org/g#valve"' in card and "Glossary: valve" in card
    assert "The glossary entry text" in card and "<dt>source</dt><dd>valve</dd>" in card
    assert "javascript:" not in html
    assert "Careful now" in html and "toast-warning" in html
    log = html.split('class="log-tree"')[1]
    assert log.index("Plan") < log.index("Step one") and 'log-success' in log
    assert "Nobody answered “Sure?” within 5 s" in html
    assert "&quot;answer&quot;: 42" in html.split('id="result"')[1]
    assert "250 ms" in html and "CPU 12 ms" in html and "20.0\xa0MB" in html  # not "20.0 KB"
    # A finished run no longer polls.
    assert "hx-get" not in html.split('id="live"')[1].split(">")[0]


def test_a_running_invocation_polls_its_fragment(client, toolkit, carol):
    invocation = made(toolkit, carol, status=RunStatus.RUNNING)
    html = page(client, carol, f"/invocations/{invocation.id}/").content.decode()
    section = html.split('<section id="live"')[1].split(">")[0]
    assert f'hx-get="/invocations/{invocation.id}/live/"' in section and "every 500ms" in section


def test_a_hostile_log_tree_still_renders(client, toolkit, carol):
    invocation = made(toolkit, carol, status=RunStatus.SUCCEEDED, result="ok", result_type="text")
    chain = [("log", {"id": str(i), "parent_id": str(i - 1), "label": f"n{i}", "status": "start"}) for i in range(400)]
    cycle = [("log", {"id": "a", "parent_id": "b", "label": "cycle-a"}), ("log", {"id": "b", "parent_id": "a", "label": "cycle-b"}),
             ("log", {"id": "self", "parent_id": "self", "label": "own-parent"})]
    events(invocation, *chain, *cycle)

    response = page(client, carol, f"/invocations/{invocation.id}/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "n399" in html and "cycle-a" in html and "cycle-b" in html and "own-parent" in html


def test_a_limit_and_the_one_line_error_are_shown(client, toolkit, carol):
    invocation = made(toolkit, carol, status=RunStatus.FAILED, error="The tool hit a sandbox limit (memory) and was stopped.",
                      limit="memory")
    html = page(client, carol, f"/invocations/{invocation.id}/").content.decode()
    assert "The tool hit a sandbox limit (memory)" in html and "Sandbox limit: memory" in html


@pytest.mark.parametrize(
    ("invoker", "viewer", "sees"),
    [("alice", "alice", True), ("carol", "admin", True), ("carol", "carol", False), ("admin", "admin", True)],
)
def test_the_traceback_is_shown_only_to_the_toolkits_owner_and_admins(client, toolkit, invoker, viewer, sees, request):
    # alice owns the toolkit; carol is a plain user who only ran it.
    invocation = made(toolkit, request.getfixturevalue(invoker), status=RunStatus.FAILED, error="ValueError: nope",
                      traceback="Traceback (most recent call last):\n  secret internals")
    for suffix in ("", "live/"):
        html = page(client, request.getfixturevalue(viewer), f"/invocations/{invocation.id}/{suffix}").content.decode()
        assert "ValueError: nope" in html
        assert ("secret internals" in html) is sees


@pytest.mark.parametrize("suffix", ["", "live/"])
def test_another_users_invocation_is_404(client, toolkit, carol, bob, alice, suffix):
    invocation = made(toolkit, carol)
    # Not even the toolkit's owner sees who ran what.
    for viewer in (bob, alice):
        assert page(client, viewer, f"/invocations/{invocation.id}/{suffix}").status_code == 404
    assert page(client, carol, f"/invocations/{uuid.uuid4()}/{suffix}").status_code == 404


def test_an_admin_sees_anyones_invocation(client, toolkit, carol, admin):
    invocation = made(toolkit, carol)
    assert page(client, admin, f"/invocations/{invocation.id}/").status_code == 200


# Answering from the page
# ------------------------------------------------------------------------------


def _waiting(toolkit, user, call_type: str = "confirmation") -> Invocation:
    return made(toolkit, user, status=RunStatus.AWAITING_INPUT,
                pending_call={"type": call_type, "data": {"title": "Sure?", "message": "Delete it?", "placeholder": "name"}})


def test_a_pending_confirmation_shows_a_dialog(client, toolkit, carol):
    invocation = _waiting(toolkit, carol)
    html = page(client, carol, f"/invocations/{invocation.id}/live/").content.decode()
    dialog = html.split("<dialog")[1].split("</dialog>")[0]
    assert "Sure?" in dialog and "Delete it?" in dialog
    assert 'value="confirm"' in dialog and 'value="cancel"' in dialog
    assert f'hx-post="/invocations/{invocation.id}/respond/"' in dialog


def test_an_admin_looking_on_sees_the_question_but_no_form(client, toolkit, carol, admin):
    invocation = _waiting(toolkit, carol)
    html = page(client, admin, f"/invocations/{invocation.id}/live/").content.decode()
    assert "<dialog" not in html and "respond/" not in html
    assert "waiting for carol to answer “Sure?”" in html


def test_a_pending_input_shows_a_prompt(client, toolkit, carol):
    invocation = _waiting(toolkit, carol, "input")
    dialog = page(client, carol, f"/invocations/{invocation.id}/").content.decode().split("<dialog")[1]
    assert 'name="value"' in dialog and 'placeholder="name"' in dialog


@pytest.mark.parametrize(("answer", "value"), [("confirm", True), ("cancel", False)])
def test_the_invoker_answers_a_confirmation(client, toolkit, carol, answer, value):
    invocation = _waiting(toolkit, carol)
    client.force_login(carol)
    response = client.post(f"/invocations/{invocation.id}/respond/", {"answer": answer}, HTTP_HX_REQUEST="true")

    assert response.status_code == 200
    assert '<section id="live"' in response.content.decode()
    invocation.refresh_from_db()
    assert invocation.call_answer == {"value": value}


def test_once_answered_the_page_says_the_answer_was_sent_and_shows_no_dialog(client, toolkit, carol):
    invocation = _waiting(toolkit, carol)
    client.force_login(carol)
    html = client.post(f"/invocations/{invocation.id}/respond/", {"answer": "confirm"}, HTTP_HX_REQUEST="true").content.decode()
    assert "<dialog" not in html
    assert 'id="answer-sent"' in html and "Answer sent; waiting for the tool…" in html
    # Still so on the next poll, until the worker has taken the answer.
    html = page(client, carol, f"/invocations/{invocation.id}/live/").content.decode()
    assert "Answer sent; waiting for the tool…" in html and "<dialog" not in html


def test_the_dialog_is_named_and_described_by_the_question(client, toolkit, carol):
    invocation = _waiting(toolkit, carol)
    dialog = page(client, carol, f"/invocations/{invocation.id}/").content.decode().split("<dialog")[1].split("</dialog>")[0]
    assert 'aria-labelledby="ask-title"' in dialog and 'aria-describedby="ask-message"' in dialog
    assert '<div id="ask-message" class="ask-message"><p>Delete it?</p>\n</div>' in dialog


def test_a_questions_message_is_rendered_as_sanitised_markdown(client, toolkit, carol):
    invocation = _waiting(toolkit, carol)
    invocation.pending_call = {"type": "confirmation", "data": {
        "title": "Sure?", "message": "Really delete **report.pdf**? <script>alert(1)</script> [x](javascript:alert(1))"}}
    invocation.save(update_fields=["pending_call"])
    dialog = page(client, carol, f"/invocations/{invocation.id}/").content.decode().split("<dialog")[1].split("</dialog>")[0]
    message = dialog.split('<div id="ask-message" class="ask-message">')[1].split("</div>")[0]
    assert message.startswith("<p>Really delete <strong>report.pdf</strong>? &lt;script&gt;")
    assert "**" not in message and "<a" not in message


def test_the_invoker_answers_an_input_without_htmx(client, toolkit, carol):
    invocation = _waiting(toolkit, carol, "input")
    client.force_login(carol)
    response = client.post(f"/invocations/{invocation.id}/respond/", {"answer": "submit", "value": "Ada"})

    assert response.status_code == 302 and response["Location"] == f"/invocations/{invocation.id}/"
    invocation.refresh_from_db()
    assert invocation.call_answer == {"value": "Ada"}


def test_answering_when_nothing_waits_says_so(client, toolkit, carol):
    invocation = made(toolkit, carol, status=RunStatus.RUNNING)
    client.force_login(carol)
    response = client.post(f"/invocations/{invocation.id}/respond/", {"answer": "confirm"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert "not waiting for an answer" in response.content.decode()


@pytest.mark.parametrize("who", ["bob", "alice", "admin"])
def test_only_the_invoker_may_answer(client, toolkit, carol, who, request):
    invocation = _waiting(toolkit, carol)
    client.force_login(request.getfixturevalue(who))
    assert client.post(f"/invocations/{invocation.id}/respond/", {"answer": "confirm"}).status_code == 404
    invocation.refresh_from_db()
    assert invocation.call_answer is None


# History
# ------------------------------------------------------------------------------


def test_everyone_else_sees_their_own_runs_as_my_runs(client, toolkit, carol, bob):
    made(toolkit, carol, arguments={"string": "carol-run"}, status=RunStatus.SUCCEEDED)
    made(toolkit, bob, arguments={"string": "bob-run"}, status=RunStatus.FAILED)
    html = page(client, carol, "/history/").content.decode()
    assert "<h1>My runs</h1>" in html and 'href="/history/">My runs</a>' in html
    rows = html.split("<tbody>")[1].split("</tbody>")[0]
    assert rows.count("<tr") == 1 and "bob" not in rows
    # Asking for someone else's runs changes nothing, and there is no such filter shown.
    assert 'name="user"' not in html
    other = page(client, carol, "/history/?user=bob").content.decode().split("<tbody>")[1].split("</tbody>")[0]
    assert other.count("<tr") == 1 and "bob" not in other
    assert page(client, bob, "/history/?status=failed").content.decode().split("<tbody>")[1].count("<tr") == 1


def test_my_runs_sends_anonymous_users_to_log_in_and_rejects_post(client, carol):
    response = client.get("/history/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    client.force_login(carol)
    assert client.post("/history/").status_code == 405


def test_my_runs_query_count_does_not_grow_with_the_runs(client, toolkit, carol):
    client.force_login(carol)
    made(toolkit, carol)
    few = _count_queries(client, "/history/")
    for i in range(8):
        made(toolkit, carol, arguments={"string": str(i)})
    assert _count_queries(client, "/history/") == few


def test_the_history_filters_by_toolkit_tool_user_and_status(client, toolkit, upload, alice, carol, bob, admin):
    other = upload(bob, example("bad_calculator"))
    made(toolkit, carol, arguments={"string": "carol-run"}, status=RunStatus.SUCCEEDED)
    made(toolkit, bob, arguments={"string": "bob-run"}, status=RunStatus.FAILED)
    made(toolkit, carol, tool="ping", arguments={"marker": "ping-run"}, status=RunStatus.SUCCEEDED)
    Invocation.objects.create(toolkit=other, revision=other.current_revision, tool="bad_calculator",
                              arguments={"marker": "calc-run"}, user=carol)
    client.force_login(admin)

    def shown(query: str) -> set[str]:
        html = client.get(f"/history/?{query}").content.decode()
        return {m for m in ("carol-run", "bob-run", "ping-run", "calc-run") if m in html}

    assert shown("") == {"carol-run", "bob-run", "ping-run", "calc-run"}
    assert shown(f"toolkit={toolkit.slug}") == {"carol-run", "bob-run", "ping-run"}
    assert shown("tool=ping") == {"ping-run"}
    assert shown("user=bob") == {"bob-run"}
    assert shown("status=failed") == {"bob-run"}
    assert shown("status=succeeded&user=carol") == {"carol-run", "ping-run"}
    assert shown("status=bogus") == {"carol-run", "bob-run", "ping-run", "calc-run"}


def test_the_history_pages_keep_their_filters(client, toolkit, carol, bob, admin):
    for i in range(26):
        made(toolkit, carol, arguments={"string": f"carol-{i}"}, status=RunStatus.SUCCEEDED)
    made(toolkit, bob, arguments={"string": "bob-run"}, status=RunStatus.SUCCEEDED)
    client.force_login(admin)
    first = client.get("/history/?user=carol&status=succeeded").content.decode()
    assert 'rel="prev"' not in first
    next_link = re.search(r'href="(\?user=carol&amp;status=succeeded&amp;cursor=[^"]+)" rel="next"', first)
    assert next_link is not None
    second = client.get("/history/" + html.unescape(next_link.group(1))).content.decode()
    assert "bob-run" not in second and 'rel="next"' not in second
    assert second.split("<tbody>")[1].count("<tr") == 1 and "carol-0" in second
    prev_link = re.search(r'href="(\?user=carol&amp;status=succeeded&amp;cursor=[^"]+)" rel="prev"', second)
    assert prev_link is not None
    back = client.get("/history/" + html.unescape(prev_link.group(1))).content.decode()
    assert back.split("<tbody>")[1].count("<tr") == 25 and "carol-25" in back and "carol-0" not in back
    assert 'rel="prev"' not in back and 'rel="next"' in back


def _count_queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def test_the_history_query_count_does_not_grow_with_the_invocations(client, toolkit, carol, bob, admin):
    client.force_login(admin)
    made(toolkit, carol)
    few = _count_queries(client, "/history/")
    for i in range(30):
        made(toolkit, bob if i % 2 else carol, arguments={"string": str(i)}, status=RunStatus.SUCCEEDED)
    many = _count_queries(client, "/history/")
    assert many == few
    assert few <= 8


def test_the_tools_tab_query_count_does_not_grow_with_recent_runs(client, toolkit, carol, admin):
    client.force_login(admin)
    made(toolkit, carol)
    few = _count_queries(client, tools_url(toolkit))
    for i in range(9):
        made(toolkit, admin if i % 2 else carol, arguments={"string": str(i)})
    assert _count_queries(client, tools_url(toolkit)) == few


def test_a_plain_user_sees_only_their_own_recent_runs(client, toolkit, carol, bob):
    made(toolkit, carol, arguments={"string": "carol-secret"})
    made(toolkit, bob, arguments={"string": "bob-run"})
    html = page(client, bob, tools_url(toolkit)).content.decode()
    assert "bob-run" in html and "carol-secret" not in html


# Authentication and methods
# ------------------------------------------------------------------------------


def test_anonymous_visitors_are_sent_to_log_in(client, toolkit, carol):
    invocation = made(toolkit, carol)
    for method, url in [
        ("get", tools_url(toolkit)), ("post", run_url(toolkit)), ("get", f"/invocations/{invocation.id}/"),
        ("get", f"/invocations/{invocation.id}/live/"), ("post", f"/invocations/{invocation.id}/respond/"),
        ("get", "/history/"),
    ]:
        response = getattr(client, method)(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/accounts/login/?next="), url
    assert Invocation.objects.count() == 1


def test_wrong_methods_are_405(client, toolkit, carol, admin):
    invocation = made(toolkit, carol)
    client.force_login(carol)
    for method, url in [
        ("post", tools_url(toolkit)), ("get", run_url(toolkit)), ("post", f"/invocations/{invocation.id}/"),
        ("post", f"/invocations/{invocation.id}/live/"), ("get", f"/invocations/{invocation.id}/respond/"),
        ("delete", f"/invocations/{invocation.id}/"),
    ]:
        assert getattr(client, method)(url).status_code == 405, (method, url)
    client.force_login(admin)
    assert client.post("/history/").status_code == 405


# For real
# ------------------------------------------------------------------------------


@pytest.mark.sandbox
@pytest.mark.django_db(transaction=True)
def test_a_real_lookup_run_from_the_form_shows_its_status_lines_citation_and_result(client, upload, build, alice):
    from tests.sandbox_fixtures import require_sandbox
    from toolhub.runs.tasks import run_invocation

    require_sandbox()
    toolkit = build(upload(alice, example("library_lookup")))
    client.force_login(alice)
    response = client.post(run_url(toolkit, "lookup"), {"lookup__word": "valve", "lookup__exact": "on"})
    invocation = Invocation.objects.get()
    assert response["Location"] == f"/toolkits/{toolkit.slug}/tools/?tool=lookup&run={invocation.id}"

    run_invocation.run(str(invocation.id))  # what the worker does

    html = client.get(f"/invocations/{invocation.id}/live/").content.decode()
    assert "Looking up &#x27;valve&#x27;" in html and '<li class="done">1 found</li>' in html
    assert "Glossary: valve" in html and 'href="https://example.org/glossary#valve"' in html
    assert "valve: A setting of a toolkit" in html.split('id="result"')[1]
    assert 'data-status="succeeded"' in html


# Cancelling from the page
# ------------------------------------------------------------------------------


def test_the_invoker_cancels_from_the_page(client, toolkit, carol):
    invocation = made(toolkit, carol, status=RunStatus.RUNNING)
    html = page(client, carol, f"/invocations/{invocation.id}/live/").content.decode()
    assert f'hx-post="/invocations/{invocation.id}/cancel/"' in html and "Cancel run" in html
    response = client.post(f"/invocations/{invocation.id}/cancel/", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-status="failed"' in html and "Cancelled by carol." in html and "Cancel run" not in html
    invocation.refresh_from_db()
    assert (invocation.status, invocation.error) == (RunStatus.FAILED, "Cancelled by carol.")


def test_cancelling_without_htmx_redirects_and_a_finished_run_says_so(client, toolkit, carol):
    invocation = made(toolkit, carol, status=RunStatus.SUCCEEDED, result="x", result_type="text")
    client.force_login(carol)
    response = client.post(f"/invocations/{invocation.id}/cancel/", follow=True)
    assert response.redirect_chain == [(f"/invocations/{invocation.id}/", 302)]
    assert "The run had already finished." in response.content.decode()
    invocation.refresh_from_db()
    assert invocation.status == RunStatus.SUCCEEDED


def test_only_the_invoker_and_admins_may_cancel_from_the_page(client, toolkit, carol, bob, alice, admin):
    invocation = made(toolkit, carol, status=RunStatus.RUNNING)
    client.force_login(bob)
    assert client.post(f"/invocations/{invocation.id}/cancel/").status_code == 404
    # The toolkit's owner may look at the run but it is not hers to stop.
    client.force_login(alice)
    seen = client.get(f"/invocations/{invocation.id}/live/")
    if seen.status_code == 200:
        assert "Cancel run" not in seen.content.decode()
    assert client.post(f"/invocations/{invocation.id}/cancel/").status_code in (403, 404)
    invocation.refresh_from_db()
    assert invocation.status == RunStatus.RUNNING
    client.force_login(admin)
    assert client.post(f"/invocations/{invocation.id}/cancel/").status_code == 302
    invocation.refresh_from_db()
    assert invocation.error == "Cancelled by admin."


def test_cancel_rejects_get_and_anonymous_users(client, toolkit, carol):
    invocation = made(toolkit, carol, status=RunStatus.RUNNING)
    response = client.post(f"/invocations/{invocation.id}/cancel/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    client.force_login(carol)
    assert client.get(f"/invocations/{invocation.id}/cancel/").status_code == 405
    invocation.refresh_from_db()
    assert invocation.status == RunStatus.RUNNING


# Cancelled runs and arguments in the recent runs
# ------------------------------------------------------------------------------


def test_a_cancelled_run_shows_cancelled_not_failed(client, toolkit, carol):
    from toolhub.runs.services import invocation_cancel

    invocation = invocation_cancel(invocation=made(toolkit, carol, status=RunStatus.RUNNING), by=carol)
    # The API's contract is unchanged: a cancelled run ended as failed.
    assert invocation.status == RunStatus.FAILED and invocation.shown_status == "cancelled"
    run = page(client, carol, f"/invocations/{invocation.id}/").content.decode()
    assert 'data-status="cancelled">Cancelled</span>' in run and ">Failed</span>" not in run
    history = page(client, carol, "/history/").content.decode()
    assert 'data-status="cancelled">Cancelled</span>' in history
    failed = made(toolkit, carol, status=RunStatus.FAILED, error="boom")
    assert 'data-status="failed">Failed</span>' in page(client, carol, f"/invocations/{failed.id}/").content.decode()


def test_recent_runs_show_arguments_as_json(client, toolkit, carol):
    made(toolkit, carol, status=RunStatus.SUCCEEDED, arguments={"text": "it's", "flag": True, "none": None})
    html = page(client, carol, tools_url(toolkit)).content.decode()
    assert "{&quot;text&quot;: &quot;it&#x27;s&quot;, &quot;flag&quot;: true, &quot;none&quot;: null}" in html
    assert "True" not in html.split('class="args"', 1)[1].split("</code>", 1)[0]
