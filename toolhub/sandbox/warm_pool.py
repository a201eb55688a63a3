"""A worker process's warm sandboxes (``toolhub.sandbox.warm``), kept idle between calls and
keyed by what a sandbox is fixed to for its life; see ``WarmPool``.

Django-free; ``toolhub.toolkits.sandboxing`` makes one pool per worker process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from toolhub.sandbox import launcher
from toolhub.sandbox.egress.endpoint import PolicyKey, policy_key
from toolhub.sandbox.egress.rules import EgressPolicy
from toolhub.sandbox.limits import Limits, SandboxOutcome
from toolhub.sandbox.uids import UidPool, UidsBusy
from toolhub.sandbox.warm import WarmSandbox
from toolhub.sandbox.warm_budget import DEFAULT_SANDBOX_ESTIMATE, MemoryBudget, WarmBudgetExceeded

logger = logging.getLogger(__name__)

# How long a new warm sandbox waits for a free uid before it stops an idle one of its pool.
_UID_PATIENCE = 1.0
# How long a call waits for the successor being started for its key before it starts its own.
_SUCCESSOR_PATIENCE = 60.0



# A warm sandbox serves one environment, one runtime copy, the limits that are fixed for its
# life (its cgroups, its tmpfs sizes, the rlimits a call can only lower) and one egress policy
# (its proxy; None for none); CPU and wall time, output and message sizes are each call's own.
_Key = tuple[str, str, int, int, int, int, int, PolicyKey | None]


def _key(interpreter_env: Path, runtime_dir: Path, limits: Limits, egress: EgressPolicy | None) -> _Key:
    return (
        str(Path(interpreter_env).resolve()),
        str(Path(runtime_dir).resolve()),
        limits.memory_bytes,
        limits.processes,
        limits.tmp_bytes,
        limits.open_files,
        limits.file_size_bytes,
        None if egress is None else policy_key(egress),
    )


@dataclass
class WarmPool:
    """Warm sandboxes of one worker process, keyed by environment, runtime copy and egress policy.

    ``size`` sandboxes at most per key, idle ones stopped after ``idle_timeout`` seconds; each
    retired after ``max_calls`` calls or ``max_age`` seconds, or at the first anomaly. With a
    ``budget``, a sandbox that would not fit stops this pool's idle sandboxes of other keys,
    least recently used first, to make room; ``WarmBudgetExceeded`` if that is not enough.

    Every sandbox holds a uid of the host's pool for its life, and every cold run needs one
    too: a process keeps at most ``max_idle`` idle sandboxes (of all keys), so the worker
    processes of a host cannot hold every uid between them, and a sandbox that finds no free
    uid stops this pool's idle one used longest ago before it waits for another process's.

    With the reaper running (``start_reaper``), a sandbox with one call left, or that would reach
    its age before the reaper's next pass, gets its successor started ahead, on the reaper's
    thread (a sandbox dies with the thread that started it, and that one lives as long as the
    pool); once it is ready it takes the old one's place among the idle ones. A call then does
    not pay a start for a retirement, and one that finds no idle sandbox while a successor
    starts waits for it instead of starting a second.
    """

    size: int = 2
    max_idle: int = 4
    idle_timeout: float = 300.0
    max_calls: int = 1000
    max_age: float = 600.0
    bwrap: str = "bwrap"
    sandbox_user: str = launcher.DEFAULT_SANDBOX_USER
    uid_pool: UidPool | None = None
    cgroup_root: Path | None = launcher.DEFAULT_CGROUP_ROOT
    budget: MemoryBudget | None = None
    # What a sandbox of a key none was measured for yet reserves.
    estimate: int = DEFAULT_SANDBOX_ESTIMATE
    _idle: dict[_Key, list[WarmSandbox]] = field(default_factory=dict)
    # What a sandbox of each key measured last: the estimate the next one reserves.
    _costs: dict[_Key, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    started: int = 0
    _reaper: threading.Thread | None = None
    _stopped: threading.Event = field(default_factory=threading.Event)
    # The key and limits of the last call (what `prepare` guesses the next one needs), and
    # the idle sandbox whose next call's process is forked ahead.
    _last: tuple[_Key, Limits] | None = None
    _prepared: WarmSandbox | None = None
    # Successors to start on the reaper's thread (the sandbox each replaces, by key), and the
    # keys one is being started for, each with what a call waiting for it waits on.
    _successors: dict[_Key, WarmSandbox] = field(default_factory=dict)
    _starting: dict[_Key, threading.Event] = field(default_factory=dict)
    _wake: threading.Event = field(default_factory=threading.Event)
    _reap_interval: float = 0.0
    # When a successor's start last failed, by key: not tried again within the reaper's interval.
    _failed: dict[_Key, float] = field(default_factory=dict)

    def run(
        self,
        *,
        interpreter_env: Path,
        runtime_dir: Path,
        source_path: Path,
        request: dict,
        limits: Limits,
        on_message: Callable[[dict], dict | None],
        cancel: threading.Event | None = None,
        egress: EgressPolicy | None = None,
    ) -> SandboxOutcome:
        """Like ``launcher.run_sandboxed`` (no extra binds), on a warm sandbox; with ``egress``,
        on one whose proxy applies that policy (the report is ``SandboxOutcome.egress``, and
        ``request`` should name the socket: ``{"egress": {"socket_path": SANDBOX_SOCKET}}``)."""
        source = Path(source_path).read_bytes()
        key = _key(interpreter_env, runtime_dir, limits, egress)
        if self._last is not None and self._last[0] != key:
            self.unprepare()
        self._last = (key, limits)
        sandbox = self._take(
            key, interpreter_env=Path(interpreter_env), runtime_dir=Path(runtime_dir), limits=limits, egress=egress
        )
        if sandbox is self._prepared:
            self._prepared = None
        try:
            return sandbox.call(source=source, request=request, limits=limits, on_message=on_message, cancel=cancel)
        finally:
            self._give_back(key, sandbox)

    def prepare(self) -> bool:
        """Fork the process of the next call ahead (WarmSandbox.prepare) on an idle sandbox of
        the key of the last call: the likeliest one for a worker that was just told of work but
        has yet to read what it is. Its `run` with that key takes it; a run with another key,
        or `unprepare`, kills it unused. Never starts a sandbox. Whether one was prepared."""
        last = self._last
        if last is None or self._prepared is not None:
            return False
        key, limits = last
        # Under the lock: the reaper's thread may retire an idle sandbox (and replace it).
        with self._lock:
            idle = self._idle.get(key, [])
            sandbox = idle[-1] if idle else None
            if sandbox is None or not sandbox.prepare(limits):
                return False
        self._prepared = sandbox
        return True

    def unprepare(self) -> None:
        """Kill the process `prepare` forked, if no call took it."""
        sandbox, self._prepared = self._prepared, None
        if sandbox is not None:
            with self._lock:
                sandbox.discard_prepared()

    def warm(
        self, *, interpreter_env: Path, runtime_dir: Path, limits: Limits, egress: EgressPolicy | None = None
    ) -> None:
        """Start one sandbox for this environment and egress policy ahead of need (unless one
        is idle already)."""
        key = _key(interpreter_env, runtime_dir, limits, egress)
        with self._lock:
            if self._idle.get(key):
                return
        sandbox = self._start(
            key, interpreter_env=Path(interpreter_env), runtime_dir=Path(runtime_dir), limits=limits, egress=egress
        )
        self._give_back(key, sandbox)

    def _take(
        self, key: _Key, *, interpreter_env: Path, runtime_dir: Path, limits: Limits, egress: EgressPolicy | None
    ) -> WarmSandbox:
        self.reap()
        while True:
            with self._lock:
                idle = self._idle.get(key, [])
                starting = self._starting.get(key)
                if not idle and starting is None:
                    break
                sandbox = self._pop_idle(idle) if idle else None
            if sandbox is None:
                # Its successor is being started: wait for it, then look again (the wait is
                # bounded; if the start failed, this call starts one).
                if starting is None or not starting.wait(_SUCCESSOR_PATIENCE):
                    break
                continue
            # Its last call's tail may still be finishing, and may retire it.
            sandbox.settle()
            if sandbox.usable():
                return sandbox
            sandbox.retire()
        return self._start(key, interpreter_env=interpreter_env, runtime_dir=runtime_dir, limits=limits, egress=egress)

    def _pop_idle(self, idle: list[WarmSandbox]) -> WarmSandbox:
        """Take one of a key's idle sandboxes (under the lock): the one whose next call's process
        is forked ahead, if it is of this key."""
        ahead = [index for index, sandbox in enumerate(idle) if sandbox is self._prepared]
        return idle.pop(ahead[0] if ahead else -1)

    def _start(
        self, key: _Key, *, interpreter_env: Path, runtime_dir: Path, limits: Limits, egress: EgressPolicy | None
    ) -> WarmSandbox:
        # While this pool has an idle sandbox that could give its uid up, a uid is waited for only
        # briefly: long enough for one just given back (its processes may still be exiting, or
        # awaiting their reaping by the host's init) but not for another process's.
        uid_wait: float | None = _UID_PATIENCE
        while True:
            if uid_wait is not None and not self.idle():
                uid_wait = None
            try:
                sandbox = WarmSandbox(
                    interpreter_env=interpreter_env,
                    runtime_dir=runtime_dir,
                    limits=limits,
                    bwrap=self.bwrap,
                    sandbox_user=self.sandbox_user,
                    uid_pool=self.uid_pool,
                    uid_wait=uid_wait,
                    egress=egress,
                    max_calls=self.max_calls,
                    max_age=self.max_age,
                    cgroup_root=self.cgroup_root,
                    budget=self.budget,
                    estimate=self._costs.get(key, self.estimate),
                ).start()
            except WarmBudgetExceeded:
                if not self._stop_least_recent():
                    raise
                continue
            except UidsBusy:
                if uid_wait is None:
                    raise
                if not self._stop_least_recent():
                    uid_wait = None
                continue
            self.started += 1
            self._costs[key] = sandbox.memory_bytes
            return sandbox

    def _stop_least_recent(self) -> bool:
        """Stop the idle sandbox used longest ago (to make room in the budget, or free its
        uid); False if none."""
        with self._lock:
            idle = [(sandbox.last_used, key, sandbox) for key, sandboxes in self._idle.items() for sandbox in sandboxes]
            if not idle:
                return False
            _, key, sandbox = min(idle, key=lambda entry: entry[0])
            self._idle[key].remove(sandbox)
        sandbox.retire()
        return True

    def _give_back(self, key: _Key, sandbox: WarmSandbox) -> None:
        if not sandbox.usable():
            sandbox.retire()
            if sandbox.worn_out():
                self._replace(key, sandbox)
            return
        with self._lock:
            idle = self._idle.setdefault(key, [])
            # Not into a closed pool (a successor that was being started when it closed).
            kept = not self._stopped.is_set() and len(idle) < self.size
            if kept:
                idle.append(sandbox)
        if not kept:
            sandbox.retire()
        elif sandbox.worn_out():
            # One call left: its successor is started now, to take its place.
            self._replace(key, sandbox)
        while len(self.idle()) > self.max_idle and self._stop_least_recent():
            pass

    def start_reaper(self, interval: float = 30.0) -> None:
        """Reap idle sandboxes every ``interval`` seconds from a daemon thread, even while no
        call comes, and start the successors of retired ones on it (``_replace``): the thread
        lives as long as the pool, and so do the sandboxes it starts."""
        if self._reaper is not None:
            return
        self._reap_interval = interval

        def loop() -> None:
            while not self._stopped.is_set():
                self._wake.wait(interval)
                self._wake.clear()
                if self._stopped.is_set():
                    break
                self.reap()
                self._start_successors()

        self._reaper = threading.Thread(target=loop, name="warm-sandbox-reaper", daemon=True)
        self._reaper.start()

    def reap(self) -> None:
        """Stop idle sandboxes past their idle time, age or call count. With the reaper
        running, one used within its idle time that is worn out (``WarmSandbox.worn_out``:
        within the reaper's interval of its age, here) gets its successor started
        (``_replace``), and one retired for its calls or age while in use too."""
        now = time.monotonic()
        lead = self._lead()
        replace = []
        with self._lock:
            for key, idle in list(self._idle.items()):
                keep = []
                for sandbox in idle:
                    recent = now - sandbox.last_used < self.idle_timeout
                    if sandbox.usable() and recent:
                        keep.append(sandbox)
                    else:
                        sandbox.retire()
                    if recent and sandbox.worn_out(lead):
                        replace.append((key, sandbox))
                self._idle[key] = keep
        for key, sandbox in replace:
            self._replace(key, sandbox)

    def _lead(self) -> float:
        """How far ahead of its age a sandbox's successor is started: the reaper's interval, at
        most half the age (or every new one would be due at once)."""
        return min(self._reap_interval, self.max_age / 2) if self._reaper is not None else 0.0

    def _replace(self, key: _Key, old: WarmSandbox) -> None:
        """Have the reaper's thread start a successor for a worn-out sandbox of `key` (nothing
        without the reaper: a sandbox dies with the thread that started it)."""
        if self._reaper is None or self._stopped.is_set():
            return
        with self._lock:
            # One successor per key at a time; once one failed to start, none for a while.
            failed = self._failed.get(key)
            if key in self._starting or (failed is not None and time.monotonic() - failed < self._reap_interval):
                return
            self._successors[key] = old
            self._starting[key] = threading.Event()
        self._wake.set()

    def _start_successors(self) -> None:
        """On the reaper's thread: start the successors asked for (unless a key has a sandbox
        idle that is not worn out by now), put each in the place of its key's worn-out idle
        ones, and wake the calls waiting for them."""
        while True:
            lead = self._lead()
            with self._lock:
                if not self._successors:
                    return
                key, old = self._successors.popitem()
                needed = not any(_fresh(s, lead) for s in self._idle.get(key, []))
            try:
                if needed and not self._stopped.is_set():
                    sandbox = self._start(
                        key, interpreter_env=old.interpreter_env, runtime_dir=old.runtime_dir,
                        limits=old.limits, egress=old.egress,
                    )
                    # Reaped as its predecessor would have been, its idle time after that one's
                    # last call.
                    sandbox.last_used = old.last_used
                    self._take_place(key, sandbox)
            except Exception as exc:  # noqa: BLE001 - the next call starts one itself
                logger.warning("could not start a warm sandbox ahead of need: %s", exc)
                with self._lock:
                    self._failed[key] = time.monotonic()
            finally:
                with self._lock:
                    waiting = self._starting.pop(key, None)
                if waiting is not None:
                    waiting.set()

    def _take_place(self, key: _Key, sandbox: WarmSandbox) -> None:
        """A successor retires its key's worn-out idle sandboxes (under the lock, as `reap`
        does: `prepare` and `unprepare` hold it too) and is given back in their place."""
        lead = self._lead()
        with self._lock:
            idle = self._idle.setdefault(key, [])
            for worn in [s for s in idle if not _fresh(s, lead)]:
                idle.remove(worn)
                worn.retire()
        self._give_back(key, sandbox)

    def idle(self) -> list[WarmSandbox]:
        with self._lock:
            return [sandbox for idle in self._idle.values() for sandbox in idle]

    def close(self) -> None:
        self._stopped.set()
        self._wake.set()
        with self._lock:
            self._successors.clear()
            for waiting in self._starting.values():
                waiting.set()
            self._starting.clear()
            for idle in self._idle.values():
                for sandbox in idle:
                    sandbox.retire()
            self._idle.clear()


def _fresh(sandbox: WarmSandbox, lead: float) -> bool:
    """Whether an idle sandbox can serve on without a successor (`WarmPool._take_place`)."""
    return sandbox.usable() and not sandbox.worn_out(lead)
