"""The parent's side of one sandboxed run: reading its pipes, answering its messages, watching
its deadlines and limits, and killing it. ``toolhub.sandbox.launcher`` starts the run."""

from __future__ import annotations

import json
import os
import re
import resource
import select
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolhub.sandbox.limits import FINAL_KINDS, Limits, SandboxOutcome, StopRun

_READ_CHUNK = 1 << 16

# How often a run that can be cancelled looks whether it was.
CANCEL_CHECK_SECONDS = 0.2
# How long bubblewrap gets to exit after the command was killed before it is killed too.
_KILL_PATIENCE = 2.0


@dataclass
class RunState:
    final: dict | None = None
    killed_for: str | None = None
    output_bytes: int = 0
    dropped_lines: int = 0
    messages: int = 0
    stderr_tail: bytearray = field(default_factory=bytearray)


class PipeSession:
    """The parent's side of one run over its pipes: writing its stdin, reading its messages
    and output, watching its deadlines and limits, and killing it. ``exit_fd`` becomes readable
    when the run has ended (a pidfd, or a control socket). Subclasses say how the run's own
    process is signalled, reaped and closed: ``Session`` for a bubblewrap process, the warm
    sandbox's call session (``toolhub.sandbox.warm_call``) for one call of a warm sandbox."""

    def __init__(
        self,
        *,
        stdin_fd: int,
        stdout_fd: int,
        stderr_fd: int,
        exit_fd: int,
        limits: Limits,
        on_message: Callable[[dict], dict | None],
        cancel: threading.Event | None = None,
        status_fd: int = -1,
    ) -> None:
        # Set from another thread (the worker's heartbeat) when the run is cancelled: the loop
        # looks at it at least every CANCEL_CHECK_SECONDS and kills the sandbox.
        self.cancel = cancel
        self.limits = limits
        self.on_message = on_message
        self.state = RunState()
        self.bwrap_status: dict = {}
        self.usage: resource.struct_rusage | None = None
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd
        self.stderr_fd = stderr_fd
        self.status_fd = status_fd
        self.exit_fd = exit_fd
        for fd in (stdin_fd, stdout_fd, stderr_fd, status_fd):
            if fd >= 0:
                os.set_blocking(fd, False)
        self.child_pidfd: int | None = None
        self.selector = selectors.DefaultSelector()
        self.selector.register(stdout_fd, selectors.EVENT_READ, "stdout")
        self.selector.register(stderr_fd, selectors.EVENT_READ, "stderr")
        self.open_streams = {"stdout", "stderr"}
        if status_fd >= 0:
            self.selector.register(status_fd, selectors.EVENT_READ, "status")
            self.open_streams.add("status")
        self.selector.register(exit_fd, selectors.EVENT_READ, "exit")
        self.stdout_buffer = bytearray()
        self.status_buffer = bytearray()
        self.pending_stdin = bytearray()
        self.stdin_open = True
        self.stdin_registered = False
        self.deadline = time.monotonic() + limits.wall_seconds
        self.host_budget = limits.host_wait_seconds
        self.final_at: float | None = None
        self.killed_at: float | None = None
        self.bwrap_signalled = False
        self.exited_at: float | None = None

    # -- writing

    def send(self, data: bytes) -> None:
        if not self.stdin_open:
            return
        self.pending_stdin += data
        if not self.stdin_registered:
            self.selector.register(self.stdin_fd, selectors.EVENT_WRITE, "stdin")
            self.stdin_registered = True

    def _write_stdin(self) -> None:
        try:
            written = os.write(self.stdin_fd, self.pending_stdin)
        except BlockingIOError:
            return
        except OSError:
            # The command closed its stdin or died; whatever was pending can never arrive.
            self._close_stdin()
            return
        del self.pending_stdin[:written]
        if not self.pending_stdin:
            self.selector.unregister(self.stdin_fd)
            self.stdin_registered = False

    def _close_stdin(self) -> None:
        raise NotImplementedError

    # -- the loop

    def run(self) -> None:
        while not self._finished():
            now = time.monotonic()
            if self.exited_at is not None:
                pass
            elif self.killed_at is None:
                if self.cancel is not None and self.cancel.is_set():
                    self.kill("cancelled")
                elif now >= self.deadline:
                    self.kill("wall_time")
                elif self.final_at is not None and now - self.final_at > self.limits.exit_grace_seconds:
                    self.kill("exit_grace")
            elif not self.bwrap_signalled and now - self.killed_at > _KILL_PATIENCE:
                # The sandbox did not go away: take bubblewrap down with it.
                self._signal_bwrap()
            for key, _ in self.selector.select(timeout=self._timeout(now)):
                self._handle(key.data)
        self._reap()

    def _finished(self) -> bool:
        if self.exited_at is None:
            return False
        # Everything in the namespace is dead once bubblewrap has exited, so the pipes reach
        # end of file at once; the time bound only guards against the unforeseen.
        return not self.open_streams or time.monotonic() - self.exited_at > 1

    def _timeout(self, now: float) -> float | None:
        if self.exited_at is not None:
            return 0.05
        if self.killed_at is not None:
            # Only bubblewrap's exit is awaited now, and at worst the escalation.
            return None if self.bwrap_signalled else max(self.killed_at + _KILL_PATIENCE - now, 0) + 0.01
        wake = self.deadline
        if self.final_at is not None:
            wake = min(wake, self.final_at + self.limits.exit_grace_seconds)
        if self.cancel is not None:
            wake = min(wake, now + CANCEL_CHECK_SECONDS)
        return max(wake - now, 0)

    def _handle(self, name: str) -> None:
        if name == "exit":
            self.selector.unregister(self.exit_fd)
            self.exited_at = time.monotonic()
            self._close_stdin()
        elif name == "stdin":
            self._write_stdin()
        elif name == "status":
            chunk = self._read(self.status_fd, name)
            self.status_buffer += chunk
            self._parse_status()
        elif name == "stderr":
            chunk = self._read(self.stderr_fd, name)
            self._count(chunk)
            tail = self.state.stderr_tail
            tail += chunk
            del tail[: -self.limits.stderr_tail_bytes]
        else:
            chunk = self._read(self.stdout_fd, name)
            self._count(chunk)
            if self.state.killed_for is None:
                self.stdout_buffer += chunk
                self._take_lines()

    def _read(self, fd: int, name: str) -> bytes:
        try:
            chunk = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return b""
        if not chunk:
            self.selector.unregister(fd)
            self.open_streams.discard(name)
        return chunk

    def _count(self, chunk: bytes) -> None:
        self.state.output_bytes += len(chunk)
        if self.state.output_bytes > self.limits.output_bytes:
            self.kill("output")

    def _parse_status(self) -> None:
        self.bwrap_status = _parse_json_documents(self.status_buffer)
        child_pid = self.bwrap_status.get("child-pid")
        if self.child_pidfd is None and isinstance(child_pid, int):
            try:
                self.child_pidfd = os.pidfd_open(child_pid)
            except ProcessLookupError:
                pass
            if self.killed_at is not None:
                self._signal_child()

    def _take_lines(self) -> None:
        state = self.state
        buffer = self.stdout_buffer
        while state.killed_for is None:
            end = buffer.find(b"\n")
            if (end < 0 and len(buffer) > self.limits.message_bytes) or (end > self.limits.message_bytes):
                self.kill("message_size")
                return
            if end < 0:
                return
            line = bytes(buffer[:end])
            del buffer[: end + 1]
            if state.final is not None:
                # Anything printed after the final message is ignored.
                continue
            try:
                message = storable(json.loads(line))
            except ValueError:
                message = None
            if not isinstance(message, dict):
                if line.strip():
                    state.dropped_lines += 1
                continue
            state.messages += 1
            if message.get("kind") in FINAL_KINDS:
                state.final = message
                self.final_at = time.monotonic()
                self._close_stdin()
                continue
            begun = time.monotonic()
            try:
                reply = self.on_message(message)
            except StopRun as stop:
                self.kill(stop.limit)
                return
            # Host time is not the tool's time, up to the budget.
            credit = min(time.monotonic() - begun, self.host_budget)
            self.host_budget -= credit
            self.deadline += credit
            if reply is not None:
                self.send(json.dumps(reply, separators=(",", ":")).encode() + b"\n")

    # -- ending

    def kill(self, reason: str) -> None:
        if self.state.killed_for is None and self.state.final is None:
            self.state.killed_for = reason
        if self.killed_at is not None:
            return
        self.killed_at = time.monotonic()
        self._close_stdin()
        if self.child_pidfd is not None:
            self._signal_child()
        else:
            self._signal_bwrap()

    def _signal_bwrap(self) -> None:
        """Kill the sandbox as a whole: the run's own process did not die, or is not known."""
        raise NotImplementedError

    def _reap(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Leave nothing running and nothing open, whatever happened before."""
        raise NotImplementedError

    def _signal_child(self) -> None:
        assert self.child_pidfd is not None
        try:
            signal.pidfd_send_signal(self.child_pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass

class Session(PipeSession):
    """The parent's side of one run in a bubblewrap process started for it.

    The sandboxed command runs as pid 1 of its namespace (``--as-pid-1``), and bubblewrap
    reports its host pid on the status descriptor. Killing that process empties the whole
    namespace, and bubblewrap then reaps it and exits by itself, so no zombie is left for the
    host's init to collect. Only when that pid is not known yet is bubblewrap itself killed.
    """

    def __init__(
        self,
        *,
        process: subprocess.Popen,
        status_fd: int,
        limits: Limits,
        on_message: Callable[[dict], dict | None],
        cancel: threading.Event | None = None,
    ) -> None:
        assert process.stdin and process.stdout and process.stderr
        self.process = process
        self.bwrap_pidfd = os.pidfd_open(process.pid)
        super().__init__(
            stdin_fd=process.stdin.fileno(),
            stdout_fd=process.stdout.fileno(),
            stderr_fd=process.stderr.fileno(),
            exit_fd=self.bwrap_pidfd,
            status_fd=status_fd,
            limits=limits,
            on_message=on_message,
            cancel=cancel,
        )

    def _close_stdin(self) -> None:
        if not self.stdin_open:
            return
        if self.stdin_registered:
            self.selector.unregister(self.stdin_fd)
            self.stdin_registered = False
        self.stdin_open = False
        self.pending_stdin.clear()
        if self.process.stdin is not None:
            self.process.stdin.close()

    def _signal_bwrap(self) -> None:
        self.bwrap_signalled = True
        if self.process.returncode is None:
            try:
                signal.pidfd_send_signal(self.bwrap_pidfd, signal.SIGKILL)
            except (ProcessLookupError, OSError):
                pass

    def _reap(self) -> None:
        if self.process.returncode is not None:
            return
        _, status, self.usage = os.wait4(self.process.pid, 0)
        self.process.returncode = os.waitstatus_to_exitcode(status)
        # Pick up a status document written just before bubblewrap exited.
        while "status" in self.open_streams:
            chunk = self._read(self.status_fd, "status")
            if not chunk:
                break
            self.status_buffer += chunk
        self.bwrap_status = _parse_json_documents(self.status_buffer)

    def close(self) -> None:
        """Leave nothing running and nothing open, whatever happened before."""
        if self.process.returncode is None:
            self.kill("aborted")
            # Give bubblewrap a moment to reap the command it just lost, so that no zombie
            # is left to the host's init; then make sure of it.
            readable, _, _ = select.select([self.bwrap_pidfd], [], [], _KILL_PATIENCE)
            if not readable:
                self._signal_bwrap()
            self._reap()
        self.selector.close()
        for fd in (self.bwrap_pidfd, self.child_pidfd):
            if fd is not None:
                os.close(fd)
        self.child_pidfd = None
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(value: Any) -> Any:
    """``value`` with every lone surrogate and NUL character replaced by U+FFFD.

    JSON may escape both (``"\\ud800"``, ``"\\u0000"``), and neither can be encoded as UTF-8
    or stored in a PostgreSQL text column; a sandbox's messages are cleaned as they are read, so
    nothing a tool sends can make the worker fail after the run."""
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [storable(item) for item in value]
    return value


def _parse_json_documents(data: bytes | bytearray) -> dict:
    """Merge the concatenated JSON documents bubblewrap writes on its status descriptor."""
    merged: dict = {}
    decoder = json.JSONDecoder()
    text = bytes(data).decode("utf-8", "replace")
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            return merged
        try:
            document, position = decoder.raw_decode(text, position)
        except ValueError:
            return merged
        if isinstance(document, dict):
            merged.update(document)


# Python-level traces of a limit, as they appear in a traceback or on stderr.
_ERROR_MARKS = (
    ("MemoryError", "memory"),
    ("[Errno 12] Cannot allocate memory", "memory"),
    ("[Errno 27] File too large", "file_size"),
    ("[Errno 28] No space left on device", "tmp_space"),
    ("BlockingIOError: [Errno 11]", "processes"),
)


def outcome(
    *,
    state: RunState,
    exit_code: int | None,
    stderr_tail: str,
    oom: bool,
    pids_hit: bool,
    cpu_ms: int | None,
    limits: Limits,
    duration_ms: int,
    max_rss_kb: int | None,
    cgroups: bool,
) -> SandboxOutcome:
    """How a run ended, cold or warm: what was observed, classified."""
    status, limit, hit = classify(
        state=state, exit_code=exit_code, stderr_tail=stderr_tail, oom=oom, pids_hit=pids_hit,
        cpu_ms=cpu_ms, limits=limits,
    )
    return SandboxOutcome(
        final=state.final,
        status=status,
        limit=limit,
        exit_code=exit_code,
        stderr_tail=stderr_tail,
        duration_ms=duration_ms,
        cpu_ms=cpu_ms,
        max_rss_kb=max_rss_kb,
        limits_hit=hit,
        dropped_lines=state.dropped_lines,
        cgroups=cgroups,
        messages=state.messages,
        output_bytes=state.output_bytes,
    )


def classify(
    *,
    state: RunState,
    exit_code: int | None,
    stderr_tail: str,
    oom: bool,
    pids_hit: bool,
    cpu_ms: int | None,
    limits: Limits,
) -> tuple[str, str | None, tuple[str, ...]]:
    """Turn what was observed into (status, limit, every limit seen to be reached)."""
    hit: list[str] = []
    limit_kill = state.killed_for if state.killed_for not in (None, "aborted", "exit_grace") else None
    if limit_kill:
        hit.append(limit_kill)
    if oom:
        hit.append("memory")
    if (
        state.killed_for is None
        and exit_code == 128 + signal.SIGKILL
        and cpu_ms is not None
        and cpu_ms >= limits.cpu_seconds * 500
    ):
        # Nobody on the host killed it and it used most of its CPU budget: RLIMIT_CPU did.
        # Only "most": on a loaded virtual machine the usage reported afterwards falls short
        # of the limit the kernel enforced by up to 15 % (measured here).
        hit.append("cpu_time")
    if exit_code == 128 + signal.SIGXFSZ:
        hit.append("file_size")
    if pids_hit:
        hit.append("processes")
    error_text = _error_text(state.final, stderr_tail)
    hit += [name for mark, name in _ERROR_MARKS if mark in error_text]
    hit = list(dict.fromkeys(hit))

    if state.killed_for == "cancelled":
        return "cancelled", None, tuple(hit)
    if state.killed_for == "wall_time":
        return "timed_out", "wall_time", tuple(hit)
    if limit_kill:
        # "output", "message_size", or a host limit a callback stopped the run for (StopRun).
        return "limit_exceeded", limit_kill, tuple(hit)
    if state.final is not None:
        # A final error caused by a limit is still the limit's fault; the final message is
        # kept so its traceback can be shown.
        if state.final.get("kind") == "error" and hit:
            return "limit_exceeded", hit[0], tuple(hit)
        return "ok", None, tuple(hit)
    if hit:
        return "limit_exceeded", hit[0], tuple(hit)
    return "crashed", None, tuple(hit)


def _error_text(final: dict | None, stderr_tail: str) -> str:
    """The text in which a Python-level limit error would show up.

    For a final error that is its one-line summary and the traceback's last line (the
    exception that ended the tool), not the whole traceback, whose quoted source lines could
    mention any exception name.
    """
    if final is None:
        return stderr_tail
    if final.get("kind") != "error":
        return ""
    summary = final.get("error")
    traceback = final.get("traceback")
    lines = traceback.strip().splitlines() if isinstance(traceback, str) else []
    return " ".join([summary if isinstance(summary, str) else "", lines[-1] if lines else ""])
