"""A real ToolHub server process (uvicorn serving toolhub.asgi) on the test database, for
tests that drive the MCP endpoint and the OpenAPI tool servers over real HTTP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO, _database_url

# The serving tests' port range; the tests pick a free one in it.
PORTS = range(21300, 21400)


def _free_port() -> int:
    for port in PORTS:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 21300-21399")


class ServerProcess:
    def __init__(self, process: subprocess.Popen, log: Path, port: int):
        self.process = process
        self.log = log
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_server(tmp_path: Path, **extra_env: str) -> ServerProcess:
    port = _free_port()
    env = dict(os.environ, DATABASE_URL=_database_url())
    env.update(extra_env)
    log = tmp_path / "server.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "toolhub.asgi:application", "--host", "127.0.0.1", "--port", str(port),
         "--lifespan", "on", "--no-access-log"],
        cwd=REPO, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    server = ServerProcess(process, log, port)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if "Application startup complete" in server.output():
            return server
        if process.poll() is not None:
            break
        time.sleep(0.1)
    server.kill()
    raise RuntimeError("the ToolHub server did not start:\n" + server.output()[-3000:])
