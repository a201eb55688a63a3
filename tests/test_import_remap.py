"""An admin maps an inferred import to another distribution: remembered for every toolkit,
waiting revisions ask for the new name, and the toolkit builds with it.

People (see conftest): admin decides, alice uploads, bob is another author.
"""

from __future__ import annotations

import pytest

from toolhub.packages.models import ImportMapping, Package, PackageRequest
from toolhub.toolkits.models import Status
from toolhub.toolkits.source_checks import parse_toolkit_source

pytestmark = pytest.mark.django_db

REMAP = "/packages/remap/"


@pytest.fixture
def demo_find_links(settings, demo_index):
    """Builds use the demo wheelhouse (tests/env_fixtures.py), which has toolhub-demo-a and -b."""
    settings.TOOLHUB_FIND_LINKS = [str(demo_index.wheelhouse)]
    return demo_index

# `toolhub_demo_b` would be inferred as `toolhub-demo-b`; the admin says it comes with
# `toolhub-demo-a` (which depends on toolhub-demo-b, so the module is there either way).
DEMO = '''"""
title: Demo B
"""
import toolhub_demo_b


class Tools:
    def value(self) -> str:
        """The demo value."""
        return toolhub_demo_b.VALUE
'''


def test_the_queue_offers_to_map_an_inferred_import(client, admin, alice, upload):
    upload(alice, DEMO)
    client.force_login(admin)
    body = client.get("/packages/").content.decode()
    assert '<form method="post" action="/packages/remap/" id="remap-toolhub_demo_b" hidden>' in body
    assert 'name="distribution" form="remap-toolhub_demo_b"' in body


def test_a_remap_is_remembered_and_moves_waiting_revisions_to_the_new_name(client, admin, alice, bob, upload):
    first = upload(alice, DEMO)
    client.force_login(admin)
    response = client.post(REMAP, {"module": "toolhub_demo_b", "distribution": "Toolhub_Demo_A"}, follow=True)
    assert "import toolhub_demo_b now means toolhub-demo-a; 1 waiting revision asks for it instead." in response.content.decode()
    assert ImportMapping.objects.get().distribution == "toolhub-demo-a"
    revision = first.latest_revision()
    assert revision.requirements == [
        {"name": "toolhub-demo-a", "specifier": "", "text": "toolhub-demo-a", "inferred": {"module": "toolhub_demo_b", "line": 4}}
    ]
    assert revision.status_detail == "Waiting for an admin to approve: toolhub-demo-a"
    assert list(PackageRequest.objects.values_list("package__name", "import_name")) == [("toolhub-demo-a", "toolhub_demo_b")]
    # The old name no one asks for any more leaves the queue.
    assert not Package.objects.filter(name="toolhub-demo-b").exists()
    # Remembered for everyone: a later upload infers the mapped name at once.
    other = upload(bob, DEMO.replace("Demo B", "Demo B again"))
    assert other.latest_revision().requirement_texts == ["toolhub-demo-a"]
    assert parse_toolkit_source(DEMO).infer_requirements({"toolhub_demo_b": "toolhub-demo-a"})[0].name == "toolhub-demo-a"


def test_a_remap_refuses_bad_names_and_changes_nothing(client, admin, alice, upload):
    upload(alice, DEMO)
    client.force_login(admin)
    body = client.post(REMAP, {"module": "toolhub_demo_b", "distribution": "not a name!"}, follow=True).content.decode()
    assert "&#x27;not a name!&#x27; is not a valid package name." in body
    body = client.post(REMAP, {"module": "not.a.module", "distribution": "x"}, follow=True).content.decode()
    assert "is not a top-level module name." in body
    body = client.post(REMAP, {"module": "toolhub_demo_b"}, follow=True).content.decode()
    assert "Name the distribution that provides the import." in body
    assert not ImportMapping.objects.exists()


def test_only_admins_may_remap(client, alice, upload):
    upload(alice, DEMO)
    client.force_login(alice)
    assert client.post(REMAP, {"module": "toolhub_demo_b", "distribution": "x"}).status_code == 404
    assert client.get(REMAP).status_code == 404
    client.logout()
    assert client.post(REMAP, {"module": "toolhub_demo_b", "distribution": "x"}).status_code == 302
    assert not ImportMapping.objects.exists()


def test_a_remap_needs_a_post(client, admin):
    client.force_login(admin)
    assert client.get(REMAP).status_code == 405


@pytest.mark.slow
def test_a_remapped_toolkit_builds_with_the_new_name_and_runs(
    client, admin, alice, upload, build, demo_find_links, settings
):
    from tests.sandbox_fixtures import require_sandbox
    from toolhub.runs.models import RunStatus
    from toolhub.runs.services import invocation_create
    from toolhub.runs.tasks import run_invocation
    from toolhub.toolkits.lifecycle import package_approve

    require_sandbox()
    toolkit = upload(alice, DEMO)
    client.force_login(admin)
    client.post(REMAP, {"module": "toolhub_demo_b", "distribution": "toolhub-demo-a"})
    package_approve(name="toolhub-demo-a", user=admin)
    toolkit = build(toolkit)
    revision = toolkit.current_revision
    assert revision.status == Status.READY, (revision.status_detail, revision.build_log[-2000:])
    assert "toolhub-demo-a==1.0" in revision.lock
    invocation = invocation_create(toolkit=toolkit, tool="value", arguments={}, user=alice)
    run_invocation.run(str(invocation.id))
    invocation.refresh_from_db()
    assert (invocation.status, invocation.result) == (RunStatus.SUCCEEDED, "b2")
