"""Real servers for the tests that need a socket between client and ToolHub: gunicorn serving
the test database, and private redis-server processes that a test may stop and restart.

Ports come from `TOOLHUB_TEST_PORTS` ("21800-21899") when set, so parallel runs on one machine
can be given ranges of their own; else the kernel picks a free one."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    wanted = os.environ.get("TOOLHUB_TEST_PORTS", "")
    if wanted:
        low, high = (int(p) for p in wanted.split("-"))
        candidates = range(low, high + 1)
    else:
        candidates = range(0, 1)
    for port in candidates:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise RuntimeError(f"no free port in {wanted}")


def wait_for_port(port: int, process: subprocess.Popen | None = None, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s")


class Server:
    def __init__(self, process: subprocess.Popen, port: int, log: Path):
        self.process = process
        self.port = port
        self.log = log

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_gunicorn(
    tmp_path: Path, env: dict[str, str] | None = None, workers: int = 2, options: tuple[str, ...] = ()
) -> Server:
    port = free_port()
    log = tmp_path / "gunicorn.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "toolhub.wsgi", "-b", f"127.0.0.1:{port}", "-w", str(workers),
         "--threads", "4", "--timeout", "60", *options],
        cwd=REPO, env=dict(os.environ, **(env or {})), stdout=log.open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = Server(process, port, log)
    try:
        wait_for_port(port, process)
    except RuntimeError:
        server.stop(signal.SIGKILL)
        raise RuntimeError("gunicorn did not start:\n" + server.output()[-3000:]) from None
    return server


def start_redis(tmp_path: Path, port: int | None = None) -> Server:
    """A private redis-server without persistence (as CI's), so a restart loses its queues."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (scripts/system-setup installs it)")
    port = port or free_port()
    log = tmp_path / f"redis-{port}.log"
    process = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path)],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    server = Server(process, port, log)
    wait_for_port(port, process)
    return server
