"""The Environment tab's build log and traceback: admins read them as written; the owner and
every other user read them without this host's folders (the data dir, the environments, the
project, the web process's venv, the temporary folder).

People (tests/conftest.py): alice owns the toolkit, carol is a plain user, admin an admin."""

from __future__ import annotations

import sys
import tempfile

import pytest
from django.conf import settings

from tests.conftest import toolkit_source
from toolhub.toolkits.models import Revision, Status

pytestmark = pytest.mark.django_db


@pytest.fixture
def failed(alice, upload, settings):
    toolkit = upload(alice, toolkit_source("Paths"), slug="paths")
    env = settings.TOOLHUB_ENVIRONMENTS_DIR
    log = "\n".join([
        f"$ {sys.prefix}/bin/uv venv --python /usr/bin/python3.11 {env}/.tmp-abc",
        f"$ {sys.prefix}/bin/uv pip install --find-links {settings.DATA_DIR}/wheelhouse -r requirements.txt",
        f"  cwd {tempfile.gettempdir()}/toolhub-build-12-x, runtime {settings.BASE_DIR}/toolhub/runtime",
        f"unrelated {settings.DATA_DIR}-other/file",
        "Build failed: humanize failed to build",
    ])
    Revision.objects.filter(toolkit=toolkit).update(
        status=Status.FAILED, build_log=log, traceback=f'File "{settings.DATA_DIR}/x.py", line 1'
    )
    return toolkit


def _page(client, user) -> str:
    client.force_login(user)
    response = client.get("/toolkits/paths/environment/")
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.parametrize("who", ["alice", "carol"])
def test_non_admins_read_the_build_log_without_host_paths(client, request, failed, who):
    page = _page(client, request.getfixturevalue(who))
    for path in (str(settings.DATA_DIR), sys.prefix, str(settings.BASE_DIR), tempfile.gettempdir() + "/"):
        assert path not in page, path
    assert "$ &lt;venv&gt;/bin/uv venv --python /usr/bin/python3.11 &lt;environments&gt;/.tmp-abc" in page
    assert "--find-links &lt;data&gt;/wheelhouse" in page
    assert "cwd &lt;tmp&gt;/toolhub-build-12-x, runtime &lt;toolhub&gt;/toolhub/runtime" in page
    assert "Build failed: humanize failed to build" in page
    if who == "alice":
        # The owner sees the traceback, also without the paths.
        assert "File &quot;&lt;data&gt;/x.py&quot;, line 1" in page


def test_a_folder_that_only_starts_like_the_data_dir_is_not_renamed(client, carol, failed):
    assert "unrelated &lt;data&gt;-other/file" not in _page(client, carol)


def test_admins_read_the_build_log_as_written(client, admin, failed):
    page = _page(client, admin)
    assert f"--find-links {settings.DATA_DIR}/wheelhouse" in page
    assert f"{sys.prefix}/bin/uv venv" in page
    assert "&lt;data&gt;" not in page


def test_anonymous_people_are_sent_to_log_in(client, failed):
    response = client.get("/toolkits/paths/environment/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_the_tab_answers_only_get(client, carol, failed):
    client.force_login(carol)
    assert client.post("/toolkits/paths/environment/").status_code == 405
