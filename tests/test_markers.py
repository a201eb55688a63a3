"""The markers say what a test needs (pyproject.toml, tests/conftest.py), and `make test` runs the
tests that share the host in a pytest process of their own by them (scripts/run_tests.py): a test
that starts more than its markers say fails."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import _HOST_WIDE, _Overreach, needed_marker
from tests.conftest import REPO as ROOT


@pytest.mark.parametrize(
    ("argv", "marker"),
    [
        (["/usr/bin/bwrap", "--unshare-all", "--", "/opt/env/bin/python"], "sandbox"),
        ([b"bwrap", b"--die-with-parent"], "sandbox"),
        ([sys.executable, "-m", "celery", "-A", "toolhub", "worker", "-Q", "sandbox"], "worker"),
        ([sys.executable, "-m", "celery", "-A", "toolhub", "inspect", "ping"], None),
        (["/usr/bin/redis-server", "--port", "0"], None),
        (["echo", "bwrap"], None),
        ("bwrap --version", "sandbox"),
    ],
)
def test_the_marker_a_started_process_needs(argv, marker):
    assert needed_marker(argv) == marker


def test_a_plain_test_that_starts_bubblewrap_is_caught(request):
    assert request.node.get_closest_marker("plain") is not None
    assert request.node.get_closest_marker("sandbox") is None
    # Not bubblewrap itself: a program of that name that exits at once, seen the same way.
    subprocess.run(["bwrap", "--version"], capture_output=True, check=False)
    caught, _Overreach.found = list(_Overreach.found), []
    assert caught == ["started bwrap without the `sandbox` marker"]


def test_the_runner_sets_apart_the_tests_the_conftest_says_share_the_host():
    import runpy

    runner = runpy.run_path(str(ROOT / "scripts" / "run_tests.py"))
    assert tuple(runner["HOST"]) == _HOST_WIDE
    assert runner["HOST_EXPRESSION"] == "sandbox or worker or fault or host"


@pytest.mark.sandbox
def test_a_sandbox_test_may_start_bubblewrap(request):
    subprocess.run(["bwrap", "--version"], capture_output=True, check=False)
    assert _Overreach.found == []
