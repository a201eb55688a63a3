"""Clean after a crash: the temporary directories a worker makes carry
its pid, and a worker that starts removes those of workers that died (a SIGKILLed worker
would leave `/tmp/th-egress-*` with their sockets and `/tmp/toolhub-build-*` behind)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import start_worker, toolkit_source
from toolhub.sandbox import scratch
from toolhub.sandbox.egress.endpoint import start_endpoint
from toolhub.toolkits import sandboxing

# The sweep looks at every process and temporary directory of the host.
pytestmark = pytest.mark.host


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _left_behind(parent: Path, prefix: str, pid: int) -> Path:
    directory = parent / f"{prefix}{pid}-abc123"
    directory.mkdir()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(directory / "egress.sock"))
    (directory / "requirements.txt").write_text("x==1\n")
    return directory


def test_the_sweep_removes_what_dead_processes_left_and_nothing_else(tmp_path):
    dead = _dead_pid()
    gone = [_left_behind(tmp_path, prefix, dead) for prefix in scratch.PREFIXES]
    live = _left_behind(tmp_path, scratch.EGRESS, os.getpid())
    unrelated = tmp_path / f"th-egress-nopid-{dead}"
    unrelated.mkdir()
    other = tmp_path / f"someone-else-{dead}-x"
    other.mkdir()

    removed = scratch.sweep_dead(tmp_path)

    assert sorted(removed) == sorted(gone)
    assert not any(d.exists() for d in gone)
    assert live.exists() and unrelated.exists() and other.exists()


def test_new_directories_carry_the_pid_of_their_process(tmp_path):
    made = scratch.make_dir(scratch.BUILD, tmp_path)
    assert made.name.startswith(f"toolhub-build-{os.getpid()}-")
    assert scratch.sweep_dead(tmp_path) == [] and made.exists()


@pytest.mark.django_db
def test_an_egress_socket_directory_carries_the_workers_pid(upload, admin):
    toolkit = upload(admin, toolkit_source("Net"))
    toolkit.egress_granted = True
    policy = sandboxing.egress_policy(toolkit, toolkit.current_revision)
    assert policy is not None
    endpoint = start_endpoint(policy)
    directory = endpoint.socket_path.parent
    assert directory.name.startswith(f"th-egress-{os.getpid()}-") and directory.parent == Path("/tmp")
    endpoint.stop()
    assert not directory.exists()


@pytest.mark.worker
def test_a_worker_that_starts_sweeps_what_a_dead_worker_left(transactional_db, tmp_path):
    dead = _dead_pid()
    parent = Path(tempfile.gettempdir())
    left = [_left_behind(Path("/tmp"), scratch.EGRESS, dead), _left_behind(parent, scratch.BUILD, dead)]
    worker = start_worker(tmp_path)
    try:
        assert not any(d.exists() for d in left), worker.output()[-2000:]
    finally:
        worker.kill()
