# ruff: noqa: F811 - the fixtures imported from tests/sandbox/test_warm.py
"""A warm call's process forked ahead (WarmSandbox.prepare, WarmPool.prepare): while a worker
takes the invocation from the database, the fork server already forks the process its call
will run in, with nothing of a toolkit in it; the call brings its source. Real sandboxes, as in
tests/sandbox/test_warm.py: the call runs the source it brings, in the process forked ahead
and in no other; one that no call takes is killed and leaves nothing; a call of another
environment, or with other limits, never gets it; and the worker forks one for each message.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

pytest_plugins = ["tests.sandbox_fixtures"]

from tests.sandbox.test_warm import ECHO, LIMITS, _only_sandbox, _result, call, pool  # noqa: E402,F401 - fixtures
from toolhub.sandbox.warm import WarmSandbox, _Ahead, _descendants  # noqa: E402
from toolhub.sandbox.warm_pool import WarmPool  # noqa: E402

pytestmark = pytest.mark.sandbox

WHO = """
import os, resource

class Tools:
    def go(self) -> list:
        return ["@NAME@", os.getpid(), resource.getrlimit(resource.RLIMIT_CPU)[0]]
"""


def _who(name: str) -> str:
    return WHO.replace("@NAME@", name)


def _inside(sandbox: WarmSandbox, *, count: int, timeout: float = 2.0) -> list[int]:
    """The processes below bubblewrap (the fork server first), once there are `count`."""
    deadline = time.monotonic() + timeout
    while True:
        below = _descendants(sandbox.process.pid)[1:]
        if len(below) == count or time.monotonic() > deadline:
            return below
        time.sleep(0.01)


def _namespace_pid(host_pid: int) -> int:
    for line in Path(f"/proc/{host_pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    raise AssertionError(f"no NSpid for {host_pid}")


def _prepared_after_a_call(call, pool: WarmPool) -> tuple[WarmSandbox, int, int]:
    """One call, then the next call's process forked ahead on its sandbox: the sandbox, and
    the host pids of its fork server and of that process."""
    _result(call(_who("first")))
    sandbox = _only_sandbox(pool)
    sandbox.settle()
    assert pool.prepare()
    forkserver, ahead = _inside(sandbox, count=2)
    return sandbox, forkserver, ahead


def test_a_call_runs_the_source_it_brings_in_the_process_forked_ahead(call, pool: WarmPool) -> None:
    assert _result(call(_who("first")))[0] == "first"
    sandbox = _only_sandbox(pool)
    sandbox.settle()
    assert pool.prepare()
    forkserver, ahead = _inside(sandbox, count=2)
    assert _descendants(sandbox.process.pid)[1] == forkserver
    ahead_pid = _namespace_pid(ahead)  # read while it lives: after its call it may be gone
    # A new revision's source after the process was forked: the call runs it, in that process.
    name, pid, _cpu = _result(call(_who("second")))
    assert (name, pid) == ("second", ahead_pid)
    assert _only_sandbox(pool) is sandbox and sandbox.calls == 2 and pool.started == 1
    # Nothing of it is left, and the next call is a fresh fork.
    assert _inside(sandbox, count=1) == [forkserver]
    assert _result(call(_who("third")))[1] != pid


def test_a_process_forked_ahead_that_no_call_takes_is_killed_and_leaves_nothing(call, pool: WarmPool) -> None:
    sandbox, forkserver, _ahead = _prepared_after_a_call(call, pool)

    pool.unprepare()
    sandbox.settle()
    assert _inside(sandbox, count=1) == [forkserver]
    assert sandbox.usable() and not sandbox.problems and sandbox.calls == 1
    assert _result(call(_who("next")))[0] == "next"
    assert _only_sandbox(pool) is sandbox and pool.started == 1


SLOW_EXIT = """
import atexit, os, time

class Tools:
    def go(self) -> int:
        # The answer comes at the result; the process then takes a while to exit (the tail): long
        # enough that a loaded machine still looks at it before it ends (0.3 s was not, in CI).
        atexit.register(time.sleep, 1.5)
        return os.getpid()
