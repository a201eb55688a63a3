"""Per-run cgroup v1 directories for the sandbox launcher (toolhub.sandbox.launcher): memory and
pids limits of the run's own, its CPU time, and the kill that leaves nothing behind. Used only
where the host lets the worker write its cgroups; elsewhere the launcher relies on rlimits."""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolhub.sandbox.limits import Limits

# The cgroup memory limit leaves this much room over the process and tmpfs budgets for
# bubblewrap, page tables and kernel objects charged to the run.
_CGROUP_MEMORY_SLACK = 64 << 20


class RunCgroups:
    """Per-run cgroup v1 directories for the memory and pids controllers, when writable.

    Each directory is created under the worker's own cgroup of that hierarchy, so the run also
    stays inside whatever limits the worker itself lives under.
    """

    def __init__(
        self,
        root: Path | None,
        limits: Limits,
        *,
        controllers: tuple[str, ...] = ("memory", "pids", "cpuacct"),
        extra_memory: int = 0,
        extra_processes: int = 0,
    ) -> None:
        self.dirs: dict[str, Path] = {}
        self.fds: list[int] = []
        # The counter files, opened at their first read and read again in place: a warm
        # sandbox reads three of them before and after every call.
        self._counters: dict[tuple[str, str], int] = {}
        self.active = False
        if root is None:
            return
        token = f"toolhub-{os.getpid()}-{os.urandom(6).hex()}"
        own = _own_cgroups()
        memory_limit = limits.memory_bytes + 2 * limits.tmp_bytes + _CGROUP_MEMORY_SLACK + extra_memory
        settings = {
            "memory": [
                ("memory.limit_in_bytes", memory_limit),
                ("memory.memsw.limit_in_bytes", memory_limit),
            ],
            # bubblewrap itself is one more process in the group.
            "pids": [("pids.max", limits.processes + 1 + extra_processes)],
            # Only read: the CPU time of every process of the run, reaped or not.
            "cpuacct": [],
        }
        for controller, values in settings.items():
            if controller not in controllers:
                continue
            base = root / controller
            relative = own.get(controller)
            if relative is None or not (base / "cgroup.procs").exists():
                continue
            parent = base / relative.lstrip("/")
            _sweep_stale(parent)
            directory = parent / token
            try:
                directory.mkdir()
            except OSError:
                continue
            self.dirs[controller] = directory
            try:
                for name, value in values:
                    if (directory / name).exists():
                        (directory / name).write_text(str(value))
                # Opened here, by root: a cgroup v1 move is authorised by the credentials the
                # file was opened with, so the child can join after dropping privileges.
                self.fds.append(os.open(directory / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
            except OSError:
                self._remove(controller)
        # Whether a memory or pids limit of its own applies to the run.
        self.active = "memory" in self.dirs or "pids" in self.dirs

    def oom_killed(self) -> bool:
        return self.oom_kills() > 0

    def oom_kills(self) -> int:
        """How many processes the OOM killer has killed in the memory group so far."""
        text = self._read_counter("memory", "memory.oom_control")
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def pids_limit_hit(self) -> bool:
        return self.pids_limit_hits() > 0

    def pids_limit_hits(self) -> int:
        """How often a fork failed on the pids limit so far."""
        text = self._read_counter("pids", "pids.events")
        name, _, value = text.strip().partition(" ")
        return int(value) if name == "max" and value.isdigit() else 0

    def cpu_ms(self) -> int | None:
        text = self._read_counter("cpuacct", "cpuacct.usage").strip()
        return int(text) // 1_000_000 if text.isdigit() else None

    def close_fds(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def kill_and_remove(self) -> None:
        self.close_fds()
        for fd in self._counters.values():
            os.close(fd)
        self._counters.clear()
        for controller in list(self.dirs):
            directory = self.dirs[controller]
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                pids = self._read(controller, "cgroup.procs").split()
                for pid in pids:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                try:
                    directory.rmdir()
                    break
                except OSError as exc:
                    if exc.errno == errno.ENOENT:
                        break
                    time.sleep(0.01)
            del self.dirs[controller]

    def _remove(self, controller: str) -> None:
        try:
            self.dirs.pop(controller).rmdir()
        except OSError:
            pass

    def _read_counter(self, controller: str, name: str) -> str:
        if controller not in self.dirs:
            return ""
        try:
            fd = self._counters.get((controller, name))
            if fd is None:
                fd = self._counters[controller, name] = os.open(self.dirs[controller] / name, os.O_RDONLY | os.O_CLOEXEC)
            return os.pread(fd, 4096, 0).decode()
        except OSError:
            return ""

    def _read(self, controller: str, name: str) -> str:
        directory = self.dirs.get(controller)
        if directory is None:
            return ""
        try:
            return (directory / name).read_text()
        except OSError:
            return ""


def _own_cgroups() -> dict[str, str]:
    """Map each cgroup v1 controller to the worker's own cgroup path in its hierarchy."""
    result: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return result
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[1]:
            continue
        for controller in parts[1].split(","):
            result[controller] = parts[2]
    return result


def _sweep_stale(parent: Path) -> None:
    """Remove run cgroups left behind by workers that died before cleaning up."""
    try:
        entries = list(parent.glob("toolhub-*-*"))
    except OSError:
        return
    for entry in entries:
        pid = entry.name.split("-")[1]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            entry.rmdir()
        except OSError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
