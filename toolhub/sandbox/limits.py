"""What a sandboxed run may use and how it ended: the types the launcher, its session and its
cgroups share."""

from __future__ import annotations

from dataclasses import dataclass

# Objects whose ``kind`` is one of these end a run (see ``toolhub.sandbox.launcher``).
FINAL_KINDS = frozenset({"result", "error", "introspection"})


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot be used; the message says what to install or configure."""


class StopRun(Exception):
    """Raised by an ``on_message`` callback to end the run at once: the sandbox is killed and
    the run ends as ``limit_exceeded`` with ``limit`` (the host's own limits, such as the
    number of events an invocation may send)."""

    def __init__(self, limit: str) -> None:
        super().__init__(limit)
        self.limit = limit


@dataclass(frozen=True)
class Limits:
    """Resource limits for one sandboxed run. Sizes are in bytes, times in seconds."""

    cpu_seconds: int = 10
    wall_seconds: float = 30
    memory_bytes: int = 1 << 30
    processes: int = 64
    open_files: int = 256
    file_size_bytes: int = 16 << 20
    output_bytes: int = 8 << 20
    tmp_bytes: int = 64 << 20
    # The longest single stdout line (one protocol message, the final result included).
    message_bytes: int = 4 << 20
    # How much of stderr is kept, from its end.
    stderr_tail_bytes: int = 32 << 10
    # Time spent in ``on_message`` that is not charged to ``wall_seconds``, in total.
    host_wait_seconds: float = 600
    # How long the command may take to exit after its final message before it is killed.
    exit_grace_seconds: float = 2


@dataclass
class SandboxOutcome:
    """How a sandboxed run ended."""

    final: dict | None
    status: str
    limit: str | None
    exit_code: int | None
    stderr_tail: str
    duration_ms: int
    cpu_ms: int | None
    max_rss_kb: int | None
    # Every limit seen to be reached during the run, ``limit`` first when set.
    limits_hit: tuple[str, ...] = ()
    dropped_lines: int = 0
    # Whether per-run cgroups (memory, pids) were in force.
    cgroups: bool = False
    messages: int = 0
    output_bytes: int = 0
    # What the egress proxy reports for this run (hosts, bytes, refusals), when it had one.
    egress: dict | None = None

