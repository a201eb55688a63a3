"""`make run`'s supervisor (scripts/serve.py): Ctrl-C stops the web
server, both workers and beat, with everything below them, within a few seconds, and a second
Ctrl-C at once. Before, the worker's main process outlived `make run`, reparented to init.

Without `REDIS_URL` the broker is a private redis-server on a UNIX socket
in the data directory (before, kombu's filesystem transport, whose half-written message once
crashed the worker), and a worker that dies is restarted (before, nothing restarted it)."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import httpx2 as httpx
import pytest

from tests.conftest import toolkit_source
from tests.live_fixtures import REPO, free_port, wait_for_port

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.parent.name))
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


def _log(tmp_path: Path) -> str:
    return (tmp_path / "serve.log").read_text(errors="replace")


def _wait_for_log(tmp_path: Path, predicate, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = _log(tmp_path)
        if predicate(text):
            return text
        time.sleep(0.2)
    raise AssertionError("serve.py did not get there:\n" + _log(tmp_path)[-3000:])


def _start(tmp_path: Path) -> tuple[subprocess.Popen, set[int], int]:
    from tests.conftest import _database_url

    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    # No REDIS_URL, as on a fresh machine: serve.py starts its private redis-server.
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update(DATABASE_URL=_database_url(), DJANGO_SETTINGS_MODULE="toolhub.settings_test")
    process = subprocess.Popen(
        [sys.executable, "scripts/serve.py", "--port", str(port), "--data", str(tmp_path)],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    wait_for_port(port, process, timeout=60)
    # Wait until all four are up, with the worker pool processes below them.
    _wait_for_log(tmp_path, lambda text: text.count("ready.") >= 2 and "beat: Starting" in text)
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


def _invoke(port: int, slug: str, token: str, text: str) -> dict:
    response = httpx.post(
        f"http://127.0.0.1:{port}/api/v1/toolkits/{slug}/tools/echo/invoke",
        json={"arguments": {"text": text}, "wait": True}, headers={"Authorization": f"Bearer {token}"}, timeout=90,
    )
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.sandbox
def test_the_private_broker_carries_invocations_and_a_killed_worker_is_restarted(tmp_path, upload, build, alice):
    from toolhub.accounts.models import ApiToken
    from toolhub.toolkits.models import Status

    toolkit = build(upload(alice, toolkit_source("Echo")))
    assert toolkit.current_revision.status == Status.READY, toolkit.current_revision.status_detail
    _token, raw = ApiToken.issue(user=alice, name="tests")
    process, _pids, port = _start(tmp_path)
    try:
        # The broker: a redis-server on a socket in a 0700 folder of the data directory, with
        # its append-only file there, and nothing else (no TCP port, no filesystem queue).
        folder = tmp_path / "redis"
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert stat.S_ISSOCK((folder / "redis.sock").stat().st_mode)
        assert (folder / "appendonlydir").is_dir()
        log = _log(tmp_path)
        assert log.count(f"redis+socket://{folder}/redis.sock") >= 3  # both workers and beat
        assert "filesystem://" not in log
        assert _invoke(port, toolkit.slug, raw, "first")["status"] == "succeeded"

        # SIGKILL the work worker's main process: its pool goes with it, a new one takes over.
        worker = int(re.search(r"started worker \(pid (\d+)\)", log).group(1))
        pool = _descendants(worker)
        assert pool
        os.kill(worker, signal.SIGKILL)
        log = _wait_for_log(tmp_path, lambda text: text.count("work@") >= 2 and text.count("ready.") >= 3)
        assert re.search(r"serve: worker exited \(signal 9\) after \d+ s; restarting it in 1 s", log)
        assert len(re.findall(r"started worker \(pid \d+\)", log)) == 2
        assert _alive(pool) == set()
        answer = _invoke(port, toolkit.slug, raw, "second")
        assert answer["status"] == "succeeded" and answer["result"] == "second"
        pids = _descendants(process.pid)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(15)
    # Ctrl-C stops everything, the private redis-server included.
    deadline = time.monotonic() + 2
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive(pids) == set(), _log(tmp_path)[-3000:]
    assert not [p for p in Path("/proc").glob("[0-9]*/cmdline") if str(folder).encode() in _read(p)]


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
