"""Warm sandboxes (toolhub.sandbox.warm) against hostile toolkits, for real: what a call can
leave for the next call on the same sandbox, whether it can reach the long-lived parent, limits
per call, and new code on every call.

Needs what tests/sandbox/test_isolation.py needs plus the uid pool (scripts/system-setup).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

pytest_plugins = ["tests.sandbox_fixtures"]

from tests.sandbox_fixtures import POOL_FIRST, REPO, require_sandbox, wait_for_no_sandbox_processes  # noqa: E402
from toolhub.sandbox.launcher import Limits, SandboxOutcome  # noqa: E402
from toolhub.sandbox.uids import UidPool, uids_with_processes  # noqa: E402
from toolhub.sandbox.warm import WarmSandbox  # noqa: E402
from toolhub.sandbox.warm_budget import MemoryBudget, WarmBudgetExceeded  # noqa: E402
from toolhub.sandbox.warm_pool import WarmPool  # noqa: E402

pytestmark = pytest.mark.sandbox

LIMITS = Limits(
    cpu_seconds=3,
    wall_seconds=5,
    memory_bytes=512 << 20,
    processes=32,
    open_files=64,
    file_size_bytes=1 << 20,
    output_bytes=1 << 20,
    tmp_bytes=4 << 20,
    message_bytes=64 << 10,
    exit_grace_seconds=0.5,
)


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[WarmPool]:
    require_sandbox()
    warm = WarmPool(size=1, uid_pool=UidPool(first=POOL_FIRST, size=4, lock_dir=tmp_path / "uid-locks"))
    yield warm
    warm.close()
    left = wait_for_no_sandbox_processes()
    assert left == [], f"processes of the sandbox users survived the test: {left}"


@pytest.fixture
def call(tmp_path: Path, sandbox_env: Path, sandbox_runtime: Path, pool: WarmPool) -> Callable[..., SandboxOutcome]:
    def _call(
        source: str,
        *,
        arguments: dict | None = None,
        limits: Limits = LIMITS,
        on_message=None,
        cancel: threading.Event | None = None,
    ) -> SandboxOutcome:
        path = tmp_path / f"toolkit-{uuid.uuid4().hex[:8]}.py"
        path.write_text(textwrap.dedent(source))
        return pool.run(
            interpreter_env=sandbox_env,
            runtime_dir=sandbox_runtime,
            source_path=path,
            request={
                "op": "invoke",
                "source_path": "/opt/toolkit/toolkit.py",
                "tool": "go",
                "arguments": arguments or {},
            },
            limits=limits,
            on_message=on_message or (lambda message: None),
            cancel=cancel,
        )

    return _call


def _result(outcome: SandboxOutcome):
    assert outcome.status == "ok", outcome
    assert outcome.final is not None and outcome.final["kind"] == "result", outcome
    return outcome.final["result"]


def _only_sandbox(pool: WarmPool) -> WarmSandbox:
    idle = pool.idle()
    assert len(idle) == 1, idle
    return idle[0]


ECHO = """
class Tools:
    def go(self, text: str) -> str:
        return text
"""


def test_calls_reuse_one_sandbox_and_each_runs_in_a_new_process(call, pool: WarmPool) -> None:
    source = """
    import os
    class Tools:
        def go(self) -> list:
            return [os.getpid(), os.getppid()]
    """
    first = _result(call(source))
    sandbox = _only_sandbox(pool)
    second = _result(call(source))
    assert _only_sandbox(pool) is sandbox and sandbox.calls == 2 and pool.started == 1
    # A new child of the fork server (pid 1) for each call.
    assert first[1] == 1 and second[1] == 1 and first[0] != second[0]


LEAVER = """
import ctypes, os, socket, subprocess, sys, pydantic
libc = ctypes.CDLL(None, use_errno=True)

class Tools:
    def go(self) -> dict:
        open("/tmp/left.txt", "w").write("from call one")
        os.mkdir("/tmp/locked")
        open("/tmp/locked/inner", "w").write("x")
        os.chmod("/tmp/locked", 0)
        open("/dev/shm/left", "w").write("from call one")
        made = {
            "msg": libc.msgget(0x7014, 0o1000 | 0o666),
            "shm": libc.shmget(0x7014, 4096, 0o1000 | 0o666),
            "sem": libc.semget(0x7014, 1, 0o1000 | 0o666),
        }
        # A daemon that outlives the call, in a session of its own.
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind("\\0left-by-call-one")
        server.listen()
        os.environ["LEFT"] = "1"
        pydantic.LEFT_BY_CALL_ONE = True
        import json, textwrap
        json.LEFT_BY_CALL_ONE = True
        textwrap.dedent = None
        sys.path.insert(0, "/tmp/left")
        return made
