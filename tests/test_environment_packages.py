"""TOOLHUB_ENVIRONMENT_PACKAGES: packages every environment gets, set by whoever runs ToolHub.
Imports of them are not inferred (nothing waits for approval) and every lock has them.

People (see conftest): alice uploads.
"""

from __future__ import annotations

import pytest

from toolhub.runs.models import RunStatus
from toolhub.runs.services import invocation_create
from toolhub.runs.tasks import run_invocation
from toolhub.toolkits.models import Status

pytestmark = pytest.mark.django_db

# Imports toolhub_demo_b without declaring it (tests/env_fixtures.py has the wheel).
DEMO = '''"""
title: Demo B
"""
import toolhub_demo_b


class Tools:
    def value(self) -> str:
        """The demo value."""
        return toolhub_demo_b.VALUE
'''


@pytest.fixture
def everywhere(settings, demo_index):
    settings.TOOLHUB_FIND_LINKS = [str(demo_index.wheelhouse)]
    settings.TOOLHUB_ENVIRONMENT_PACKAGES = ["toolhub-demo-b<2"]
    return settings


def test_without_the_setting_the_import_is_inferred(alice, upload):
    revision = upload(alice, DEMO).current_revision
    assert revision.requirement_texts == ["toolhub-demo-b"]
    assert revision.status == Status.AWAITING_APPROVAL


def test_an_import_of_an_environment_package_asks_for_nothing(alice, upload, everywhere):
    revision = upload(alice, DEMO).current_revision
    assert revision.requirements == []
    assert revision.status == Status.BUILDING


@pytest.mark.slow
def test_every_lock_has_the_environment_packages_and_the_tool_runs(alice, upload, build, everywhere):
    from tests.sandbox_fixtures import require_sandbox

    require_sandbox()
    toolkit = build(upload(alice, DEMO))
    revision = toolkit.current_revision
    assert revision.status == Status.READY, (revision.status_detail, revision.build_log[-2000:])
    # Resolved with pip-compile (not the runtime's own lock), with the setting's constraint.
    assert "toolhub-demo-b==1.0" in revision.lock and "pydantic==" in revision.lock
    invocation = invocation_create(toolkit=toolkit, tool="value", arguments={}, user=alice)
    run_invocation.run(str(invocation.id))
    invocation.refresh_from_db()
    assert (invocation.status, invocation.result) == (RunStatus.SUCCEEDED, "b1")
