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


def test_the_runner_s_parts_name_paths_that_exist_and_take_every_test_once():
    import runpy

    runner = runpy.run_path(str(ROOT / "scripts" / "run_tests.py"))
    # A renamed module left out of HOST_PART_TESTS would move its tests to the `workers` part,
    # whose survivor checks do not look at the shared sandbox user.
    missing = [path for path in runner["HOST_PART_TESTS"] if not (ROOT / path).exists()]
    assert missing == []
    parts = runner["parts"]()
    assert set(parts) == {"host", "workers", "rest"}
    host, workers, rest = parts["host"], parts["workers"], parts["rest"]
    # The host-wide tests inside the shared-user paths, those outside them, and everything else.
    assert host[:2] == workers[:2] == ["-m", runner["HOST_EXPRESSION"]]
    assert host[2:] == list(runner["HOST_PART_TESTS"])
    assert workers[2:] == [f"--ignore={path}" for path in runner["HOST_PART_TESTS"]]
    assert rest == ["-m", f"not ({runner['HOST_EXPRESSION']})"]


def test_each_part_takes_a_range_of_the_uid_pool_of_its_own():
    from toolhub import settings_test

    ranges = {part: settings_test._UID_FIRST.get(part, 0) for part in ("host", "workers")}
    # 16 users each (scripts/system-setup test makes 32); the ranges must not overlap.
    assert settings_test.TOOLHUB_TEST_UID_RANGE == 16
    assert abs(ranges["host"] - ranges["workers"]) >= settings_test.TOOLHUB_TEST_UID_RANGE
    assert set(settings_test._PARTS) == {"host", "workers", "rest"}
    assert len(set(settings_test._PARTS.values())) == 3


@pytest.mark.sandbox
def test_a_sandbox_test_may_start_bubblewrap(request):
    subprocess.run(["bwrap", "--version"], capture_output=True, check=False)
    assert _Overreach.found == []
