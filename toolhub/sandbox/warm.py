"""Warm sandboxes: a bubblewrap sandbox started ahead of need, whose long-lived parent
(``toolhub/runtime/forkserver.py``, pid 1 inside) has the runtime, pydantic and the environment's
packages imported (import only) and forks one child per call. A call then pays a ``fork`` instead of bubblewrap's and CPython's start-up.

Invariants, and what holds each:

- The toolkit's code runs only in the child made for that one call: the parent never loads a
  toolkit nor holds its source, which comes per call on the child's stdin right after the
  request line (written to ``/opt/toolkit/toolkit.py`` by the child, and removed by the parent
  after the call), so a new revision is simply the next call's source, and nothing the code
  does to module globals outlives its process.
- A call's process may be forked ahead (``WarmSandbox.prepare``, from ``WarmPool.prepare``:
  a worker does so when a task arrives, while it takes the invocation from the database), on
  an idle sandbox whose last call's tail is finished. It waits for its request with nothing of
  a toolkit in it (the source comes with the call), and serves that one call; a call with other
  limits, a call of another key, or none at all has it killed unused (``discard_prepared``,
  finished on the tail thread like a call's tail, with the same clean-up after it).
- One call at a time per sandbox (``WarmSandbox.busy``), and after each call the parent kills
  every other process of the namespace, reaps them, empties ``/tmp``, ``/dev/shm`` and
  ``/opt/toolkit`` and removes every SysV IPC object; keys and POSIX message queues cannot be
  made at all (the seccomp filter). Whatever it cannot clean, and any protocol surprise, retires
  the sandbox; so do ``max_calls`` calls and ``max_age`` seconds.
- A call whose final message is a successful result answers once its process is reaped (the
  parent reports that at once, before its clean-up), or at the result if the process still
  runs then: that outcome is "ok" whatever happens after it (``session.classify``), and its
  CPU time and peak RSS are measured outside the call as for any call (the CPU-time cgroup;
  the parent's ``wait4``, else the process's ``VmHWM`` read in the host's ``/proc``). Its tail
  (the exit grace and the kill, the parent's clean-up and report, a retirement on any
  anomaly) is finished by the sandbox's own tail thread, which only reads the call's pipes and
  the control socket and signals the call (bubblewrap's parent-death signal stays with the
  thread that started it); every next call, retirement and take from the pool waits for it
  (``WarmSandbox.settle``). Errors, limits, the sandbox's last call and every call of a sandbox
  with an egress proxy (whose report is part of the outcome) end in full before they return.
- The parent is not dumpable and pid 1 (see the fork server's docstring); the call runs under
  the same seccomp filter, so it cannot trace, read or write the parent.
- Limits per call as in a cold sandbox: rlimits set in the child; the sandbox's memory, pids
  and CPU-time cgroups, whose limits are the call's (calls are one at a time; plus the parent's
  allowance) and whose counters are read per call, with the call as the OOM killer's first
  choice; wall time, output and message size
  watched by the same session code; a call that hits one is killed (through a pidfd the parent
  passes up) without touching the sandbox.
- A sandbox is keyed by its environment, its runtime copy, the limits fixed for its life and
  its egress policy (``toolhub.sandbox.egress.endpoint.policy_key``: the allowlist and the byte
  and connection caps; no grant is a key of its own, whose sandboxes have no proxy socket at
  all). A sandbox with a policy starts its own egress proxy, bound in at ``/run/egress.sock``
  and owned by its leased uid (0600 in a 0700 directory), and stops it when it retires; after
  each call the proxy closes whatever the call left open and hands over that call's report
  (``SandboxOutcome.egress``), so reports and caps are per call, as in a cold sandbox. A changed
  grant is another key: the next call never reaches the old proxy.

The pool that keeps them between calls is ``toolhub.sandbox.warm_pool``, their host-wide memory
budget ``toolhub.sandbox.warm_budget``. Django-free; ``toolhub.toolkits.sandboxing`` decides when
to use a pool, and with which policy.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import queue
import resource
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from toolhub.sandbox import launcher
from toolhub.sandbox.cgroups import RunCgroups
from toolhub.sandbox.egress.endpoint import EgressEndpoint, start_endpoint
from toolhub.sandbox.egress.rules import EgressPolicy
from toolhub.sandbox.limits import Limits, SandboxOutcome, SandboxUnavailable
from toolhub.sandbox.session import outcome
from toolhub.sandbox.uids import UidPool
from toolhub.sandbox.warm_budget import DEFAULT_SANDBOX_ESTIMATE, MemoryBudget, WarmBudgetExceeded
from toolhub.sandbox.warm_call import CONTROL_TIMEOUT, KILL_PATIENCE, CallSession

FORKSERVER_ARGV: tuple[str, ...] = ("/opt/env/bin/python", "-I", "/opt/runtime/forkserver.py")
# Room for the largest accepted source (512 KiB) in /opt/toolkit.
_TOOLKIT_TMPFS_BYTES = 2 << 20
_READY_TIMEOUT = 30.0
# What the fork server itself may use on top of a call's memory limit (it is ~40 MiB).
_PARENT_MEMORY_ALLOWANCE = 128 << 20


class WarmSandboxBroken(SandboxUnavailable):
    """The sandbox's parent misbehaved or died; the sandbox has been retired."""


