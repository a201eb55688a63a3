"""The launcher (toolhub.sandbox.launcher) against hostile toolkits, for real.

Every toolkit here runs in bubblewrap as the sandbox user, through the real runtime
(toolhub/runtime) unless a test is about the launcher's own protocol handling, in which case
the "toolkit" file is run directly as a script. Each test checks that the attack is contained,
that the outcome names the reason, and (autouse fixture) that no process of the sandbox user
is left afterwards. Limits are kept small so that the whole file runs in well under a minute.

Needs root, bubblewrap, the toolhub-sandbox user and /usr/bin/python3.11 (see
tests/sandbox_fixtures.py); CI sets TOOLHUB_REQUIRE_SANDBOX=1 so that they cannot be skipped.
"""

from __future__ import annotations

import json
import os
import pwd
import select
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

# The session fixtures (sandbox_env, sandbox_runtime, sandbox_data_dir) live in
# tests/sandbox_fixtures.py, loaded as a plugin (tests/conftest.py registers it for
# assertion rewriting).
pytest_plugins = ["tests.sandbox_fixtures"]

from tests.sandbox_fixtures import REPO, SANDBOX_USER, require_sandbox, wait_for_no_sandbox_processes  # noqa: E402
from toolhub.sandbox.launcher import (  # noqa: E402
    Limits,
    SandboxOutcome,
    SandboxUnavailable,
    check_sandbox,
    ensure_runtime_copy,
    run_sandboxed,
)

pytestmark = pytest.mark.sandbox