"""

LOOKER = """
import ctypes, os, socket, sys, pydantic
libc = ctypes.CDLL(None, use_errno=True)

class Tools:
    def go(self) -> dict:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            client.connect("\\0left-by-call-one")
            abstract = "connected"
        except OSError as exc:
            abstract = type(exc).__name__
        import json
        return {
            "tmp": sorted(os.listdir("/tmp")),
            "shm": sorted(os.listdir("/dev/shm")),
            "toolkit": sorted(os.listdir("/opt/toolkit")),
            "msg": libc.msgget(0x7014, 0),
            "shm_segment": libc.shmget(0x7014, 0, 0),
            "sem": libc.semget(0x7014, 0, 0),
            "sysvipc": [open(f"/proc/sysvipc/{k}").read().count("\\n") - 1 for k in ("msg", "shm", "sem")],
            "processes": sorted(p for p in os.listdir("/proc") if p.isdigit() and p not in ("1", str(os.getpid()))),
            "abstract": abstract,
            "environ": os.environ.get("LEFT"),
            "module_global": getattr(pydantic, "LEFT_BY_CALL_ONE", None),
            "json_global": getattr(json, "LEFT_BY_CALL_ONE", None),
            "textwrap": callable(__import__("textwrap").dedent),
            "sys_path": "/tmp/left" in sys.path,
        }
