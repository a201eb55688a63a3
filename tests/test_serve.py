"""`make run`'s supervisor (scripts/serve.py), finding 8 of issue 18: Ctrl-C stops the web
server, both workers and beat, with everything below them, within a few seconds, and a second
Ctrl-C at once. Before, the worker's main process outlived `make run`, reparented to init."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.live_fixtures import REPO, free_port, wait_for_port

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def _start(tmp_path: Path) -> tuple[subprocess.Popen, set[int], int]:
    from tests.conftest import _database_url

    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    env = dict(os.environ, DATABASE_URL=_database_url(), DJANGO_SETTINGS_MODULE="toolhub.settings_test")
    process = subprocess.Popen(
        [sys.executable, "scripts/serve.py", "--port", str(port), "--data", str(tmp_path)],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    wait_for_port(port, process, timeout=60)
    # Wait until all four are up, with the worker pool processes below them.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = (tmp_path / "serve.log").read_text(errors="replace")
        if text.count("ready.") >= 2 and "beat: Starting" in text:
            break
        time.sleep(0.2)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=60) as response:
        assert response.status == 200
    pids = _descendants(process.pid)
    assert len(pids) >= 6, (tmp_path / "serve.log").read_text(errors="replace")[-3000:]
    return process, pids, port


def test_ctrl_c_stops_everything_within_seconds(tmp_path):
    process, pids, _port = _start(tmp_path)
    began = time.monotonic()
    process.send_signal(signal.SIGINT)
    process.wait(15)
    deadline = time.monotonic() + 2
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive(pids) == set(), (tmp_path / "serve.log").read_text(errors="replace")[-3000:]
    assert time.monotonic() - began < 8


def test_a_second_ctrl_c_stops_everything_at_once(tmp_path):
    process, pids, _port = _start(tmp_path)
    process.send_signal(signal.SIGINT)
    time.sleep(0.2)
    began = time.monotonic()
    process.send_signal(signal.SIGINT)
    process.wait(5)
    deadline = time.monotonic() + 1
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive(pids) == set()
    assert time.monotonic() - began < 1.5