# Small limits: every test that hits one hits it within a few seconds.
SMALL = Limits(
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


@pytest.fixture(autouse=True)
def _nothing_survives():
    require_sandbox()
    yield
    left = wait_for_no_sandbox_processes()
    assert left == [], f"processes of {SANDBOX_USER} survived the test: {left}"


@pytest.fixture
def run_tool(tmp_path: Path, sandbox_env: Path, sandbox_runtime: Path) -> Callable[..., SandboxOutcome]:
    """Run `source`'s tool `go` through the real runtime and return the outcome."""

    def _run(
        source: str,
        *,
        arguments: dict | None = None,
        limits: Limits = SMALL,
        on_message: Callable[[dict], dict | None] | None = None,
        tool: str = "go",
        **kwargs,
    ) -> SandboxOutcome:
        path = tmp_path / f"toolkit-{uuid.uuid4().hex[:8]}.py"
        path.write_text(textwrap.dedent(source))
        return run_sandboxed(
            interpreter_env=sandbox_env,
            runtime_dir=sandbox_runtime,
            source_path=path,
            request={
                "op": "invoke",
                "source_path": "/opt/toolkit/toolkit.py",
                "tool": tool,
                "arguments": arguments or {},
            },
            limits=limits,
            on_message=on_message or (lambda message: None),
            **kwargs,
        )

    return _run


@pytest.fixture
def run_script(tmp_path: Path, sandbox_env: Path, sandbox_runtime: Path) -> Callable[..., SandboxOutcome]:
    """Run `source` itself as the sandboxed program, speaking the protocol by hand."""

    def _run(source: str, *, limits: Limits = SMALL, on_message=None, request: dict | None = None) -> SandboxOutcome:
        path = tmp_path / f"script-{uuid.uuid4().hex[:8]}.py"
        path.write_text(textwrap.dedent(source))
        return run_sandboxed(
            interpreter_env=sandbox_env,
            runtime_dir=sandbox_runtime,
            source_path=path,
            request=request or {"op": "script"},
            limits=limits,
            on_message=on_message or (lambda message: None),
            argv=("/opt/env/bin/python", "-I", "/opt/toolkit/toolkit.py"),
        )

    return _run


def _result(outcome: SandboxOutcome):
    assert outcome.status == "ok", outcome
    assert outcome.final is not None and outcome.final["kind"] == "result", outcome
    return outcome.final["result"]


# Identity and what the sandbox can see


def test_it_runs_the_tool_as_the_unprivileged_user_without_capabilities(run_tool) -> None:
    report = _result(
        run_tool(
            """
            import os, socket, subprocess

            class Tools:
                def go(self) -> dict:
                    status = dict(
                        line.split(":", 1) for line in open("/proc/self/status").read().splitlines()
                    )
                    nested = subprocess.run(["/usr/bin/unshare", "--user", "true"], capture_output=True)
                    return {
                        "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid()],
                        "groups": os.getgroups(),
                        "caps": {k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")},
                        "no_new_privs": status["NoNewPrivs"].strip(),
                        "pid": os.getpid(),
                        "hostname": socket.gethostname(),
                        "nested_userns": nested.returncode,
                    }
            """
        )
    )
    user = pwd.getpwnam(SANDBOX_USER)
    assert user.pw_uid != 0
    assert report["ids"] == [user.pw_uid, user.pw_uid, user.pw_gid, user.pw_gid]
    assert set(report["groups"]) <= {user.pw_gid}
    assert set(report["caps"].values()) == {"0000000000000000"}
    assert report["no_new_privs"] == "1"
    # Its own pid namespace: the tool's process is pid 1 and sees no host process.
    assert report["pid"] == 1
    assert report["hostname"] == "sandbox"
    # It may not build a user namespace of its own to regain capabilities in.
    assert report["nested_userns"] != 0


def test_it_shows_only_usr_the_environment_the_runtime_and_the_source(run_tool) -> None:
    report = _result(
        run_tool(
            """
            import os

            class Tools:
                def go(self) -> dict:
                    return {
                        "root": sorted(os.listdir("/")),
                        "opt": sorted(os.listdir("/opt")),
                        "toolkit": sorted(os.listdir("/opt/toolkit")),
                        "pids": sorted(p for p in os.listdir("/proc") if p.isdigit()),
                        "dev": sorted(os.listdir("/dev")),
                    }
            """
        )
    )
    assert set(report["root"]) <= {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "opt", "proc", "dev", "tmp"}
    assert "etc" not in report["root"] and "root" not in report["root"] and "home" not in report["root"]
    assert report["opt"] == ["env", "runtime", "toolkit"]
    assert report["toolkit"] == ["toolkit.py"]
    assert report["pids"] == ["1"]
    assert "shm" in report["dev"] and "sda" not in report["dev"] and "vda" not in report["dev"]


def test_it_hides_the_workers_environment_variables(run_tool, monkeypatch) -> None:
    secret = f"not-a-real-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("SECRET_KEY", secret)
    monkeypatch.setenv("DATABASE_URL", f"postgres://toolhub:{secret}@127.0.0.1/toolhub")
    monkeypatch.setenv("CELERY_BROKER_URL", f"redis://:{secret}@127.0.0.1:6379/0")
    report = _result(
        run_tool(
            """
            import os

            class Tools:
                def go(self) -> dict:
                    found = {"os.environ": dict(os.environ)}
                    for pid in [p for p in os.listdir("/proc") if p.isdigit()] + ["self"]:
                        for name in ("environ", "cmdline"):
                            try:
                                found[f"/proc/{pid}/{name}"] = open(f"/proc/{pid}/{name}", "rb").read().decode()
                            except OSError as exc:
                                found[f"/proc/{pid}/{name}"] = repr(exc)
                    return found
            """
        )
    )
    assert secret not in json.dumps(report)
    assert set(report["os.environ"]) <= {
        "PATH",
        "LANG",
        "HOME",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONUNBUFFERED",
        "MALLOC_ARENA_MAX",
        "PWD",
    }
    assert "/proc/1/environ" in report and "SECRET_KEY" not in report["/proc/1/environ"]


def test_it_hides_the_settings_the_database_and_etc_shadow(run_tool, tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite3"
    database.write_bytes(b"SQLite format 3\x00 pretend")
    database.chmod(0o644)
    settings_module = REPO / "toolhub" / "settings.py"
    paths = [
        str(settings_module),
        str(REPO / ".data"),
        str(database),
        "/etc/shadow",
        "/etc/passwd",
        "/root",
        "/home",
        "/proc/1/root/etc/shadow",
        "/var/lib/postgresql",
        "/run/redis",
    ]
    assert settings_module.exists() and database.exists() and Path("/etc/shadow").exists()
    report = _result(
        run_tool(
            """
            class Tools:
                def go(self, paths: list[str]) -> dict:
                    answers = {}
                    for path in paths:
                        try:
                            with open(path, "rb") as handle:
                                answers[path] = "READ " + handle.read(200).decode(errors="replace")
                        except OSError as exc:
                            answers[path] = type(exc).__name__
                    return answers
            """,
            arguments={"paths": paths},
        )
    )
    # Not "permission denied": these paths do not exist in the sandbox at all.
    assert report == {path: "FileNotFoundError" for path in paths}


def test_it_refuses_writes_outside_tmp_and_changes_nothing_on_the_host(
    run_tool, sandbox_env: Path, sandbox_runtime: Path
) -> None:
    before = _snapshot(sandbox_env) | _snapshot(sandbox_runtime)
    targets = [
        "/evil",
        "/usr/evil",
        "/opt/evil",
        "/opt/env/evil",
        "/opt/env/bin/python",
        "/opt/runtime/main.py",
        "/opt/toolkit/toolkit.py",
        "/dev/evil",
        "/proc/sys/kernel/hostname",
    ]
    report = _result(
        run_tool(
            """
            class Tools:
                def go(self, targets: list[str]) -> dict:
                    answers = {}
                    for path in targets + ["/tmp/fine", "/dev/shm/fine"]:
                        try:
                            with open(path, "w") as handle:
                                handle.write("owned")
                            answers[path] = "WROTE"
                        except OSError as exc:
                            answers[path] = type(exc).__name__
                    return answers
            """,
            arguments={"targets": targets},
        )
    )
    assert report.pop("/tmp/fine") == "WROTE"
    assert report.pop("/dev/shm/fine") == "WROTE"
    assert "WROTE" not in report.values(), report
    assert _snapshot(sandbox_env) | _snapshot(sandbox_runtime) == before


def test_it_cannot_reach_redis_postgresql_or_any_host_port(run_tool) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.1)
    port = listener.getsockname()[1]
    try:
        report = _result(
            run_tool(
                """
                import socket

                class Tools:
                    def go(self, port: int) -> dict:
                        answers = {}
                        for host, number in [("127.0.0.1", 6379), ("127.0.0.1", 5432),
                                             ("127.0.0.1", port), ("10.0.2.2", 80), ("1.1.1.1", 53)]:
                            try:
                                socket.create_connection((host, number), timeout=2).close()
                                answers[f"{host}:{number}"] = "CONNECTED"
                            except OSError as exc:
                                answers[f"{host}:{number}"] = type(exc).__name__
                        answers["interfaces"] = [name for _, name in socket.if_nameindex()]
                        return answers
                """,
                arguments={"port": port},
            )
        )
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()
    assert report.pop("interfaces") == ["lo"]
    assert "CONNECTED" not in report.values(), report


def test_it_passes_no_descriptor_of_the_worker(run_tool, tmp_path: Path) -> None:
    leaked = tmp_path / "worker-secret.txt"
    leaked.write_text("the worker's open file")
    fd = os.open(leaked, os.O_RDONLY)
    os.set_inheritable(fd, True)
    try:
        report = _result(
            run_tool(
                """
                import os

                class Tools:
                    def go(self) -> dict:
                        links = {}
                        for fd in os.listdir("/proc/self/fd"):
                            try:
                                links[fd] = os.readlink(f"/proc/self/fd/{fd}")
                            except OSError:
                                pass
                        return links
                """
            )
        )
    finally:
        os.close(fd)
    targets = set(report.values())
    assert not any("worker-secret" in target or "memfd" in target for target in targets), report
    # Only stdio pipes (and the runtime's copies of them), /dev/null and the listing itself.
    assert all(t.startswith("pipe:") or t in ("/dev/null", "/proc/1/fd") for t in targets), report


# Limits


def test_it_stops_a_fork_bomb(run_tool) -> None:
    started = time.monotonic()
    outcome = run_tool(
        """
        import os

        class Tools:
            def go(self) -> str:
                while True:
                    try:
                        os.fork()
                    except OSError:
                        pass
        """,
        limits=replace(SMALL, wall_seconds=3, cpu_seconds=3),
    )
    assert outcome.status in ("timed_out", "limit_exceeded"), outcome
    assert outcome.final is None
    if outcome.cgroups:
        assert "processes" in outcome.limits_hit
    assert time.monotonic() - started < 10


def test_it_stops_a_10_gib_allocation(run_tool) -> None:
    outcome = run_tool(
        """
        class Tools:
            def go(self) -> int:
                return len(bytearray(10 << 30))
        """
    )
    assert (outcome.status, outcome.limit) == ("limit_exceeded", "memory"), outcome
    assert "MemoryError" in outcome.final["traceback"]


def test_it_stops_a_growing_allocation(run_tool) -> None:
    outcome = run_tool(
        """
        class Tools:
            def go(self) -> int:
                chunks = []
                while True:
                    chunks.append(bytearray(16 << 20))
        """
    )
    assert (outcome.status, outcome.limit) == ("limit_exceeded", "memory"), outcome
    assert outcome.max_rss_kb is not None and outcome.max_rss_kb < (SMALL.memory_bytes >> 10)


def test_it_stops_a_cpu_spin(run_tool) -> None:
    outcome = run_tool(
        """
        class Tools:
            def go(self) -> str:
                while True:
                    pass
        """,
        limits=replace(SMALL, cpu_seconds=1, wall_seconds=10),
    )
    # Before the 10 s wall clock: the CPU limit ended it.
    assert (outcome.status, outcome.limit) == ("limit_exceeded", "cpu_time"), outcome
    assert outcome.cpu_ms is not None and outcome.cpu_ms >= 500


def test_it_stops_a_sleeper_at_the_wall_clock(run_tool) -> None:
    outcome = run_tool(
        """
        import time

        class Tools:
            def go(self) -> str:
                time.sleep(10**6)
        """,
        limits=replace(SMALL, wall_seconds=1.5),
    )
    assert (outcome.status, outcome.limit) == ("timed_out", "wall_time"), outcome
    assert 1400 <= outcome.duration_ms < 4000


def test_it_stops_a_run_when_it_is_cancelled_from_another_thread(run_tool) -> None:
    # What the worker's heartbeat does when someone presses Cancel: set the event; the
    # sandbox and everything in it (the setsid grandchild too) is gone well before the wall.
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    outcome = run_tool(
        """
        import os, subprocess, sys, time

        class Tools:
            def go(self) -> str:
                subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(600)"])
                time.sleep(10**6)
        """,
        limits=replace(SMALL, wall_seconds=20),
        cancel=cancel,
    )
    assert (outcome.status, outcome.limit) == ("cancelled", None), outcome
    assert 900 <= outcome.duration_ms < 6000
    # Nothing of the call is left: the autouse fixture checks the sandbox user's processes.


def test_it_kills_a_setsid_child_that_outlives_the_call(run_tool) -> None:
    outcome = run_tool(
        """
        import os, subprocess

        class Tools:
            def go(self) -> dict:
                child = subprocess.Popen(["/usr/bin/sleep", "1000"], start_new_session=True)
                # A classic daemon too: fork, setsid, fork again, parent exits.
                if os.fork() == 0:
                    os.setsid()
                    if os.fork() == 0:
                        os.execv("/usr/bin/sleep", ["sleep", "1001"])
                    os._exit(0)
                os.wait()
                return {"child": child.pid}
        """
    )
    assert _result(outcome)["child"] > 1
    # The autouse fixture checks that neither sleep survived.


def test_it_kills_a_setsid_child_when_the_call_times_out(run_tool) -> None:
    outcome = run_tool(
        """
        import subprocess, time

        class Tools:
            def go(self) -> str:
                subprocess.Popen(["/usr/bin/sleep", "1000"], start_new_session=True)
                time.sleep(1000)
        """,
        limits=replace(SMALL, wall_seconds=1),
    )
    assert outcome.status == "timed_out", outcome


def test_it_stops_a_tool_printing_a_gibibyte(run_tool) -> None:
    outcome = run_tool(
        """
        import sys

        class Tools:
            def go(self) -> str:
                line = "x" * (1 << 20)
                for _ in range(1024):
                    print(line)
                return "printed"
        """
    )
    assert (outcome.status, outcome.limit) == ("limit_exceeded", "output"), outcome
    assert outcome.duration_ms < 5000
    assert len(outcome.stderr_tail.encode()) <= SMALL.stderr_tail_bytes


def test_it_stops_an_endless_line_on_the_protocol_stream(run_tool) -> None:
    outcome = run_tool(
        """
        import os

        class Tools:
            def go(self) -> str:
                # Find the runtime's copy of the protocol stream and flood it without a newline.
                block = b"{" * 65536
                for _ in range(256):
                    for fd in range(3, 10):
                        try:
                            os.write(fd, block)
                        except OSError:
                            pass
                return "flooded"
        """,
        limits=replace(SMALL, output_bytes=64 << 20),
    )
    assert (outcome.status, outcome.limit) == ("limit_exceeded", "message_size"), outcome


def test_it_caps_file_size(run_tool) -> None:
    outcome = run_tool(
        """
        class Tools:
            def go(self) -> str:
                with open("/tmp/big", "wb") as handle:
                    handle.write(b"x" * (2 << 20))
                return "wrote"
        """
    )
    assert (outcome.status, outcome.limit) == ("limit_exceeded", "file_size"), outcome


def test_it_caps_tmp_space(run_tool) -> None:
    outcome = run_tool(
        """
        class Tools:
            def go(self) -> str:
                for index in range(16):
                    with open(f"/tmp/part{index}", "wb") as handle:
                        handle.write(b"x" * (512 << 10))
                return "wrote"
        """
    )
    assert (outcome.status, outcome.limit) == ("limit_exceeded", "tmp_space"), outcome


def test_the_host_never_sees_the_symlinks_the_tool_leaves(run_tool, sandbox_env: Path, sandbox_runtime: Path) -> None:
    name = f"toolhub-evil-{uuid.uuid4().hex[:8]}"
    before = _snapshot(sandbox_env) | _snapshot(sandbox_runtime)
    report = _result(
        run_tool(
            """
            import os

            class Tools:
                def go(self, name: str) -> list:
                    made = []
                    for directory in ("/tmp", "/dev/shm"):
                        for target in ("/etc/shadow", "/srv/toolhub/toolhub/settings.py", "/"):
                            link = f"{directory}/{name}-{len(made)}"
                            os.symlink(target, link)
                            made.append(link)
                    return made
            """,
            arguments={"name": name},
        )
    )
    assert len(report) == 6
    # The sandbox's /tmp and /dev/shm were its own, in memory: nothing of it reached the
    # host, so there is nothing for the host to follow.
    assert not any(entry.startswith(name) for entry in os.listdir("/tmp"))
    assert not any(entry.startswith(name) for entry in os.listdir("/dev/shm"))
    assert _snapshot(sandbox_env) | _snapshot(sandbox_runtime) == before


def test_it_times_out_a_toolkit_that_hangs_while_loading(
    tmp_path: Path, sandbox_env: Path, sandbox_runtime: Path
) -> None:
    source = tmp_path / "hangs.py"
    source.write_text("import time\ntime.sleep(1000)\n\nclass Tools:\n    pass\n")
    outcome = run_sandboxed(
        interpreter_env=sandbox_env,
        runtime_dir=sandbox_runtime,
        source_path=source,
        request={"op": "introspect", "source_path": "/opt/toolkit/toolkit.py"},
        limits=replace(SMALL, wall_seconds=1),
        on_message=lambda message: None,
    )
    assert (outcome.status, outcome.limit, outcome.final) == ("timed_out", "wall_time", None)


# Protocol handling (the script is the whole program here)


def test_it_streams_events_and_answers_calls_through_the_runtime(run_tool) -> None:
    seen = []

    def on_message(message: dict) -> dict | None:
        seen.append(message)
        if message["kind"] == "call":
            return {"kind": "call_result", "call_id": message["call_id"], "value": True}
        return None

    outcome = run_tool(
        """
        class Tools:
            async def go(self, __event_emitter__, __event_call__) -> str:
                await __event_emitter__({"type": "status", "data": {"description": "asking", "done": False}})
                answer = await __event_call__({"type": "confirmation", "data": {"title": "Sure?", "message": "?"}})
                await __event_emitter__({"type": "status", "data": {"description": "done", "done": True}})
                return f"confirmed={answer}"
        """,
        on_message=on_message,
    )
    assert _result(outcome) == "confirmed=True"
    assert [m["kind"] for m in seen] == ["event", "call", "event"]
    assert seen[1]["event"]["type"] == "confirmation"


def test_it_does_not_charge_host_time_to_the_wall_clock(run_script) -> None:
    script = """
        import json, sys
        request = json.loads(sys.stdin.readline())
        print(json.dumps({"kind": "call", "call_id": 1, "event": {}}), flush=True)
        reply = json.loads(sys.stdin.readline())
        print(json.dumps({"kind": "result", "result": reply["value"]}), flush=True)
    """

    # The person takes longer than the whole wall limit; interpreter start-up on a busy
    # machine still fits in what is left of it.
    def slow_human(message: dict) -> dict:
        time.sleep(3.5)
        return {"kind": "call_result", "call_id": 1, "value": "late but fine"}

    quick = replace(SMALL, wall_seconds=3)
    assert _result(run_script(script, limits=quick, on_message=slow_human)) == "late but fine"
    stingy = replace(quick, host_wait_seconds=0.2)
    assert run_script(script, limits=stingy, on_message=slow_human).status == "timed_out"


def test_it_drops_lines_that_are_not_json_objects(run_script) -> None:
    outcome = run_script(
        """
        import json, sys
        sys.stdin.readline()
        print("hello from print()")
        print("[1, 2, 3]")
        print(json.dumps({"kind": "result", "result": "fine"}))
        print(json.dumps({"kind": "result", "result": "a second final is ignored"}))
        """
    )
    assert _result(outcome) == "fine"
    assert outcome.dropped_lines == 2


def test_it_kills_a_program_that_lingers_after_its_final_line(run_script) -> None:
    outcome = run_script(
        """
        import json, sys, time
        sys.stdin.readline()
        print(json.dumps({"kind": "result", "result": "done"}), flush=True)
        time.sleep(1000)
        """
    )
    assert _result(outcome) == "done"
    assert outcome.duration_ms < 3000


def test_it_reports_a_crash_without_a_final_line(run_script) -> None:
    outcome = run_script(
        """
        import os, sys
        sys.stdin.readline()
        sys.stderr.write("about to give up\\n")
        sys.stderr.flush()
        os._exit(3)
        """
    )
    assert (outcome.status, outcome.limit, outcome.exit_code) == ("crashed", None, 3)
    assert "about to give up" in outcome.stderr_tail


def test_it_kills_the_sandbox_when_the_callback_raises(run_script) -> None:
    def broken(message: dict) -> None:
        raise RuntimeError("the database went away")

    with pytest.raises(RuntimeError, match="database went away"):
        run_script(
            """
            import json, subprocess, sys, time
            sys.stdin.readline()
            subprocess.Popen(["/usr/bin/sleep", "1000"], start_new_session=True)
            print(json.dumps({"kind": "event", "event": {}}), flush=True)
            time.sleep(1000)
            """,
            on_message=broken,
        )


def test_it_reports_usage(run_tool) -> None:
    outcome = run_tool(
        """
        class Tools:
            def go(self) -> int:
                return sum(range(10**6))
        """
    )
    assert _result(outcome) == "499999500000"
    assert outcome.duration_ms > 0 and outcome.cpu_ms is not None and outcome.max_rss_kb > 1000


# Extra binds, cgroups


def test_extra_binds_are_read_only_and_a_bound_socket_answers(run_tool, tmp_path: Path) -> None:
    shared = Path(f"/tmp/toolhub-bind-{uuid.uuid4().hex[:8]}")
    shared.mkdir(mode=0o711)
    shared.chmod(0o711)
    try:
        (shared / "data.txt").write_text("read me")
        (shared / "data.txt").chmod(0o644)
        socket_path = shared / "egress.sock"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(socket_path))
        socket_path.chmod(0o666)
        server.listen()
        received = []

        def serve() -> None:
            connection, _ = server.accept()
            received.append(connection.recv(100))
            connection.sendall(b"pong")
            connection.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        report = _result(
            run_tool(
                """
                import socket

                class Tools:
                    def go(self) -> dict:
                        out = {"read": open("/opt/extra/data.txt").read()}
                        try:
                            open("/opt/extra/data.txt", "w")
                        except OSError as exc:
                            out["write"] = type(exc).__name__
                        client = socket.socket(socket.AF_UNIX)
                        client.connect("/run/egress.sock")
                        client.sendall(b"ping")
                        out["reply"] = client.recv(100).decode()
                        return out
                """,
                extra_binds=[(shared / "data.txt", "/opt/extra/data.txt"), (socket_path, "/run/egress.sock")],
            )
        )
        thread.join(5)
        server.close()
    finally:
        for entry in shared.iterdir():
            entry.unlink()
        shared.rmdir()
    assert report == {"read": "read me", "write": "OSError", "reply": "pong"}
    assert received == [b"ping"]