"""


def test_a_call_leaves_nothing_the_next_call_can_see(call, pool: WarmPool) -> None:
    made = _result(call(LEAVER))
    assert all(value >= 0 for value in made.values()), made
    sandbox = _only_sandbox(pool)
    seen = _result(call(LOOKER))
    assert _only_sandbox(pool) is sandbox, "the same warm sandbox served both calls"
    assert seen == {
        "tmp": [],
        "shm": [],
        "toolkit": ["toolkit.py"],
        "msg": -1,
        "shm_segment": -1,
        "sem": -1,
        "sysvipc": [0, 0, 0],
        "processes": [],
        "abstract": "ConnectionRefusedError",
        "environ": None,
        "module_global": None,
        "json_global": None,
        "textwrap": True,
        "sys_path": False,
    }


def test_a_call_cannot_trace_read_or_write_the_parent(call) -> None:
    report = _result(
        call(
            """
            import ctypes, os, signal
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long

            def attempt(action):
                try:
                    action()
                    return "done"
                except OSError as exc:
                    return type(exc).__name__

            class Tools:
                def go(self) -> dict:
                    status = dict(line.split(":", 1) for line in open("/proc/1/status").read().splitlines())
                    ptrace = libc.syscall(ctypes.c_long(101), ctypes.c_long(16), ctypes.c_long(1), 0, 0)  # ATTACH
                    return {
                        "parent_uid_same": int(status["Uid"].split()[0]) == os.getuid(),
                        "ptrace_attach": [ptrace, ctypes.get_errno()],
                        "mem_read": attempt(lambda: open("/proc/1/mem", "rb").read(1)),
                        "mem_write": attempt(lambda: open("/proc/1/mem", "r+b")),
                        "environ": attempt(lambda: open("/proc/1/environ", "rb").read()),
                        "fds": attempt(lambda: os.listdir("/proc/1/fd")),
                        "oom_adj": attempt(lambda: open("/proc/1/oom_score_adj", "w").write("-1000")),
                        "sigkill": attempt(lambda: os.kill(1, signal.SIGKILL)),
                        "sigstop": attempt(lambda: os.kill(1, signal.SIGSTOP)),
                        "sigint": attempt(lambda: os.kill(1, signal.SIGINT)),
                        "sigterm": attempt(lambda: os.kill(1, signal.SIGTERM)),
                    }
            """
        )
    )
    assert report.pop("parent_uid_same") is True
    assert report.pop("ptrace_attach") == [-1, 1]
    assert report.pop("mem_read") == "PermissionError"
    assert report.pop("mem_write") == "PermissionError"
    assert report.pop("environ") == "PermissionError"
    assert report.pop("fds") == "PermissionError"
    assert report.pop("oom_adj") == "PermissionError"
    # Signals from inside the namespace to its pid 1 are dropped unless it handles them,
    # and the fork server handles none.
    assert set(report.values()) == {"done"}
    # ... and the parent is still there to serve the next call.
    assert _result(call(ECHO, arguments={"text": "still here"})) == "still here"


def test_limits_kill_only_the_call(call, pool: WarmPool) -> None:
    _result(call(ECHO, arguments={"text": "warm"}))
    sandbox = _only_sandbox(pool)
    spin = call(
        """
        class Tools:
            def go(self) -> None:
                while True:
                    pass
        """,
        limits=replace(LIMITS, cpu_seconds=1, wall_seconds=10),
    )
    assert spin.status == "limit_exceeded" and spin.limit == "cpu_time", spin
    sleeper = call(
        """
        import time
        class Tools:
            def go(self) -> None:
                time.sleep(60)
        """,
        limits=replace(LIMITS, wall_seconds=1),
    )
    assert sleeper.status == "timed_out", sleeper
    hog = call(
        """
        class Tools:
            def go(self) -> int:
                return len(bytearray(10 << 30))
        """
    )
    assert hog.status == "limit_exceeded" and hog.limit == "memory", hog
    started = time.monotonic()
    bomb = call(
        """
        import os
        class Tools:
            def go(self) -> None:
                while True:
                    try:
                        os.fork()
                    except OSError:
                        pass
        """,
        # Wall time enough for the bomb to reach the pids limit on a busy machine.
        limits=replace(LIMITS, wall_seconds=8, cpu_seconds=3),
    )
    assert bomb.status in ("timed_out", "limit_exceeded"), bomb
    if bomb.cgroups:
        assert "processes" in bomb.limits_hit, bomb
    assert time.monotonic() - started < 20
    loud = call(
        """
        import sys
        class Tools:
            def go(self) -> None:
                while True:
                    sys.stderr.write("x" * 65536)
        """
    )
    assert loud.status == "limit_exceeded" and loud.limit == "output", loud
    # The same sandbox took every one of those and still answers.
    assert _only_sandbox(pool) is sandbox
    assert _result(call(ECHO, arguments={"text": "unharmed"})) == "unharmed"
    assert sandbox.calls == 7 and pool.started == 1


def test_every_call_runs_the_source_it_is_given(call, pool: WarmPool) -> None:
    version = """
    class Tools:
        def go(self) -> str:
            return "revision {n}"
    """
    assert _result(call(version.replace("{n}", "1"))) == "revision 1"
    sandbox = _only_sandbox(pool)
    assert _result(call(version.replace("{n}", "2"))) == "revision 2"
    assert _only_sandbox(pool) is sandbox


def test_a_changed_environment_gets_a_sandbox_of_its_own(
    call, pool: WarmPool, sandbox_env: Path, tmp_path: Path, sandbox_runtime: Path
) -> None:
    _result(call(ECHO, arguments={"text": "a"}))
    first = _only_sandbox(pool)
    # The same environment under another path (as a rebuilt environment would be) is
    # another key: the warm sandbox of the old one is not used for it.
    other = tmp_path / "env-copy"
    other.symlink_to(sandbox_env)
    source = tmp_path / "echo.py"
    source.write_text(ECHO)
    outcome = pool.run(
        interpreter_env=Path(os.path.realpath(other)).parent / Path(os.path.realpath(other)).name,
        runtime_dir=sandbox_runtime,
        source_path=source,
        request={"op": "invoke", "source_path": "/opt/toolkit/toolkit.py", "tool": "go", "arguments": {"text": "b"}},
        limits=replace(LIMITS, tmp_bytes=8 << 20),
        on_message=lambda message: None,
    )
    assert _result(outcome) == "b"
    assert pool.started == 2 and first in pool.idle() and len(pool.idle()) == 2


def test_sandboxes_retire_after_their_calls_and_when_idle(call, pool: WarmPool) -> None:
    pool.max_calls = 2
    _result(call(ECHO, arguments={"text": "1"}))
    first = _only_sandbox(pool)
    _result(call(ECHO, arguments={"text": "2"}))
    assert first.retired and pool.idle() == []
    _result(call(ECHO, arguments={"text": "3"}))
    second = _only_sandbox(pool)
    assert second is not first and pool.started == 2
    pool.idle_timeout = 0
    pool.reap()
    assert second.retired and pool.idle() == []
    assert wait_for_no_sandbox_processes(timeout=5) == []


def test_a_retired_sandbox_leaves_no_zombie_and_its_uid_is_free_at_once(call, pool: WarmPool) -> None:
    # Its pid 1 is reaped by bubblewrap, not left to the host's init (which, on some hosts,
    # takes seconds): until then the uid pool would count the uid as busy.
    _result(call(ECHO, arguments={"text": "1"}))
    sandbox = _only_sandbox(pool)
    pool.idle_timeout = 0
    pool.reap()
    assert sandbox.retired
    assert sandbox.uid not in uids_with_processes()
    assert [line for line in subprocess.run(["ps", "-eo", "user:20=,stat="], capture_output=True, text=True).stdout.splitlines()
            if line.split()[0].startswith("toolhub-sb-") and line.split()[1].startswith("Z")] == []


def _wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _no_start_pending(pool: WarmPool) -> bool:
    return not pool._starting and not pool._successors


def test_a_sandbox_with_one_call_left_has_its_successor_started_ahead(call, pool: WarmPool) -> None:
    pool.max_calls = 3
    pool.start_reaper(interval=60)
    _result(call(ECHO, arguments={"text": "1"}))
    first = _only_sandbox(pool)
    _result(call(ECHO, arguments={"text": "2"}))
    # Started on the reaper's thread with no call waiting for it, in the old one's place.
    _wait_for(lambda: first.retired and bool(pool.idle()) and _no_start_pending(pool))
    second = _only_sandbox(pool)
    assert second is not first and second.usable() and pool.started == 2
    assert _result(call(ECHO, arguments={"text": "3"})) == "3"
    assert pool.started == 2 and _only_sandbox(pool) is second and second.calls == 1


def test_a_call_that_comes_while_the_successor_starts_waits_for_it(call, pool: WarmPool) -> None:
    pool.max_calls = 3
    pool.start_reaper(interval=60)
    for text in "123":
        _result(call(ECHO, arguments={"text": text}))
    # At once: the first sandbox retired after its third call; this call takes its successor
    # (waiting for it if it is still starting) rather than starting a second one.
    assert _result(call(ECHO, arguments={"text": "4"})) == "4"
    _wait_for(lambda: _no_start_pending(pool))
    assert pool.started == 2 and _only_sandbox(pool).calls == 1


def test_a_sandbox_about_to_age_is_replaced_while_idle_unless_idle_too_long(call, pool: WarmPool) -> None:
    pool.max_age = 8.0
    pool.start_reaper(interval=2.0)
    _result(call(ECHO, arguments={"text": "1"}))
    first = _only_sandbox(pool)
    # Within one pass of its age, the reaper starts its successor, which takes its place.
    _wait_for(lambda: first.retired and bool(pool.idle()) and _no_start_pending(pool), timeout=20)
    second = _only_sandbox(pool)
    assert second is not first and pool.started == 2
    assert _result(call(ECHO, arguments={"text": "2"})) == "2"
    assert pool.started == 2
    # One idle past its idle time is stopped, not replaced.
    pool.idle_timeout = 0.5
    _wait_for(lambda: second.retired, timeout=10)
    time.sleep(2.5)
    assert pool.idle() == [] and pool.started == 2 and _no_start_pending(pool)


def test_a_sandbox_of_one_call_is_replaced_after_it_and_not_before(call, pool: WarmPool) -> None:
    pool.max_calls = 1
    pool.start_reaper(interval=0.2)
    _result(call(ECHO, arguments={"text": "1"}))
    _wait_for(lambda: bool(pool.idle()) and _no_start_pending(pool))
    # The successor has served nothing: it is not replaced in turn while it waits.
    time.sleep(1.5)
    assert pool.started == 2 and _only_sandbox(pool).calls == 0
    _result(call(ECHO, arguments={"text": "2"}))
    _wait_for(lambda: bool(pool.idle()) and _no_start_pending(pool))
    assert pool.started == 3


def test_no_successor_for_a_sandbox_retired_for_an_anomaly_or_without_the_reaper(call, pool: WarmPool) -> None:
    pool.max_calls = 1
    _result(call(ECHO, arguments={"text": "1"}))
    time.sleep(0.5)
    assert pool.idle() == [] and pool.started == 1 and _no_start_pending(pool)
    pool.max_calls = 100
    pool.start_reaper(interval=60)
    _result(call(ECHO, arguments={"text": "2"}))
    sandbox = _only_sandbox(pool)
    sandbox.problems.append("a test's anomaly")
    _result(call(ECHO, arguments={"text": "3"}))
    assert sandbox.retired and pool.started == 3
    time.sleep(0.5)
    assert _no_start_pending(pool) and pool.started == 3


def test_an_anomaly_retires_the_sandbox(call, pool: WarmPool) -> None:
    _result(call(ECHO, arguments={"text": "1"}))
    sandbox = _only_sandbox(pool)
    # A file the fork server cannot remove: /tmp made unwritable by the call itself is
    # repaired, but a full /tmp that cannot be listed is not a thing a call can cause, so
    # the test breaks the parent from the host instead: its control socket closes.
    sandbox.process.kill()
    sandbox.process.wait()
    assert not sandbox.usable()
    assert _result(call(ECHO, arguments={"text": "2"})) == "2"
    assert sandbox.retired and pool.started == 2


def test_warm_calls_stream_events_and_answer_calls(call) -> None:
    seen = []

    def on_message(message: dict) -> dict | None:
        seen.append(message)
        if message["kind"] == "call":
            return {"kind": "call_result", "call_id": message["call_id"], "value": True}
        return None

    outcome = call(
        """
        class Tools:
            async def go(self, __event_emitter__, __event_call__) -> str:
                await __event_emitter__({"type": "status", "data": {"description": "asking", "done": False}})
                answer = await __event_call__({"type": "confirmation", "data": {"title": "Sure?", "message": "?"}})
                return f"confirmed={answer}"
        """,
        on_message=on_message,
    )
    assert _result(outcome) == "confirmed=True"
    assert [m["kind"] for m in seen] == ["event", "call"]


def test_a_callback_that_raises_kills_only_the_call(call, pool: WarmPool) -> None:
    class Stop(Exception):
        pass

    def on_message(message: dict) -> dict | None:
        raise Stop("the host stops this run")

    _result(call(ECHO, arguments={"text": "before"}))
    sandbox = _only_sandbox(pool)
    with pytest.raises(Stop):
        call(
            """
            import time
            class Tools:
                async def go(self, __event_emitter__) -> str:
                    await __event_emitter__({"type": "status", "data": {"description": "x", "done": False}})
                    time.sleep(60)
                    return "never"
            """,
            on_message=on_message,
        )
    assert _only_sandbox(pool) is sandbox and sandbox.usable()
    assert _result(call(ECHO, arguments={"text": "after"})) == "after"


def test_the_memory_budget_holds_for_every_pool_of_the_host(
    tmp_path: Path, sandbox_env: Path, sandbox_runtime: Path
) -> None:
    require_sandbox()
    uids = UidPool(first=POOL_FIRST, size=4, lock_dir=tmp_path / "uid-locks")
    probe = WarmPool(size=1, uid_pool=uids)
    try:
        probe.warm(interpreter_env=sandbox_env, runtime_dir=sandbox_runtime, limits=LIMITS)
        memory = _only_sandbox(probe).memory()
    finally:
        probe.close()
    # bubblewrap and the fork server with pydantic imported: tens of MiB, not a few.
    cost = memory["pss"]
    assert 10 << 20 < cost < 200 << 20 and memory["rss"] >= cost, memory
    # Room for one sandbox and a half, shared by two worker processes' pools.
    budget = MemoryBudget(limit_bytes=cost * 3 // 2, directory=tmp_path / "budget")
    first = WarmPool(size=2, uid_pool=uids, budget=budget, estimate=cost)
    second = WarmPool(size=2, uid_pool=uids, budget=budget, estimate=cost)
    other_limits = replace(LIMITS, memory_bytes=256 << 20)
    try:
        first.warm(interpreter_env=sandbox_env, runtime_dir=sandbox_runtime, limits=LIMITS)
        assert 0 < budget.used() <= budget.limit_bytes
        # Another process cannot take what this one's idle sandbox holds...
        with pytest.raises(WarmBudgetExceeded):
            second.warm(interpreter_env=sandbox_env, runtime_dir=sandbox_runtime, limits=LIMITS)
        assert second.idle() == [] and budget.used() <= budget.limit_bytes
        # ...while this one makes room by stopping its least recently used idle sandbox.
        kept = _only_sandbox(first)
        first.warm(interpreter_env=sandbox_env, runtime_dir=sandbox_runtime, limits=other_limits)
        (now,) = first.idle()
        assert now is not kept and kept.retired and now.limits == other_limits
        assert budget.used() <= budget.limit_bytes
    finally:
        first.close()
        second.close()
    assert budget.used() == 0
    # The share of a worker that died without giving it back is free again.
    subprocess.run(
        [sys.executable, "-c", "import sys; from pathlib import Path; from toolhub.sandbox.warm_budget import MemoryBudget; "
         "assert MemoryBudget(limit_bytes=1 << 30, directory=Path(sys.argv[1])).reserve(5 << 20); import os; os._exit(0)",
         str(tmp_path / "budget")],
        check=True, cwd=REPO,
    )
    assert budget.used() == 0


def test_a_pool_gives_up_its_own_idle_sandbox_s_uid_before_waiting_for_another_s(
    tmp_path: Path, sandbox_env: Path, sandbox_runtime: Path
) -> None:
    """Every warm sandbox holds a uid for its life: with every uid of the host held by idle
    sandboxes of two worker processes, a third environment in one of them must not wait for
    the other's uid (and fail after the lease time-out); it stops its own idle sandbox."""
    require_sandbox()
    uids = UidPool(first=POOL_FIRST, size=2, lock_dir=tmp_path / "uid-locks", lease_timeout=30)
    first, second = WarmPool(size=1, uid_pool=uids), WarmPool(size=1, uid_pool=uids)
    limits = [replace(LIMITS, memory_bytes=(256 + 64 * n) << 20) for n in range(3)]
    try:
        first.warm(interpreter_env=sandbox_env, runtime_dir=sandbox_runtime, limits=limits[0])
        second.warm(interpreter_env=sandbox_env, runtime_dir=sandbox_runtime, limits=limits[1])
        held = _only_sandbox(first)
        started = time.monotonic()
        first.warm(interpreter_env=sandbox_env, runtime_dir=sandbox_runtime, limits=limits[2])
        # Not the lease time-out: a second or two (the stopped sandbox's processes must be gone,
        # and reaped, before its uid counts as free).
        assert time.monotonic() - started < 15
        (now,) = first.idle()
        assert held.retired and now.limits == limits[2]
        assert not _only_sandbox(second).retired
    finally:
        first.close()
        second.close()


