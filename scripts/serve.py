#!/usr/bin/env python3
"""`make run`'s supervisor: the web server, the workers and the scheduler, stopped together.

Starts uvicorn (the ASGI web server), a Celery worker for the work queues (`builds`, `sandbox`, `celery`), a worker
of its own for the `maintenance` queue (the reaper, so it never waits behind the work it must
reap), and Celery beat. Each runs in a process group of its own, so a signal reaches the whole
tree below it (pip, uv, compileall, the sandbox) and nothing is left reparented to init.

Ctrl-C (SIGINT) or SIGTERM: every group gets SIGTERM, and whatever still runs after
`--grace` seconds (default 5) gets SIGKILL. A second Ctrl-C kills everything at once. If one
of them dies on its own, the others are stopped too and the exit status says so.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


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


class Supervisor:
    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.children: dict[str, subprocess.Popen] = {}
        self.stopping_since: float | None = None
        self.kill_now = False

    def start(self, name: str, argv: list[str]) -> None:
        self.children[name] = subprocess.Popen(argv, cwd=REPO, start_new_session=True)
        print(f"serve: started {name} (pid {self.children[name].pid})", flush=True)

    def _signal_all(self, sig: int) -> None:
        for process in self.children.values():
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                pass

    def on_signal(self, signum: int, _frame) -> None:
        if self.stopping_since is None:
            print(f"serve: stopping (signal {signum}); Ctrl-C again to kill at once", flush=True)
            self.stopping_since = time.monotonic()
            self._signal_all(signal.SIGTERM)
        else:
            self.kill_now = True

    def run(self) -> int:
        status = 0
        while True:
            alive = {name: p for name, p in self.children.items() if p.poll() is None}
            if self.stopping_since is None:
                dead = [name for name, p in self.children.items() if p.returncode is not None]
                if dead:
                    print(f"serve: {', '.join(dead)} exited; stopping the rest", flush=True)
                    status = 1
                    self.stopping_since = time.monotonic()
                    self._signal_all(signal.SIGTERM)
            elif self.kill_now or time.monotonic() - self.stopping_since > self.grace:
                self._signal_all(signal.SIGKILL)
                for process in self.children.values():
                    process.wait()
                return status
            if not alive:
                # Also sweep what the leaders left in their groups.
                self._signal_all(signal.SIGKILL)
                return status
            time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--data", type=Path, default=REPO / ".data")
    parser.add_argument("--grace", type=float, default=5.0)
    args = parser.parse_args()
    supervisor = Supervisor(args.grace)
    signal.signal(signal.SIGINT, supervisor.on_signal)
    signal.signal(signal.SIGTERM, supervisor.on_signal)
    signal.signal(signal.SIGHUP, supervisor.on_signal)
    for name, argv in commands(sys.executable, args.port, args.data).items():
        supervisor.start(name, argv)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
