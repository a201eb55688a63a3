"""One call of a warm sandbox (``toolhub.sandbox.warm``), from the host's side: the session loop
of ``toolhub.sandbox.session`` over the call's pipes, ended by the fork server's reports on the
sandbox's control socket rather than by a process exit, and what measures the call's process
while it still runs (for a call that answers at its result)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Protocol

from toolhub.sandbox.cgroups import RunCgroups
from toolhub.sandbox.limits import Limits
from toolhub.sandbox.session import PipeSession

CONTROL_TIMEOUT = 10.0
KILL_PATIENCE = 2.0


class WarmHost(Protocol):
    """What a call's session uses of its warm sandbox (``toolhub.sandbox.warm.WarmSandbox``):
    the control socket and what has been read from it, its cgroups, and its retirement."""

    control: socket.socket
    problems: list[str]
    _buffer: bytes
    _memory: RunCgroups

    def _receive(self, timeout: float) -> tuple[dict | None, list[int]]: ...

    def retire(self) -> None: ...


def _pidfd_pid(pidfd: int) -> int | None:
    """The pid behind a pidfd in the reader's pid namespace (its ``fdinfo`` names it), or None
    once the process has been reaped."""
    try:
        with open(f"/proc/self/fdinfo/{pidfd}") as handle:
            for line in handle:
                name, _, value = line.partition(":")
                if name == "Pid":
                    pid = int(value)
                    return pid if pid > 0 else None
    except (OSError, ValueError):
        pass
    return None


def open_usage_files(pidfd: int, *, with_stat: bool) -> list[int]:
    """Descriptors of the ``/proc`` ``status`` (and ``stat``) files of the process behind
    ``pidfd``, in the host's ``/proc``; empty if it is gone. A ``/proc/<pid>`` file stays bound
    to the process it was opened for (reading it once that is reaped fails), and the pid is
    looked up again after the opening: not reaped by then, so the files are its own."""
    pid = _pidfd_pid(pidfd)
    if pid is None:
        return []
    fds: list[int] = []
    try:
        for name in ("status", "stat") if with_stat else ("status",):
            fds.append(os.open(f"/proc/{pid}/{name}", os.O_RDONLY | os.O_CLOEXEC))
    except OSError:
        pass
    if len(fds) != (2 if with_stat else 1) or _pidfd_pid(pidfd) != pid:
        for fd in fds:
            os.close(fd)
        return []
    return fds


def live_usage(files: list[int]) -> tuple[int | None, int] | None:
    """(CPU milliseconds of the process, its threads and the children it reaped, when its
    ``stat`` is open; its peak RSS in kB) from ``open_usage_files``' descriptors, or None
    once the process has exited (its ``status`` then has no ``VmHWM``, or cannot be read)."""
    try:
        status = os.pread(files[0], 8192, 0).decode()
        stat = os.pread(files[1], 4096, 0).decode() if len(files) > 1 else None
    except (OSError, IndexError, UnicodeDecodeError):
        return None
    peak = None
    for line in status.splitlines():
        name, _, value = line.partition(":")
        if name == "VmHWM":
            peak = int(value.split()[0])
    if peak is None:
        return None
    if stat is None:
        return None, peak
    # Fields 14 to 17 (utime, stime, cutime, cstime), counted after the command's name.
    ticks = sum(int(value) for value in stat[stat.rindex(")") + 2 :].split()[11:15])
    return ticks * 1000 // os.sysconf("SC_CLK_TCK"), peak


class CallSession(PipeSession):
    """The session loop of ``toolhub.sandbox.session`` over one warm call's pipes.

    The end of the call is the fork server's ``done`` report (sent once everything of the call
    is dead and cleaned), not a process exit; a kill goes to the call's process through its
    pidfd, and escalates to retiring the whole sandbox. With ``answer_early`` the loop also
    stops at a successful result (``answered_early``); ``WarmSandbox._finish`` runs the rest.
    """

    def __init__(
        self,
        *,
        sandbox: WarmHost,
        stdin_fd: int,
        stdout_fd: int,
        stderr_fd: int,
        pidfd: int,
        limits: Limits,
        on_message: Callable[[dict], dict | None],
        cancel: threading.Event | None = None,
        answer_early: bool = False,
    ) -> None:
        super().__init__(
            stdin_fd=stdin_fd,
            stdout_fd=stdout_fd,
            stderr_fd=stderr_fd,
            exit_fd=sandbox.control.fileno(),
            limits=limits,
            on_message=on_message,
            cancel=cancel,
        )
        self.sandbox = sandbox
        self.answer_early = answer_early
        self.child_pidfd = pidfd
        # The fork server's reports: the call's process reaped (with its wait4 usage), and
        # everything of the call gone (with what could not be cleaned).
        self.exit_report: dict | None = None
        self.done: dict | None = None
        # What measures the call at an early answer, opened once its request is written (while
        # it runs), and (CPU ms, peak RSS kB) read there when the result came and it still ran.
        self.usage_files: list[int] | None = None
        self.live_usage: tuple[int | None, int] | None = None
        self.probed = False
        self.stdin_deferred = False

    def answered_early(self) -> bool:
        """Whether the call may answer now: a successful result has arrived, nothing was killed,
        the call has not ended, and its usage is known (its process reaped, or read while it
        still runs)."""
        final = self.state.final
        return (
            self.answer_early
            and self.exited_at is None
            and self.killed_at is None
            and final is not None
            and final.get("kind") == "result"
            and (self.exit_report is not None or self.live_usage is not None)
        )

    def _finished(self) -> bool:
        final = self.state.final
        if self.answer_early and not self.probed and final is not None and final.get("kind") == "result":
            # Once, at the result: a process that has not exited yet is measured now; one that
            # has is answered for at the fork server's "exited" report, a moment later.
            self.probed = True
            if self.usage_files:
                self.live_usage = live_usage(self.usage_files)
        return self.answered_early() or super()._finished()

    def release_stdin(self) -> None:
        """End a call's early answer: from now on it ends in full, and the stdin held open at
        its result (_close_stdin) is closed."""
        self.answer_early = False
        if self.stdin_deferred:
            self.stdin_deferred = False
            self._close_stdin()

    def drain_stderr(self) -> None:
        """Read what the call wrote to stderr before its result: written first, it is in the
        pipe already, though the loop may have read stdout first."""
        while "stderr" in self.open_streams and self.killed_at is None:
            before = self.state.output_bytes
            self._handle("stderr")
            if self.state.output_bytes == before:
                return

    def _handle(self, name: str) -> None:
        if name != "exit":
            super()._handle(name)
            return
        self._read_control(CONTROL_TIMEOUT)

    def _write_stdin(self) -> None:
        super()._write_stdin()
        if self.answer_early and self.usage_files is None and not self.pending_stdin and self.child_pidfd is not None:
            # The request is written and the call runs: the opening costs it nothing now.
            with_stat = "cpuacct" not in self.sandbox._memory.dirs
            self.usage_files = open_usage_files(self.child_pidfd, with_stat=with_stat)

    def _read_control(self, timeout: float) -> None:
        """Take the fork server's reports: ``exited`` once the call's process is reaped, then
        ``done`` once everything of the call is gone, which ends the call (as anything else on
        the control socket does, without a report)."""
        while True:
            message, fds = self.sandbox._receive(timeout)
            for fd in fds:
                os.close(fd)
            if message is not None and message.get("op") == "exited" and self.exit_report is None:
                self.exit_report = message
                # Both may have come in one read.
                if b"\n" in self.sandbox._buffer:
                    continue
                return
            if message is not None and message.get("op") == "done":
                self.done = message
            self.selector.unregister(self.exit_fd)
            self.exited_at = time.monotonic()
            self._close_stdin()
            return

    def _close_stdin(self) -> None:
        if not self.stdin_open:
            return
        final = self.state.final
        if self.answer_early and final is not None and final.get("kind") == "result":
            # At its result the runtime waits for its stdin to close before it exits
            # (channel.Channel.finish): measured now, the process is still whole, and its stdin
            # is closed once the call has answered (release_stdin, on the tail thread), so that
            # the process's exit does not hold up the answer.
            if not self.probed:
                self.probed = True
                if self.usage_files:
                    self.live_usage = live_usage(self.usage_files)
            self.stdin_deferred = True
            return
        if self.stdin_registered:
            self.selector.unregister(self.stdin_fd)
            self.stdin_registered = False
        self.stdin_open = False
        self.pending_stdin.clear()
        os.close(self.stdin_fd)

    def _signal_bwrap(self) -> None:
        # The call would not die: the sandbox is not to be trusted with another one.
        self.bwrap_signalled = True
        self.sandbox.problems.append("a call's process did not die when killed")
        self.sandbox.retire()
        self.exited_at = time.monotonic()

    def _reap(self) -> None:
        return

    def close(self) -> None:
        if self.exited_at is None:
            self.kill("aborted")
            # Wait for the fork server's report, then give up on the sandbox.
            deadline = time.monotonic() + KILL_PATIENCE
            while self.exited_at is None and time.monotonic() < deadline:
                self._read_control(deadline - time.monotonic())
            if self.done is None:
                self.sandbox.problems.append("the fork server did not report after an aborted call")
                self.sandbox.retire()
        self.selector.close()
        if self.child_pidfd is not None:
            os.close(self.child_pidfd)
            self.child_pidfd = None
        for fd in self.usage_files or []:
            os.close(fd)
        self.usage_files = []
        self._close_stdin()
        for fd in (self.stdout_fd, self.stderr_fd):
            try:
                os.close(fd)
            except OSError:
                pass