def test_a_process_keeps_at_most_max_idle_idle_sandboxes(tmp_path: Path, sandbox_env: Path, sandbox_runtime: Path) -> None:
    require_sandbox()
    # The shared sandbox user: what is counted here is sandboxes, not uids.
    pool = WarmPool(size=1, max_idle=2)
    try:
        for n in range(3):
            limits = replace(LIMITS, memory_bytes=(256 + 64 * n) << 20)
            pool.warm(interpreter_env=sandbox_env, runtime_dir=sandbox_runtime, limits=limits)
        assert sorted(sandbox.limits.memory_bytes >> 20 for sandbox in pool.idle()) == [320, 384]
    finally:
        pool.close()


def test_the_parent_imports_the_environments_packages_and_never_a_toolkit(
    tmp_path: Path, sandbox_env_with_humanize: Path, sandbox_runtime: Path, pool: WarmPool
) -> None:
    # What the call finds already imported when its toolkit starts loading, and what it leaves.
    source = """
    import sys
    mine = sorted(n for n, m in list(sys.modules.items()) if str(getattr(m, "__file__", "")).startswith("/opt/toolkit"))
    found = {
        "humanize": "humanize" in sys.modules,
        "humanize_from": str(getattr(sys.modules.get("humanize"), "__file__", "")),
        "left_by_last": "xml.dom.minidom" in sys.modules,
        "marked": getattr(sys.modules.get("humanize"), "LEFT_BY_A_CALL", False),
        "toolkit_modules": mine,
        "me": __name__,
    }
    import humanize
    import xml.dom.minidom
    humanize.LEFT_BY_A_CALL = True

    class Tools:
        def go(self) -> dict:
            return found
    """

    def run() -> dict:
        path = tmp_path / f"toolkit-{uuid.uuid4().hex[:8]}.py"
        path.write_text(textwrap.dedent(source))
        return _result(pool.run(
            interpreter_env=sandbox_env_with_humanize, runtime_dir=sandbox_runtime, source_path=path,
            request={"op": "invoke", "source_path": "/opt/toolkit/toolkit.py", "tool": "go", "arguments": {}},
            limits=LIMITS, on_message=lambda message: None,
        ))

    first = run()
    sandbox = _only_sandbox(pool)
    assert "humanize" in sandbox.preloaded and "pydantic" not in sandbox.preloaded
    second = run()
    assert _only_sandbox(pool) is sandbox and sandbox.calls == 2
    for found in (first, second):
        # Imported by the parent, from the environment: the call inherits it.
        assert found["humanize"] and found["humanize_from"].startswith("/opt/env/"), found
        # The toolkit is loaded by the call's own process only: the one module from
        # /opt/toolkit is the one being loaded, never one the parent holds.
        assert found["toolkit_modules"] == [found["me"]], found
    # What the first call imported or changed died with its process.
    assert not second["left_by_last"] and not second["marked"], second


