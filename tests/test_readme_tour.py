"""The README's five-minute tour, for real: the toolkit it shows waits for its package, is
built and introspected once the package is approved, and runs in the sandbox with an admin's
Valves and a user's UserValves, sending its status lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.sandbox_fixtures import require_sandbox
from toolhub.runs.models import RunStatus
from toolhub.runs.services import invocation_create
from toolhub.runs.tasks import run_invocation
from toolhub.toolkits.lifecycle import package_approve
from toolhub.toolkits.models import Status
from toolhub.toolkits.valves import store_values

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_toolkit() -> str:
    block = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None
    return "\n".join(line.removeprefix("   ") for line in block.group(1).splitlines()) + "\n"


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.django_db(transaction=True)
def test_the_readme_toolkit_waits_for_humanize_then_runs_with_both_kinds_of_valves(upload, build, admin, alice):
    require_sandbox()
    toolkit = upload(alice, readme_toolkit())
    assert toolkit.slug == "word_count"
    assert toolkit.current_revision.status == Status.AWAITING_APPROVAL

    package_approve(name="humanize", user=admin)
    toolkit = build(toolkit)
    revision = toolkit.current_revision
    assert revision.status == Status.READY, revision.status_detail
    assert [tool["function"]["name"] for tool in revision.tools] == ["count_words"]
    assert list(revision.tools[0]["function"]["parameters"]["properties"]) == ["text"]
    assert list(revision.valves_schema["properties"]) == ["words_per_minute"]
    assert list(revision.user_valves_schema["properties"]) == ["show_status"]

    store_values(toolkit=toolkit, values={"words_per_minute": 100}, by=admin)
    invocation = invocation_create(toolkit=toolkit, tool="count_words", arguments={"text": "word " * 1500}, user=alice)
    run_invocation.run(str(invocation.id))
    invocation.refresh_from_db()
    assert (invocation.status, invocation.result) == (RunStatus.SUCCEEDED, "1,500 words, about 15 minutes to read")
    statuses = [event.data["description"] for event in invocation.events.order_by("seq") if event.type == "status"]
    assert statuses == ["Counting…", "Counted"]

    store_values(toolkit=toolkit, values={"show_status": False}, user=alice)
    quiet = invocation_create(toolkit=toolkit, tool="count_words", arguments={"text": "one two"}, user=alice)
    run_invocation.run(str(quiet.id))
    quiet.refresh_from_db()
    assert (quiet.status, quiet.result) == (RunStatus.SUCCEEDED, "2 words, about a second to read")
    assert not quiet.events.filter(type="status").exists()