def test_it_removes_its_cgroups(run_tool) -> None:
    outcome = run_tool(
        """
        class Tools:
            def go(self) -> str:
                return "ok"
        """
    )
    assert _result(outcome) == "ok"
    for directory in _own_cgroup_dirs():
        # Only this process's runs: other test sessions may be running sandboxes.
        assert not list(directory.glob(f"toolhub-{os.getpid()}-*")), directory


# Run as a worker stand-in by test_a_worker_killed_mid_run_takes_its_sandbox_with_it.
_WORKER = """
import sys
from pathlib import Path
from toolhub.sandbox.launcher import Limits, run_sandboxed

def on_message(message):
    print("running", flush=True)

env, runtime, source = sys.argv[1:4]
request = {"op": "invoke", "source_path": "/opt/toolkit/toolkit.py", "tool": "go", "arguments": {}}
run_sandboxed(interpreter_env=Path(env), runtime_dir=Path(runtime), source_path=Path(source),
              request=request, limits=Limits(wall_seconds=60), on_message=on_message)
"""

# Plays the host's init: a child subreaper that reaps whatever the killed worker leaves to it,
# and exits once nothing of its descendants is left. It prints the worker's pid first.
_INIT = """
import ctypes, os, subprocess, sys
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
worker = subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]])
print(worker.pid, flush=True)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
"""