# A tool that answers and then keeps its process busy: the runtime flushes sys.stderr after
# writing the result, and this one's flush waits for a thread of the tool (it sleeps, or
# spins). The tool also leaves a file, a SysV queue and a daemon behind.
LINGERER = """
import ctypes, subprocess, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)

def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass

class Lingering:
    def __init__(self, stream, thread):
        self.stream, self.thread = stream, thread
    def write(self, text):
        return self.stream.write(text)
    def flush(self):
        self.thread.join()
        self.stream.flush()

class Tools:
    def go(self, seconds: float, busy: bool = False) -> str:
        open("/tmp/left.txt", "w").write("after the answer")
        open("/dev/shm/left", "w").write("after the answer")
        libc.msgget(0x7015, 0o1000 | 0o666)
        subprocess.Popen(["/usr/bin/sleep", "1000"], start_new_session=True)
        thread = threading.Thread(target=spin if busy else time.sleep, args=(seconds,))
        thread.start()
        sys.stderr = Lingering(sys.stderr, thread)
        return "answered"
"""

NOTHING_LEFT = {"tmp": [], "shm": [], "processes": [], "sysvipc": [0, 0, 0], "msg": -1}


def _left(seen: dict) -> dict:
    return {name: seen[name] for name in NOTHING_LEFT}


