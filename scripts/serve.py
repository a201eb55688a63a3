#!/usr/bin/env python3
"""`make run`'s supervisor: the broker, the web server, the workers and the scheduler, stopped together.

Without `REDIS_URL` it first starts a private `redis-server` (Debian's package) listening only on
a UNIX socket in `<data>/redis` (mode 0700, no TCP port, append-only file on, so queued work
survives a restart) and hands it to everything below as `REDIS_URL=unix://…`. With `--setup`
it then migrates, creates the first admin and loads the demo toolkits, on that broker.

Then it starts uvicorn (the ASGI web server), a Celery worker for the work queues (`builds`,
`sandbox`, `celery`), a worker of its own for the `maintenance` queue (the reaper, so it never
waits behind the work it must reap), and Celery beat. Each runs in a process group of its own,
so a signal reaches the whole tree below it (pip, uv, compileall, the sandbox) and nothing is
left reparented to init.

A worker, beat or the private broker that dies is restarted (after 1 s, doubling up to 30 s
while it keeps dying young); what was left in its process group is killed first. If the web
server dies, everything is stopped and the exit status says so.

Ctrl-C (SIGINT) or SIGTERM: every group but the broker's gets SIGTERM, the broker once the
others are gone, and whatever still runs after `--grace` seconds (default 5) gets SIGKILL. A
second Ctrl-C kills everything at once.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BROKER = "redis"
# Restarted when they die; anything else (the web server) stops the whole set.
RESTARTED = {BROKER, "worker", "maintenance", "beat"}
FIRST_DELAY, MAX_DELAY = 1.0, 30.0
# A child that ran this long before dying starts again from the first delay.
HEALTHY_AFTER = 60.0


def redis_command(data: Path) -> list[str] | None:
    """A private redis-server on a UNIX socket in `data`, or None when `REDIS_URL` names one."""
    if os.environ.get("REDIS_URL"):
        return None
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("serve: redis-server is missing (scripts/system-setup installs it, or set REDIS_URL)")
    folder = redis_folder(data)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    return [binary, "--port", "0", "--unixsocket", str(folder / "redis.sock"), "--unixsocketperm", "700",
            "--dir", str(folder), "--appendonly", "yes", "--save", "", "--loglevel", "warning"]


def redis_folder(data: Path) -> Path:
    return data.resolve() / "redis"


def commands(python: str, port: int, data: Path) -> dict[str, list[str]]:
    bin_dir = Path(python).parent
    celery = [str(bin_dir / "celery"), "-A", "toolhub"]
    return {
        "web": [str(bin_dir / "uvicorn"), "toolhub.asgi:application", "--host", "127.0.0.1", "--port", str(port),
                "--lifespan", "on", "--timeout-graceful-shutdown", "3"],
        "worker": [*celery, "worker", "-n", "work@%h", "-Q", "builds,sandbox,celery", "-c", "2", "-l", "info"],
        "maintenance": [*celery, "worker", "-n", "maintenance@%h", "-Q", "maintenance", "-c", "1", "-l", "info"],
        "beat": [*celery, "beat", "-l", "info", "--schedule", str(data / "celerybeat-schedule")],
    }


def setup_commands(python: str) -> list[list[str]]:
    manage = [python, str(REPO / "manage.py")]
    return [[*manage, "migrate", "--noinput"], [*manage, "create_admin"], [*manage, "load_demo"]]


def wait_for_redis(path: Path, process: subprocess.Popen, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"serve: redis-server exited with {process.returncode}")
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(1)
                sock.connect(str(path))
                sock.sendall(b"PING\r\n")
                if sock.recv(64).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    sys.exit(f"serve: redis-server does not answer on {path}")


class Child:
    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.process: subprocess.Popen | None = None
        self.started_at = 0.0
        self.delay = FIRST_DELAY
        self.restart_at: float | None = None


class Supervisor:
    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.children: dict[str, Child] = {}
        self.stopping_since: float | None = None
        self.broker_stopped = False
        self.kill_now = False

    def start(self, name: str, argv: list[str] | None = None) -> subprocess.Popen:
        child = self.children.setdefault(name, Child(argv or []))
        child.process = subprocess.Popen(child.argv, cwd=REPO, start_new_session=True)
        child.started_at, child.restart_at = time.monotonic(), None
        print(f"serve: started {name} (pid {child.process.pid})", flush=True)
        return child.process

    def _processes(self, *, broker: bool = True) -> list[subprocess.Popen]:
        return [c.process for name, c in self.children.items()
                if c.process is not None and (broker or name != BROKER)]

    @staticmethod
    def _signal(process: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass

    def _signal_all(self, sig: int, *, broker: bool = True) -> None:
        for process in self._processes(broker=broker):
            self._signal(process, sig)

    def on_signal(self, signum: int, _frame) -> None:
        if self.stopping_since is None:
            print(f"serve: stopping (signal {signum}); Ctrl-C again to kill at once", flush=True)
            self.stopping_since = time.monotonic()
            self._signal_all(signal.SIGTERM, broker=False)
        else:
            self.kill_now = True

    def _died(self, name: str, child: Child) -> bool:
        """Schedule a restart of a child that exited; False if it is one that stops everything."""
        assert child.process is not None
        code = child.process.returncode
        # The leader is gone; its pool processes, sandboxes or build tools may not be.
        self._signal(child.process, signal.SIGKILL)
        if name not in RESTARTED:
            print(f"serve: {name} exited ({describe(code)}); stopping the rest", flush=True)
            return False
        ran = time.monotonic() - child.started_at
        if ran > HEALTHY_AFTER:
            child.delay = FIRST_DELAY
        print(f"serve: {name} exited ({describe(code)}) after {ran:.0f} s; restarting it in {child.delay:.0f} s",
              flush=True)
        child.restart_at = time.monotonic() + child.delay
        child.delay = min(child.delay * 2, MAX_DELAY)
        return True

    def run(self) -> int:
        status = 0
        while True:
            now = time.monotonic()
            if self.stopping_since is None:
                for name, child in self.children.items():
                    if child.restart_at is not None:
                        if now >= child.restart_at:
                            self.start(name)
                    elif child.process is not None and child.process.poll() is not None and not self._died(name, child):
                        status = 1
                        self.stopping_since = now
                        self._signal_all(signal.SIGTERM, broker=False)
                        break
            else:
                if not self.broker_stopped and all(p.poll() is not None for p in self._processes(broker=False)):
                    # The broker last, so the workers never lose it while they stop.
                    self.broker_stopped = True
                    self._signal_all(signal.SIGTERM)
                if self.kill_now or now - self.stopping_since > self.grace:
                    self._signal_all(signal.SIGKILL)
                    for process in self._processes():
                        process.wait()
                    return status
                if all(p.poll() is not None for p in self._processes()):
                    # Also sweep what the leaders left in their groups.
                    self._signal_all(signal.SIGKILL)
                    return status
            time.sleep(0.1)


def describe(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"status {code}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--data", type=Path, default=REPO / ".data")
    parser.add_argument("--grace", type=float, default=5.0)
    parser.add_argument("--setup", action="store_true", help="migrate, create the admin and load the demo first")
    args = parser.parse_args()
    supervisor = Supervisor(args.grace)
    signal.signal(signal.SIGINT, supervisor.on_signal)
    signal.signal(signal.SIGTERM, supervisor.on_signal)
    signal.signal(signal.SIGHUP, supervisor.on_signal)
    redis = redis_command(args.data)
    if redis is not None:
        path = redis_folder(args.data) / "redis.sock"
        wait_for_redis(path, supervisor.start(BROKER, redis))
        # redis-py's form; toolhub/settings.py gives Celery kombu's (redis+socket://).
        os.environ["REDIS_URL"] = f"unix://{path}"
    for argv in setup_commands(sys.executable) if args.setup else []:
        if supervisor.stopping_since is not None or subprocess.run(argv, cwd=REPO).returncode != 0:
            # Stop the broker and say the set-up did not finish.
            supervisor.stopping_since = supervisor.stopping_since or time.monotonic()
            supervisor.run()
            return 1
    for name, argv in commands(sys.executable, args.port, args.data).items():
        supervisor.start(name, argv)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