def test_a_worker_killed_mid_run_takes_its_sandbox_with_it(
    run_tool, tmp_path: Path, sandbox_env: Path, sandbox_runtime: Path
) -> None:
    source = tmp_path / "toolkit.py"
    source.write_text(
        textwrap.dedent(
            """
            import subprocess, time

            class Tools:
                async def go(self, __event_emitter__) -> str:
                    subprocess.Popen(["/usr/bin/sleep", "1000"], start_new_session=True)
                    await __event_emitter__({"type": "status", "data": {"description": "started"}})
                    time.sleep(1000)
            """
        )
    )
    init = subprocess.Popen(
        [sys.executable, "-c", _INIT, _WORKER, str(sandbox_env), str(sandbox_runtime), str(source)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        worker_pid = int(_read_line(init, timeout=10))
        assert _read_line(init, timeout=30) == "running"
        os.kill(worker_pid, signal.SIGKILL)
        # The init stand-in exits only once the worker and everything it started are gone.
        init.wait(timeout=10)
    finally:
        if init.poll() is None:
            init.kill()
            init.wait()
        init.stdout.close()
    # The dead worker's cgroups are empty now, and the next run removes them.
    _result(run_tool("class Tools:\n    def go(self) -> str:\n        return 'ok'\n"))
    for directory in _own_cgroup_dirs():
        assert not list(directory.glob(f"toolhub-{worker_pid}-*")), directory


# Preconditions


def test_it_refuses_to_run_without_bubblewrap(run_tool) -> None:
    canary = Path(f"/tmp/toolhub-ran-unsandboxed-{uuid.uuid4().hex}")
    with pytest.raises(SandboxUnavailable, match="bubblewrap") as caught:
        run_tool(
            f"""
            open({str(canary)!r}, "w").write("ran")

            class Tools:
                def go(self) -> str:
                    return "ran"
            """,
            bwrap="/nonexistent/bwrap",
        )
    assert "apt-get install bubblewrap" in str(caught.value)
    assert not canary.exists()
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        check_sandbox(bwrap="/nonexistent/bwrap")


def test_it_refuses_a_missing_sandbox_user(run_tool) -> None:
    with pytest.raises(SandboxUnavailable, match="useradd --system"):
        run_tool("class Tools:\n    pass\n", sandbox_user="toolhub-no-such-user")


def test_it_reports_a_sandbox_that_bubblewrap_cannot_build(run_tool) -> None:
    with pytest.raises(SandboxUnavailable, match="could not build the sandbox"):
        run_tool("class Tools:\n    pass\n", extra_binds=[(Path("/nonexistent/dir"), "/opt/extra")])


def test_check_sandbox_passes_on_this_machine() -> None:
    check_sandbox()


def test_the_runtime_copy_is_readable_by_everyone_and_reused(tmp_path: Path, sandbox_data_dir: Path) -> None:
    source = tmp_path / "runtime"
    (source / "sub").mkdir(parents=True)
    (source / "main.py").write_text("print('main')\n")
    (source / "sub" / "mod.py").write_text("VALUE = 1\n")
    (source / "sub" / "__pycache__").mkdir()
    (source / "sub" / "__pycache__" / "stale.pyc").write_bytes(b"junk")
    (source / "link.py").symlink_to("/etc/passwd")
    for path in (source, source / "sub"):
        path.chmod(0o700)
    (source / "main.py").chmod(0o600)

    first = ensure_runtime_copy(runtime_src=source, data_dir=sandbox_data_dir)
    assert ensure_runtime_copy(runtime_src=source, data_dir=sandbox_data_dir) == first
    assert first.parent == sandbox_data_dir / "runtime"
    assert not (first / "link.py").exists() and not (first / "sub" / "__pycache__" / "stale.pyc").exists()
    for directory, _dirs, files in os.walk(first):
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o755
        for name in files:
            assert stat.S_IMODE(os.lstat(os.path.join(directory, name)).st_mode) == 0o644
    compiled = list((first / "sub" / "__pycache__").glob("mod.*.pyc"))
    assert compiled and b"/opt/runtime/sub/mod.py" in compiled[0].read_bytes()

    (source / "sub" / "mod.py").write_text("VALUE = 2\n")
    second = ensure_runtime_copy(runtime_src=source, data_dir=sandbox_data_dir)
    assert second != first and (second / "sub" / "mod.py").read_text() == "VALUE = 2\n"
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".staging")]


# Helpers


def _own_cgroup_dirs() -> list[Path]:
    """This process's cgroup directories in the v1 hierarchies the launcher uses."""
    directories = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in ("memory", "pids", "cpuacct"):
            directory = Path("/sys/fs/cgroup") / controller / path.lstrip("/")
            if controller in controllers.split(",") and directory.is_dir():
                directories.append(directory)
    return directories


def _read_line(process: subprocess.Popen, *, timeout: float) -> str:
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, "no output in time"
    return process.stdout.readline().strip()


def _snapshot(root: Path) -> set[tuple[str, int, int, int]]:
    """Every entry under root with its type bits, size and mtime, symlinks not followed."""
    entries = set()
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            info = os.lstat(os.path.join(directory, name))
            entries.add((os.path.join(directory, name), stat.S_IFMT(info.st_mode), info.st_size, info.st_mtime_ns))
    return entries