def test_a_call_answers_at_its_result_and_its_tail_ends_before_the_next_call(call, pool: WarmPool) -> None:
    _result(call(ECHO, arguments={"text": "warm"}))
    sandbox = _only_sandbox(pool)
    limits = replace(LIMITS, exit_grace_seconds=5, wall_seconds=10)
    started = time.monotonic()
    outcome = call(LINGERER, arguments={"seconds": 2}, limits=limits)
    assert _result(outcome) == "answered" and time.monotonic() - started < 1, outcome
    # Measured on the host while the process still ran; its exit code is not known yet.
    assert outcome.cpu_ms is not None and outcome.max_rss_kb and outcome.max_rss_kb > 1000, outcome
    assert outcome.exit_code is None
    seen = call(LOOKER)
    # The next call started only once the tail was over: everything of the last one is gone.
    assert time.monotonic() - started >= 2
    assert _left(_result(seen)) == NOTHING_LEFT
    assert _only_sandbox(pool) is sandbox and sandbox.calls == 3 and pool.started == 1


def test_a_quick_call_answers_before_its_process_exits_and_is_measured_whole(call, pool: WarmPool) -> None:
    """The runtime waits for its stdin to close after its result (channel.Channel.finish), and
    the host closes it only after answering: the answer does not wait for the process's exit
    (the fork server's report), and the process's peak memory is read while it is whole."""
    _result(call(ECHO, arguments={"text": "warm"}))
    for _ in range(5):
        outcome = call(ECHO, arguments={"text": "again"})
        assert _result(outcome) == "again"
        assert outcome.exit_code is None, outcome
        assert outcome.cpu_ms is not None and outcome.max_rss_kb and outcome.max_rss_kb > 1000, outcome
    seen = call(LOOKER)
    assert _left(_result(seen)) == NOTHING_LEFT


