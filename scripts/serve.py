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

Nothing outlives it, even when it is killed with SIGKILL: a watchdog process it forks first
holds a pipe from it, learns each child's process group, and when the pipe closes without a
clean stop (the supervisor died) stops those groups the same way. PR_SET_PDEATHSIG alone would
stop the children but not what runs below them (pool processes, sandboxes, build tools).

One supervisor per data directory: it holds a lock on `<data>/serve.lock` (the watchdog keeps it
until its clean-up is done) and lists its process groups in `<data>/serve.pids`. A start that
finds the lock held says which process holds it; one that finds leftovers of an earlier run
(groups from the list still running, the private redis-server still answering on its socket,
its own web server on the port) says so and stops them; a port held by anything else is named,
and nothing starts.
"""

from __future__ import annotations

import argparse
import fcntl
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


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def group_members(pgid: int) -> list[int]:
    """The live processes of process group `pgid` (from /proc)."""
    members = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        fields = _read(stat_file).rsplit(")", 1)
        if len(fields) == 2:
            rest = fields[1].split()
            # state, ppid, pgrp
            if len(rest) > 2 and rest[0] != "Z" and rest[2] == str(pgid):
                members.append(int(stat_file.parent.name))
    return members


def cmdline(pid: int) -> str:
    return _read(Path(f"/proc/{pid}/cmdline")).replace("\0", " ").strip()


def ours(pid: int) -> bool:
    """Started by a serve.py of this checkout: every child runs in the repository."""
    try:
        return os.readlink(f"/proc/{pid}/cwd") == str(REPO)
    except OSError:
        return False


def stop_groups(groups: dict[int, str], grace: float) -> None:
    """SIGTERM every group but the broker's, the broker once the others are gone, SIGKILL for
    whatever is left after `grace` seconds: how the supervisor stops, for the watchdog and for
    the leftovers of an earlier run."""

    def signal_groups(pgids: list[int], sig: int) -> None:
        for pgid in pgids:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def wait_gone(pgids: list[int], seconds: float) -> list[int]:
        deadline = time.monotonic() + seconds
        while True:
            alive = [pgid for pgid in pgids if group_members(pgid)]
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(0.05)

    others = [pgid for pgid, name in groups.items() if name != BROKER]
    brokers = [pgid for pgid, name in groups.items() if name == BROKER]
    signal_groups(others, signal.SIGTERM)
    signal_groups(wait_gone(others, grace), signal.SIGKILL)
    signal_groups(brokers, signal.SIGTERM)
    signal_groups(wait_gone(brokers, grace), signal.SIGKILL)
    wait_gone(list(groups), 2.0)


class Watchdog:
    """A forked process that outlives a killed supervisor just long enough to stop its children.

    The supervisor writes `start <name> <pgid>` and `gone <pgid>` lines to it, and `clean` when it
    stopped everything itself. End of file without `clean` means the supervisor died."""

    def __init__(self, pids_file: Path, grace: float) -> None:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(write_end)
            # Ctrl-C reaches the whole foreground group: only the supervisor acts on it.
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)
            code = 0
            try:
                self._watch(read_end, pids_file, grace)
            except BaseException:  # noqa: BLE001 - it must end, whatever happened
                code = 1
            finally:
                # The lock (inherited) goes with this process: a new start may begin now.
                os._exit(code)
        os.close(read_end)
        self.pid = pid
        self._pipe = os.fdopen(write_end, "w", buffering=1)

    def tell(self, line: str) -> None:
        try:
            self._pipe.write(line + "\n")
        except (BrokenPipeError, OSError):
            pass

    @staticmethod
    def _watch(read_end: int, pids_file: Path, grace: float) -> None:
        groups: dict[int, str] = {}
        clean = False
        with os.fdopen(read_end) as pipe:
            for line in pipe:
                words = line.split()
                if words[:1] == ["start"] and len(words) == 3:
                    groups[int(words[2])] = words[1]
                elif words[:1] == ["gone"] and len(words) == 2:
                    groups.pop(int(words[1]), None)
                elif words[:1] == ["clean"]:
                    clean = True
        if not clean and groups:
            print(f"serve: the supervisor died; stopping {', '.join(sorted(set(groups.values())))}",
                  file=sys.stderr, flush=True)
            stop_groups(groups, grace)
        pids_file.unlink(missing_ok=True)


def lock_data_dir(data: Path) -> int:
    """Take `<data>/serve.lock`, or exit saying which process holds it."""
    data.mkdir(parents=True, exist_ok=True)
    path = data / "serve.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
        sys.exit(f"serve: another serve.py (pid {holder}) is running on {data.resolve()}, or still stopping its "
                 "children; stop it first, or use another --data")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def clean_leftovers(data: Path, port: int, grace: float) -> None:
    """Stop what an earlier run on this data directory left running, saying what it was; exit
    when the port is held by something that is not ours."""
    pids_file = data / "serve.pids"
    groups: dict[int, str] = {}
    for line in _read(pids_file).splitlines():
        words = line.split()
        if len(words) == 2 and words[1].isdigit():
            pgid = int(words[1])
            # Only a group that still runs what we started (not a reused number).
            if any(ours(pid) for pid in group_members(pgid)):
                groups[pgid] = words[0]
    folder = redis_folder(data)
    socket_path = folder / "redis.sock"
    # What an earlier run left without a list (one killed with its watchdog before writing it,
    # or a serve.py of before the list): its broker on our socket, its web server on our port.
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        pid = int(stat_file.parent.name)
        line = f"{cmdline(pid)} "
        broker = "redis-server" in line and f"{socket_path} " in line
        web = "toolhub.asgi:application" in line and f"--port {port} " in line and ours(pid)
        if broker or web:
            try:
                groups.setdefault(os.getpgid(pid), BROKER if broker else "web")
            except ProcessLookupError:
                pass
    if groups:
        described = ", ".join(f"{name} (process group {pgid})" for pgid, name in sorted(groups.items()))
        print(f"serve: found leftovers of an earlier run on {data.resolve()}: {described}; stopping them", flush=True)
        stop_groups(groups, grace)
    pids_file.unlink(missing_ok=True)
    if socket_path.exists() and not groups:
        # A socket file nobody answers on: redis-server would replace it anyway.
        socket_path.unlink(missing_ok=True)
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            sys.exit(f"serve: port {port} on 127.0.0.1 is in use by another program; stop it or pass --port")


class Child:
    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.process: subprocess.Popen | None = None
        self.started_at = 0.0
        self.delay = FIRST_DELAY
        self.restart_at: float | None = None


class Supervisor:
    def __init__(self, grace: float, watchdog: Watchdog | None = None, pids_file: Path | None = None) -> None:
        self.grace = grace
        self.watchdog = watchdog
        self.pids_file = pids_file
        self.children: dict[str, Child] = {}
        self.stopping_since: float | None = None
        self.broker_stopped = False
        self.kill_now = False

    def start(self, name: str, argv: list[str] | None = None) -> subprocess.Popen:
        child = self.children.setdefault(name, Child(argv or []))
        child.process = subprocess.Popen(child.argv, cwd=REPO, start_new_session=True)
        child.started_at, child.restart_at = time.monotonic(), None
        print(f"serve: started {name} (pid {child.process.pid})", flush=True)
        if self.watchdog is not None:
            self.watchdog.tell(f"start {name} {child.process.pid}")
        self._list_groups()
        return child.process

    def _list_groups(self) -> None:
        """`<data>/serve.pids`: for a later start, should this one die with its watchdog."""
        if self.pids_file is None:
            return
        lines = [f"{name} {c.process.pid}\n" for name, c in self.children.items() if c.process is not None]
        partial = self.pids_file.with_suffix(".tmp")
        partial.write_text("".join(lines))
        partial.replace(self.pids_file)

    def _clean_exit(self, status: int) -> int:
        if self.watchdog is not None:
            self.watchdog.tell("clean")
        if self.pids_file is not None:
            self.pids_file.unlink(missing_ok=True)
        return status

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
        if self.watchdog is not None:
            self.watchdog.tell(f"gone {child.process.pid}")
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
                    return self._clean_exit(status)
                if all(p.poll() is not None for p in self._processes()):
                    # Also sweep what the leaders left in their groups.
                    self._signal_all(signal.SIGKILL)
                    return self._clean_exit(status)
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
    lock_data_dir(args.data)  # held until this process (and its watchdog) are gone
    clean_leftovers(args.data, args.port, args.grace)
    pids_file = args.data / "serve.pids"
    supervisor = Supervisor(args.grace, Watchdog(pids_file, args.grace), pids_file)
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