"""


def test_a_process_forked_ahead_behind_the_last_call_s_tail_starts_only_once_the_tail_is_done(
    call, pool: WarmPool
) -> None:
    # A worker whose queue is full takes its next task while the last call's tail is still being
    # finished: the process is forked ahead, but only once nothing of the last call is left.
    _result(call(ECHO, arguments={"text": "x"}))
    sandbox = _only_sandbox(pool)
    sandbox.settle()
    last = _result(call(SLOW_EXIT))
    assert not sandbox._settled.is_set(), "the tail should still be pending"
    assert pool.prepare()
    forkserver, exiting = _inside(sandbox, count=2)
    assert str(_namespace_pid(exiting)) == str(last)
    assert len(_descendants(sandbox.process.pid)[1:]) == 2  # nothing forked ahead yet
    sandbox.settle()
    forkserver_after, ahead = _inside(sandbox, count=2)
    assert forkserver_after == forkserver and ahead != exiting
    ahead_pid = _namespace_pid(ahead)
    name, pid, _cpu = _result(call(_who("next")))
    assert (name, pid) == ("next", ahead_pid) and pool.started == 1


def test_what_reaches_a_retired_sandbox_s_tail_thread_is_dropped_and_never_waited_for(call, pool: WarmPool) -> None:
    # A tail that retires its sandbox ends the tail thread, while the worker may just have asked
    # for a process forked ahead behind that tail: it must neither be forked nor be waited for.
    _result(call(ECHO, arguments={"text": "x"}))
    sandbox = _only_sandbox(pool)
    sandbox.settle()
    sandbox.retire()
    sandbox._tail_thread.join(5)
    assert not sandbox._tail_thread.is_alive()
    sandbox._queue(_Ahead(LIMITS))
    settled = threading.Thread(target=sandbox.settle, daemon=True)
    settled.start()
    settled.join(5)
    assert not settled.is_alive(), "settle waited for work no thread will do"
    assert sandbox._prepared is None and sandbox.process.poll() is not None


def test_preparing_starts_no_sandbox_and_forks_one_process_at_a_time(call, pool: WarmPool) -> None:
    assert not pool.prepare()  # no call yet: nothing to guess from
    assert pool.started == 0 and pool.idle() == []
    _result(call(_who("first")))
    sandbox = _only_sandbox(pool)
    sandbox.settle()
    assert pool.prepare()
    assert not pool.prepare() and not sandbox.prepare(LIMITS)
    assert len(_inside(sandbox, count=2)) == 2
    pool.unprepare()
    sandbox.settle()
    assert len(_inside(sandbox, count=1)) == 1


def test_a_call_of_another_environment_never_gets_the_process_forked_ahead(
    call, pool: WarmPool, sandbox_env: Path, sandbox_runtime: Path, tmp_path: Path
) -> None:
    sandbox, forkserver, _ahead = _prepared_after_a_call(call, pool)

    # Other limits that key a sandbox: another sandbox, and the process forked ahead is killed.
    other = replace(LIMITS, processes=LIMITS.processes + 1)
    assert _result(call(_who("other"), limits=other))[0] == "other"
    assert pool.started == 2 and pool._prepared is None
    sandbox.settle()
    # The first sandbox may have been stopped for the second one's uid (a uid of the last
    # test's sandboxes can still look busy): then nothing of it is left at all.
    if sandbox.retired:
        assert sandbox.process.poll() is not None
    else:
        assert _inside(sandbox, count=1) == [forkserver]
        assert sandbox.usable() and not sandbox.problems and sandbox.calls == 1


def test_a_call_with_other_limits_on_the_same_sandbox_gets_a_process_of_its_own(call, pool: WarmPool) -> None:
    # The CPU time limit does not key a sandbox, but it is set in the process when it is forked.
    sandbox, _forkserver, ahead = _prepared_after_a_call(call, pool)
    ahead_pid = _namespace_pid(ahead)

    name, pid, cpu = _result(call(_who("stricter"), limits=replace(LIMITS, cpu_seconds=2)))
    assert (name, cpu) == ("stricter", 2) and pid != ahead_pid
    assert _only_sandbox(pool) is sandbox and sandbox.calls == 2 and not sandbox.problems


def test_a_retired_sandbox_takes_its_process_forked_ahead_with_it(call, pool: WarmPool) -> None:
    sandbox, _forkserver, _ahead = _prepared_after_a_call(call, pool)
    pool.close()
    assert sandbox.retired and sandbox.process.poll() is not None
    # The pool fixture checks that no process of the sandbox users is left.


@pytest.mark.django_db(transaction=True)
def test_the_worker_forks_a_call_s_process_while_it_takes_the_invocation(upload, build, alice, settings, monkeypatch) -> None:
    from tests.sandbox_fixtures import require_sandbox, wait_for_no_sandbox_processes
    from toolhub.runs import engine
    from toolhub.runs.models import Invocation, RunStatus
    from toolhub.runs.services import invocation_create
    from toolhub.runs.tasks import run_invocation
    from toolhub.toolkits import sandboxing

    require_sandbox()
    settings.TOOLHUB_SANDBOX_WARM = 1
    toolkit = build(upload(alice, _who("worker")))

    def run() -> Invocation:
        invocation = invocation_create(toolkit=toolkit, tool="go", arguments={}, user=alice)
        run_invocation.run(str(invocation.id))
        invocation.refresh_from_db()
        assert invocation.status == RunStatus.SUCCEEDED, invocation.error
        return invocation

    try:
        run()
        pool = sandboxing.warm_pool()
        assert pool is not None
        [sandbox] = pool.idle()
        sandbox.settle()
        forkserver = _inside(sandbox, count=1)[0]
        prepared: list[bool] = []
        prepare = WarmSandbox.prepare
        monkeypatch.setattr(WarmSandbox, "prepare", lambda self, limits: prepared.append(prepare(self, limits)) or prepared[-1])

        second = run()
        assert prepared == [True] and pool._prepared is None and sandbox.calls == 2
        sandbox.settle()
        # A message whose invocation another message's run already took: the process forked
        # for it is killed unused.
        engine.run_next(str(second.id))
        assert prepared == [True, True] and pool._prepared is None
        sandbox.settle()
        assert _inside(sandbox, count=1) == [forkserver] and sandbox.calls == 2 and not sandbox.problems
    finally:
        pool = sandboxing.warm_pool()
        if pool is not None:
            pool.close()
        sandboxing._warm = None
        assert wait_for_no_sandbox_processes() == []