@pytest.mark.parametrize(
    "limits",
    [
        # RLIMIT_CPU kills the process after its answer...
        replace(LIMITS, cpu_seconds=1, exit_grace_seconds=5, wall_seconds=10),
        # ...or the host does, once its exit grace is over.
        replace(LIMITS, cpu_seconds=5, exit_grace_seconds=1.5, wall_seconds=10),
    ],
    ids=["cpu_time", "exit_grace"],
)
def test_a_call_that_answers_and_then_hits_a_limit_still_succeeds(call, pool: WarmPool, limits: Limits) -> None:
    _result(call(ECHO, arguments={"text": "warm"}))
    sandbox = _only_sandbox(pool)
    started = time.monotonic()
    outcome = call(LINGERER, arguments={"seconds": 60, "busy": True}, limits=limits)
    assert _result(outcome) == "answered" and outcome.limits_hit == (), outcome
    assert time.monotonic() - started < 1 and outcome.cpu_ms is not None and outcome.cpu_ms < 1000, outcome
    assert _left(_result(call(LOOKER))) == NOTHING_LEFT
    assert _only_sandbox(pool) is sandbox and sandbox.usable()


def test_an_anomaly_in_the_tail_retires_the_sandbox(call, pool: WarmPool) -> None:
    _result(call(ECHO, arguments={"text": "warm"}))
    sandbox = _only_sandbox(pool)
    limits = replace(LIMITS, exit_grace_seconds=5, wall_seconds=10)
    assert _result(call(LINGERER, arguments={"seconds": 2}, limits=limits)) == "answered"
    # The fork server dies while the call's tail is being finished: it never reports.
    (fork_server,) = Path(f"/proc/{sandbox.process.pid}/task/{sandbox.process.pid}/children").read_text().split()
    os.kill(int(fork_server), 9)
    assert _result(call(ECHO, arguments={"text": "next"})) == "next"
    assert sandbox.retired and sandbox.problems and pool.started == 2