@dataclass
class WarmSandbox:
    """One warm sandbox: bubblewrap, the fork server inside, and the control socket to it."""

    interpreter_env: Path
    runtime_dir: Path
    limits: Limits
    bwrap: str = "bwrap"
    sandbox_user: str = launcher.DEFAULT_SANDBOX_USER
    uid_pool: UidPool | None = None
    # How long to wait for a free uid of the pool (None: the pool's lease_timeout).
    uid_wait: float | None = None
    # What the sandbox's own egress proxy lets through; None: no proxy, no network.
    egress: EgressPolicy | None = None
    max_calls: int = 1000
    max_age: float = 600.0
    cgroup_root: Path | None = launcher.DEFAULT_CGROUP_ROOT
    budget: MemoryBudget | None = None
    estimate: int = DEFAULT_SANDBOX_ESTIMATE
    # The PSS of its processes once ready (what the budget counts it at).
    memory_bytes: int = 0
    # The environment's packages its parent imported at start (besides the runtime and pydantic).
    preloaded: list[str] = field(default_factory=list)
    calls: int = 0
    started_at: float = 0.0
    last_used: float = 0.0
    busy: bool = False
    retired: bool = False
    problems: list[str] = field(default_factory=list)
    # What start() acquires, each with its release, undone in reverse order by retire(): the
    # memory reservation, the uid, the egress proxy, and (_spawn) the control socket, the
    # cgroups and bubblewrap.
    _resources: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, init=False, repr=False, compare=False)
    _endpoint: EgressEndpoint | None = field(default=None, init=False, repr=False, compare=False)
    # The process of the next call, forked ahead (prepare), until a call takes it.
    _prepared: _Prepared | None = field(default=None, init=False, repr=False, compare=False)
    _tail_thread: threading.Thread | None = field(default=None, init=False, repr=False, compare=False)

    def start(self) -> WarmSandbox:
        # The tails of calls that answered early, finished one after the other by a thread of
        # the sandbox's own (started with it: starting one per call would hold up the answer),
        # and what waits for them (a process to fork ahead, or one forked ahead to kill);
        # `_settled` is clear while any of them is pending.
        self._tails: queue.SimpleQueue[CallSession | _Prepared | _Ahead | None] = queue.SimpleQueue()
        self._pending = 0
        self._pending_lock = threading.Lock()
        self._tails_closed = False
        self._settled = threading.Event()
        self._settled.set()
        reservation = None
        if self.budget is not None:
            reservation = self.budget.reserve(self.estimate)
            if reservation is None:
                raise WarmBudgetExceeded("the warm sandboxes of this host use their whole memory budget")
            self._resources.callback(reservation.release)
        try:
            user = self.sandbox_user
            if self.uid_pool is not None:
                lease = self.uid_pool.acquire(wait=self.uid_wait)
                self._resources.callback(lease.release)
                user = lease.user.name
            self._identity = launcher._resolve_identity(bwrap=self.bwrap, sandbox_user=user)
            self._own_uid = self.uid_pool is not None
            if self.egress is not None:
                self._endpoint = start_endpoint(self.egress)
                # Its proxy lives exactly as long as the sandbox: nothing is left to connect to it.
                self._resources.callback(self._endpoint.stop)
                if self._identity.switch:
                    self._endpoint.hand_to(self._identity.uid, self._identity.gid)
            self._spawn()
            self.memory_bytes = self.memory()["pss"]
            if self.budget is not None and reservation is not None:
                if not self.budget.resize(reservation, self.memory_bytes):
                    raise WarmBudgetExceeded(
                        f"a warm sandbox measured {self.memory_bytes >> 20} MiB, more than the memory budget has left"
                    )
            self._tail_thread = threading.Thread(target=self._finish_tails, name="warm-sandbox-tails", daemon=True)
            self._tail_thread.start()
        except BaseException:
            self.retire()
            raise
        return self

    def memory(self) -> dict[str, int]:
        """What the sandbox's processes use now, in bytes: PSS and RSS summed over bubblewrap
        and everything below it, and its memory cgroup's usage when it has one."""
        pss = rss = 0
        for pid in _descendants(self.process.pid):
            try:
                lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
            except OSError:
                continue
            for line in lines:
                name, _, value = line.partition(":")
                if name == "Pss":
                    pss += int(value.split()[0]) << 10
                elif name == "Rss":
                    rss += int(value.split()[0]) << 10
        memory = {"pss": pss, "rss": rss}
        group = self._memory.dirs.get("memory")
        if group is not None:
            memory["cgroup"] = int((group / "memory.usage_in_bytes").read_text())
        return memory

    @property
    def uid(self) -> int:
        return self._identity.uid

    def _spawn(self) -> None:
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._resources.callback(parent_end.close)
        seccomp_fd = launcher._seccomp_fd()
        argv = self._argv(seccomp_fd=seccomp_fd)
        limits = self.limits
        # The parent's own limits: address space, files, no core; no CPU limit (it lives for many
        # calls and uses almost none), each child sets the call's own.
        rlimits = [
            (resource.RLIMIT_AS, limits.memory_bytes),
            (resource.RLIMIT_NOFILE, limits.open_files),
            (resource.RLIMIT_FSIZE, limits.file_size_bytes),
            (resource.RLIMIT_CORE, 0),
        ]

        # The sandbox's cgroups, for its whole life: bubblewrap, the parent and each call in
        # turn. Calls are one at a time, so the groups' limits are the call's (plus the parent's
        # allowance and one process for it), and their counters are read per call. Moving
        # each call into groups of its own would cost ~15 ms a call (a cgroup v1 migration
        # waits for an RCU grace period), more than the call itself. The call is the OOM
        # killer's first choice (oom_score_adj 1000).
        self._memory = RunCgroups(self.cgroup_root, limits, extra_memory=_PARENT_MEMORY_ALLOWANCE, extra_processes=1)
        self._resources.callback(self._memory.kill_and_remove)
        memory_fds = list(self._memory.fds)

        def setup() -> None:
            pid = str(os.getpid()).encode()
            for fd in memory_fds:
                os.write(fd, pid)
            for which, value in rlimits:
                resource.setrlimit(which, (value, value))

        try:
            self.process = subprocess.Popen(
                argv,
                stdin=child_end.fileno(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                close_fds=True,
                pass_fds=(seccomp_fd,),
                env=launcher._BWRAP_ENV,
                cwd="/",
                umask=0o077,
                start_new_session=True,
                preexec_fn=setup,
                **launcher._privilege_kwargs(self._identity),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxUnavailable(f"bubblewrap could not be started: {exc}") from exc
        finally:
            child_end.close()
            os.close(seccomp_fd)
            self._memory.close_fds()
        self._resources.callback(self._stop_bwrap)
        self.control = parent_end
        self._buffer = b""
        self.started_at = self.last_used = time.monotonic()
        message, _ = self._receive(_READY_TIMEOUT)
        if message is None or message.get("op") != "ready":
            stderr = self._stderr_tail()
            raise SandboxUnavailable(f"the warm sandbox did not start: {stderr or message}")
        self.preloaded = [str(name) for name in message.get("preloaded") or []]

    def _argv(self, *, seccomp_fd: int) -> list[str]:
        limits = self.limits
        args = [self._identity.bwrap, *launcher._ISOLATION_ARGS, "--hostname", "sandbox", "--clearenv"]
        for name, value in launcher._SANDBOX_ENV.items():
            args += ["--setenv", name, value]
        args += launcher._usr_args()
        prefix = launcher._interpreter_prefix(Path(self.interpreter_env))
        if prefix is not None:
            args += ["--ro-bind", str(prefix), str(prefix)]
        args += [*launcher._proc_args(), "--dev", "/dev"]
        args += [
            "--size",
            str(limits.tmp_bytes),
            "--tmpfs",
            "/tmp",
            "--size",
            str(limits.tmp_bytes),
            "--tmpfs",
            "/dev/shm",
        ]
        args += ["--ro-bind", str(self.interpreter_env), launcher.SANDBOX_ENV_PATH]
        args += ["--ro-bind", str(self.runtime_dir), launcher.SANDBOX_RUNTIME_PATH]
        args += ["--size", str(_TOOLKIT_TMPFS_BYTES), "--tmpfs", "/opt/toolkit"]
        if self._endpoint is not None:
            for host_path, sandbox_path in self._endpoint.binds():
                args += ["--ro-bind", str(host_path), sandbox_path]
        args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp"]
        args += ["--seccomp", str(seccomp_fd), "--", *FORKSERVER_ARGV]
        return args

    # -- control messages

    def _receive(self, timeout: float) -> tuple[dict | None, list[int]]:
        deadline = time.monotonic() + timeout
        fds: list[int] = []
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None, fds
            self.control.settimeout(remaining)
            try:
                data, ancillary, _flags, _address = self.control.recvmsg(1 << 16, socket.CMSG_SPACE(4 * 4))
            except (TimeoutError, OSError):
                return None, fds
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    usable = len(payload) - len(payload) % 4
                    fds += array.array("i", payload[:usable]).tolist()
            if not data:
                return None, fds
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError:
            return None, fds
        return (message if isinstance(message, dict) else None), fds

    def _stderr_tail(self) -> str:
        stream = self.process.stderr
        if stream is None:
            return ""
        os.set_blocking(stream.fileno(), False)
        try:
            data = os.read(stream.fileno(), 8192)
        except BlockingIOError:
            return ""
        return data.decode("utf-8", "replace").strip()

    # -- one call

    def call(
        self,
        *,
        source: bytes,
        request: dict,
        limits: Limits,
        on_message: Callable[[dict], dict | None],
        cancel: threading.Event | None = None,
    ) -> SandboxOutcome:
        # The last call's tail first: nothing of it may be left when this one starts.
        self.settle()
        if self.busy or self.retired:
            raise RuntimeError("a warm sandbox serves one call at a time, and none once retired")
        self.busy = True
        tail: CallSession | None = None
        egress: dict | None = None
        try:
            result, tail = self._call(source=source, request=request, limits=limits, on_message=on_message, cancel=cancel)
        finally:
            self.calls += 1
            self.last_used = time.monotonic()
            if tail is None:
                # Also after a call that raised: the next call starts with nothing counted.
                egress = self._end_egress_call()
                self._end_call()
            else:
                self._queue(tail)
        result.egress = egress
        return result

    def _end_egress_call(self) -> dict | None:
        """The egress report of the call that just ended (every process of it is gone)."""
        endpoint = self._endpoint
        if endpoint is None:
            return None
        if self.retired:
            # Stopped with the sandbox (mid-call): what it counted since the last call ended.
            return endpoint.stop()
        if endpoint.alive():
            try:
                return endpoint.handle.end_call()
            # Whatever went wrong, the proxy is not to be trusted with another call's count.
            except Exception as exc:  # noqa: BLE001
                self.problems.append(f"the egress proxy did not end the call: {exc!r}")
        else:
            self.problems.append("the egress proxy stopped")
        return endpoint.stop()

    def _end_call(self) -> None:
        self.busy = False
        if self.problems or self.calls >= self.max_calls or not self.usable():
            self.retire()

    def settle(self) -> None:
        """Wait for the last call's tail, if it answered early (the tail is bounded by the call's
        exit grace and the kill's patience), and for what was queued behind it."""
        if threading.current_thread() is not self._tail_thread:
            self._settled.wait()

    def _queue(self, item: CallSession | _Prepared | _Ahead) -> None:
        """Hand `item` to the tail thread, after whatever it has still to finish (nothing is
        left to do once the sandbox is retired and the thread has ended)."""
        with self._pending_lock:
            if not self._tails_closed:
                self._pending += 1
                self._settled.clear()
                self._tails.put(item)
                return
        self._drop(item)

    @staticmethod
    def _drop(item: CallSession | _Prepared | _Ahead | None) -> None:
        if isinstance(item, (_Prepared, CallSession)):
            item.close()

    def _finish_tails(self) -> None:
        while (item := self._tails.get()) is not None:
            try:
                if isinstance(item, _Prepared):
                    self._discard(item)
                elif isinstance(item, _Ahead):
                    if not self.busy and self._prepared is None and self.usable():
                        self._prepare_now(item.limits)
                else:
                    self._finish(item)
            except Exception as exc:  # noqa: BLE001 - the thread must go on serving the sandbox
                self.problems.append(f"the tail thread failed: {exc!r}")
            finally:
                with self._pending_lock:
                    self._pending -= 1
                    if self._pending == 0:
                        self._settled.set()
        # Retired: whatever was queued after the end is dropped (its processes died with the
        # sandbox), and nothing is queued from now on.
        left: list[CallSession | _Prepared | _Ahead] = []
        with self._pending_lock:
            self._tails_closed = True
            while True:
                try:
                    item = self._tails.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    left.append(item)
            self._pending -= len(left)
            if self._pending == 0:
                self._settled.set()
        for item in left:
            self._drop(item)

    def _finish(self, session: CallSession) -> None:
        """The tail of a call that has answered, on the sandbox's tail thread: the rest of the
        session loop (the exit grace, then the kill; the call's pipes still read and bounded),
        then the fork server's report, exactly as a call that is not answered early ends
        before it returns; any anomaly retires the sandbox."""
        try:
            session.release_stdin()
            session.cancel = None
            session.run()
        except BaseException as exc:  # noqa: BLE001 - the tail must always end the call
            self.problems.append(f"the tail of a call failed: {exc!r}")
        finally:
            try:
                session.close()
            except BaseException as exc:  # noqa: BLE001
                self.problems.append(f"the tail of a call could not be closed: {exc!r}")
            done = session.done
            if done is None:
                self.problems.append("the fork server did not report the end of the call")
            else:
                self.problems += [str(problem) for problem in done.get("problems") or []]
            self._end_call()

    def prepare(self, limits: Limits) -> bool:
        """Have the fork server fork the next call's process now, while the host is still
        finding out what the call is (a worker's take of the invocation): the fork and the
        process's start are then off the call's path. The process waits for its request;
        the next ``call`` with the same limits takes it, anything else kills it unused
        (``discard_prepared``). Nothing of a toolkit is in it until then: the source comes
        with the call. Whether it was prepared (not on a busy, retired or prepared sandbox).

        While the last call's tail is still being finished (a worker whose queue is full takes
        its next task at once), the process is forked by the tail thread right after it, never
        before: nothing of the last call is left when it starts. ``settle`` waits for both."""
        tail_pending = not self._settled.is_set()
        # Busy until its tail is finished: a call in progress is busy with nothing pending.
        if (self.busy and not tail_pending) or self.retired or self._prepared is not None or not self.usable():
            return False
        if tail_pending:
            self._queue(_Ahead(limits))
            return True
        return self._prepare_now(limits)

    def _prepare_now(self, limits: Limits) -> bool:
        try:
            self._prepared = self._fork(limits)
        except OSError as exc:
            self.problems.append(f"cannot prepare a call: {exc}")
            return False
        return True

    def _fork(self, limits: Limits) -> _Prepared:
        """Have the fork server fork a call's process with these limits ("fork"; its "started"
        is read by the call that takes the process, or by ``_discard``); the host's ends of its
        pipes. OSError (nothing left open) when it cannot be asked."""
        ours: list[int] = []
        theirs: list[int] = []
        try:
            stdin_r, stdin_w = os.pipe2(os.O_CLOEXEC)
            ours.append(stdin_w)
            theirs.append(stdin_r)
            for _ in ("stdout", "stderr"):
                read_end, write_end = os.pipe2(os.O_CLOEXEC)
                ours.append(read_end)
                theirs.append(write_end)
            child_limits = self._child_limits(limits)
            data = json.dumps({"op": "fork", "limits": child_limits}).encode() + b"\n"
            self.control.settimeout(CONTROL_TIMEOUT)
            self.control.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", theirs))])
        except OSError:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        return _Prepared(stdin_fd=ours[0], stdout_fd=ours[1], stderr_fd=ours[2], child_limits=child_limits)

    def discard_prepared(self) -> None:
        """Kill the process ``prepare`` forked, unused, on the sandbox's tail thread (the next
        call, retirement or take from the pool waits for that). One still to be forked behind a
        tail is forked and then killed in turn (it would otherwise outlive this)."""
        self.settle()
        prepared, self._prepared = self._prepared, None
        if prepared is not None:
            self._queue(prepared)

    def _discard(self, prepared: _Prepared) -> None:
        try:
            pidfd = self._expect_started()
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            finally:
                os.close(pidfd)
            done: dict = {}
            for expected in ("exited", "done"):
                reply, fds = self._receive(CONTROL_TIMEOUT + KILL_PATIENCE)
                for fd in fds:
                    os.close(fd)
                if reply is None or reply.get("op") != expected:
                    raise RuntimeError(f"the fork server did not end the prepared call: {reply}")
                done = reply
            self.problems += [str(problem) for problem in done.get("problems") or []]
        except Exception as exc:  # noqa: BLE001 - any surprise retires the sandbox
            self.problems.append(f"discarding a prepared call failed: {exc!r}")
        finally:
            prepared.close()
            if self.problems:
                self.retire()

    def _expect_started(self) -> int:
        """Read the fork server's "started" (which a "fork" is answered with) and return the
        pidfd of the call's process it brings; OSError if anything else comes."""
        reply, fds = self._receive(CONTROL_TIMEOUT)
        if reply is None or reply.get("op") != "started" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise OSError(f"the fork server did not start the call: {reply}")
        return fds[0]

    def worn_out(self, lead: float = 0.0) -> bool:
        """Whether it has served a call and has at most one left, or reaches its age within
        ``lead`` seconds (a retired one: whether it was retired for its calls or age, not for a
        problem). One that has served none is never worn out by its count, or a sandbox of one
        call would be replaced before it served it."""
        if self.problems:
            return False
        return (self.calls > 0 and self.calls + 1 >= self.max_calls) or time.monotonic() + lead - self.started_at >= self.max_age

    def usable(self) -> bool:
        return (
            not self.retired
            and not self.problems
            and self.process.poll() is None
            and (self._endpoint is None or self._endpoint.alive())
            and self.calls < self.max_calls
            and time.monotonic() - self.started_at < self.max_age
        )

    def _call(
        self,
        *,
        source: bytes,
        request: dict,
        limits: Limits,
        on_message: Callable[[dict], dict | None],
        cancel: threading.Event | None = None,
    ) -> tuple[SandboxOutcome, CallSession | None]:
        """The call's outcome, and its session when it answered early (a successful result):
        the tail still to finish."""
        started = time.monotonic()
        # The source follows the request line; the call's process writes it (runner).
        request_line = json.dumps({**request, "source_bytes": len(source)}, separators=(",", ":")).encode() + b"\n" + source
        prepared, self._prepared = self._prepared, None
        if prepared is not None and prepared.child_limits != self._child_limits(limits):
            self._discard(prepared)
            prepared = None
            if self.retired:
                raise WarmSandboxBroken("; ".join(self.problems))
        if prepared is None:
            try:
                prepared = self._fork(limits)
            except OSError as exc:
                self._broken(f"cannot hand the call over: {exc}")
        stdin_w, stdout_r, stderr_r = prepared.stdin_fd, prepared.stdout_fd, prepared.stderr_fd
        ours = [stdin_w, stdout_r, stderr_r]
        try:
            # A process forked ahead was reported while the host took the call: already read.
            pidfd = self._expect_started()
        except OSError as exc:
            prepared.close()
            self._broken(str(exc))
        groups = self._memory
        oom_before, pids_before, cpu_before = groups.oom_kills(), groups.pids_limit_hits(), groups.cpu_ms()
        session: CallSession | None = None
        early = False
        try:
            session = CallSession(
                sandbox=self,
                stdin_fd=stdin_w,
                stdout_fd=stdout_r,
                stderr_fd=stderr_r,
                pidfd=pidfd,
                limits=limits,
                on_message=on_message,
                cancel=cancel,
                # The last call a sandbox serves ends in full: it is retired once it returns.
                # So does every call of a sandbox with a proxy: the call's egress report, in its
                # outcome, is taken once every process of the call is gone.
                answer_early=self.calls + 1 < self.max_calls and self._endpoint is None,
            )
            ours = []
            session.send(request_line)
            session.run()
            if session.answered_early():
                session.drain_stderr()
                # The drain may have hit the output limit: the call then ends in full.
                early = session.answered_early()
                if not early:
                    session.release_stdin()
                    session.run()
            duration_ms = int((time.monotonic() - started) * 1000)
            oom = groups.oom_kills() > oom_before
            pids_hit = groups.pids_limit_hits() > pids_before
            cpu_after = groups.cpu_ms()
        finally:
            if session is None:
                os.close(pidfd)
            elif not early:
                session.close()
            for fd in ours:
                os.close(fd)
        if not early:
            if session.done is None:
                self._broken("the fork server did not report the end of the call")
            self.problems += [str(problem) for problem in session.done.get("problems") or []]
        # What the fork server's wait4 measured once the process was reaped, else (a call that
        # answered while its process still ran) what the host read in /proc then.
        report = session.exit_report or {}
        status = report.get("status")
        exit_code = os.waitstatus_to_exitcode(status) if isinstance(status, int) else None
        if exit_code is not None and exit_code < 0:
            exit_code = 128 - exit_code
        live_cpu_ms, live_rss_kb = session.live_usage or (None, None)
        if cpu_after is not None and cpu_before is not None:
            cpu_ms: int | None = cpu_after - cpu_before
        elif session.exit_report is not None:
            cpu_ms = int((float(report.get("utime") or 0) + float(report.get("stime") or 0)) * 1000)
        else:
            cpu_ms = live_cpu_ms
        maxrss = report.get("maxrss")
        state = session.state
        result = outcome(
            state=state,
            exit_code=exit_code,
            stderr_tail=state.stderr_tail.decode("utf-8", "replace"),
            oom=oom,
            pids_hit=pids_hit,
            cpu_ms=cpu_ms,
            limits=limits,
            duration_ms=duration_ms,
            max_rss_kb=maxrss if isinstance(maxrss, int) else live_rss_kb,
            cgroups=groups.active,
        )
        # A successful result is "ok" whatever happens after it (session.classify): the caller
        # has it now, and the tail is finished before the sandbox takes another call.
        return result, session if early else None

    def _child_limits(self, limits: Limits) -> dict[str, int]:
        # bubblewrap and the fork server are two more processes of the uid; one more where the
        # call's pids cgroup is to stop a fork bomb first (and say so).
        pids_cgroup = self.cgroup_root is not None and (Path(self.cgroup_root) / "pids").is_dir()
        if self._own_uid:
            nproc = limits.processes + (3 if pids_cgroup else 2)
        else:
            nproc = 8 * limits.processes if pids_cgroup else limits.processes + 2
        return {
            "RLIMIT_CPU": limits.cpu_seconds,
            "RLIMIT_AS": limits.memory_bytes,
            "RLIMIT_NPROC": nproc,
            "RLIMIT_NOFILE": limits.open_files,
            "RLIMIT_FSIZE": limits.file_size_bytes,
            "RLIMIT_CORE": 0,
        }

    def _broken(self, reason: str) -> NoReturn:
        self.problems.append(reason)
        self.retire()
        raise WarmSandboxBroken(reason)

    def retire(self) -> None:
        """Stop the sandbox for good and give its uid back."""
        # A tail being finished still uses the control socket (unless this is its thread).
        self.settle()
        if self.retired:
            return
        self.retired = True
        prepared, self._prepared = self._prepared, None
        if prepared is not None:
            prepared.close()
        if self._tail_thread is not None:
            self._tails.put(None)
        self._resources.close()

    def _stop_bwrap(self) -> None:
        """Kill bubblewrap and everything below it, and reap it: first its only child, the
        sandbox's pid 1, which bubblewrap then reaps (left to the host's init, it could stay a
        zombie for seconds, its uid not leased again meanwhile: toolhub.sandbox.uids)."""
        process = self.process
        if process.poll() is None:
            child = launcher.only_child(process.pid)
            if child is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=KILL_PATIENCE)
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.kill()
        process.wait()
        if process.stderr is not None:
            process.stderr.close()


@dataclass
class _Ahead:
    """A process to fork ahead once the last call's tail is finished (WarmSandbox.prepare)."""

    limits: Limits


@dataclass
class _Prepared:
    """The host's ends of the pipes of a call's process forked ahead (WarmSandbox.prepare)."""

    stdin_fd: int
    stdout_fd: int
    stderr_fd: int
    child_limits: dict[str, int]

    def close(self) -> None:
        for fd in (self.stdin_fd, self.stdout_fd, self.stderr_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (by ``/proc/<pid>/task/<tid>/children``)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                todo += [int(child) for child in Path(f"/proc/{current}/task/{task}/children").read_text().split()]
            except OSError:
                continue
    return found