def test_cancelling_and_reaping_wait_for_a_pending_tail(call, pool: WarmPool) -> None:
    limits = replace(LIMITS, exit_grace_seconds=5, wall_seconds=10)
    assert _result(call(LINGERER, arguments={"seconds": 1}, limits=limits)) == "answered"
    sandbox = _only_sandbox(pool)
    cancel = threading.Event()
    timer = threading.Timer(0.2, cancel.set)
    timer.start()
    try:
        cancelled = call(
            """
            import time
            class Tools:
                def go(self) -> None:
                    time.sleep(60)
            """,
            cancel=cancel,
        )
    finally:
        timer.cancel()
    assert cancelled.status == "cancelled", cancelled
    assert _only_sandbox(pool) is sandbox and sandbox.usable()
    assert _result(call(LINGERER, arguments={"seconds": 1}, limits=limits)) == "answered"
    pool.idle_timeout = 0
    pool.reap()
    assert sandbox.retired and pool.idle() == []
    assert wait_for_no_sandbox_processes(timeout=1) == []


def test_what_a_call_wrote_to_stderr_before_its_result_is_kept(call) -> None:
    # More than one read of the pipe (made larger for that), all written before the result.
    source = """
    import fcntl, os
    class Tools:
        def go(self, n: int) -> int:
            fcntl.fcntl(2, 1031, 1 << 20)  # F_SETPIPE_SZ
            os.write(2, b"x" * (512 << 10) + f"before result {n}\\n".encode())
            return n
    """
    for n in range(3):
        outcome = call(source, arguments={"n": n})
        assert _result(outcome) == str(n) and outcome.stderr_tail.endswith(f"before result {n}\n"), outcome



def test_a_source_that_is_not_utf8_and_larger_than_a_pipe_arrives_whole(
    pool: WarmPool, sandbox_env: Path, sandbox_runtime: Path, tmp_path: Path
) -> None:
    # The source follows the request line on the call's stdin: more than a pipe holds, and
    # not UTF-8, yet the call's process writes exactly the bytes uploaded, on every call.
    source = (
        b"# -*- coding: latin-1 -*-\n" + (b"# " + b"x" * 1000 + b"\n") * 500
        + b"import hashlib\nclass Tools:\n    def go(self) -> list:\n"
        + b"        data = open('/opt/toolkit/toolkit.py', 'rb').read()\n"
        + b"        return [len(data), hashlib.sha256(data).hexdigest(), 'caf\xe9']\n"
    )
    path = tmp_path / "latin1.py"
    path.write_bytes(source)
    for _ in range(2):
        outcome = pool.run(
            interpreter_env=sandbox_env, runtime_dir=sandbox_runtime, source_path=path,
            request={"op": "invoke", "source_path": "/opt/toolkit/toolkit.py", "tool": "go", "arguments": {}},
            limits=LIMITS, on_message=lambda message: None,
        )
        assert _result(outcome) == [len(source), hashlib.sha256(source).hexdigest(), "café"]
    assert pool.started == 1 and _only_sandbox(pool).calls == 2
