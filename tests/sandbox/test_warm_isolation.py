"""The hostile suite of tests/sandbox/test_isolation.py, unchanged, on warm sandboxes.

The test functions are imported from there as they are; only the `run_tool` fixture differs:
here it runs each toolkit on a warm sandbox of a `WarmPool` (toolhub.sandbox.warm_pool) that lives
for the whole module, so most calls land on a sandbox that served another hostile toolkit just
before. Left out, and why:

- the tests that assert the tool's process is pid 1 (`..._as_the_unprivileged_user...`,
  `..._only_usr_the_environment...`), and `..._hides_the_settings_the_database_and_etc_shadow`,
  which expects `/proc/1/root/etc/shadow` to be missing: on a warm sandbox pid 1 is the fork
  server, not dumpable, so `/proc/1/root` cannot even be opened (PermissionError instead of
  FileNotFoundError); tests/sandbox/test_warm.py checks what that changes;
- the tests of launcher options a warm sandbox does not take (`extra_binds`, another
  `sandbox_user` or `bwrap`), of the launcher's own cgroups and of a worker killed mid-run,
  and the ones that bypass `run_tool` (`run_script`, `run_sandboxed` directly).
"""

from __future__ import annotations

import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest_plugins = ["tests.sandbox_fixtures"]

from tests.sandbox.test_isolation import (  # noqa: E402,F401 - collected here with this module's run_tool
    test_it_cannot_reach_redis_postgresql_or_any_host_port,
    test_it_caps_file_size,
    test_it_caps_tmp_space,
    test_it_hides_the_workers_environment_variables,
    test_it_kills_a_setsid_child_that_outlives_the_call,
    test_it_kills_a_setsid_child_when_the_call_times_out,
    test_it_passes_no_descriptor_of_the_worker,
    test_it_refuses_writes_outside_tmp_and_changes_nothing_on_the_host,
    test_it_reports_usage,
    test_it_stops_a_10_gib_allocation,
    test_it_stops_a_cpu_spin,
    test_it_stops_a_fork_bomb,
    test_it_stops_a_growing_allocation,
    test_it_stops_a_run_when_it_is_cancelled_from_another_thread,
    test_it_stops_a_sleeper_at_the_wall_clock,
    test_it_stops_a_tool_printing_a_gibibyte,
    test_it_stops_an_endless_line_on_the_protocol_stream,
    test_it_streams_events_and_answers_calls_through_the_runtime,
    test_the_host_never_sees_the_symlinks_the_tool_leaves,
)
from tests.sandbox_fixtures import POOL_FIRST, require_sandbox, sandbox_processes  # noqa: E402
from toolhub.sandbox.launcher import Limits, SandboxOutcome  # noqa: E402
from toolhub.sandbox.uids import UidPool  # noqa: E402
from toolhub.sandbox.warm_pool import WarmPool  # noqa: E402

pytestmark = pytest.mark.sandbox


@pytest.fixture(autouse=True)
def _nothing_survives(warm_pool: WarmPool) -> Iterator[None]:
    """As in tests/sandbox/test_isolation.py, except for the idle warm sandbox itself: its bubblewrap
    and its fork server, and nothing else."""
    require_sandbox()
    yield
    allowed = set()
    for sandbox in warm_pool.idle():
        allowed.add(sandbox.process.pid)
        children = Path(f"/proc/{sandbox.process.pid}/task/{sandbox.process.pid}/children").read_text().split()
        allowed.update(int(child) for child in children)
    deadline = time.monotonic() + 1
    while True:
        left = [line for line in sandbox_processes() if int(line.split()[0]) not in allowed]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert left == [], f"processes of the sandbox users survived the test: {left}"
    # The fork server is alone in its sandbox between calls.
    assert len(allowed) == 2 * len(warm_pool.idle()), allowed


@pytest.fixture(scope="module")
def warm_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WarmPool]:
    pool = WarmPool(size=1, uid_pool=UidPool(first=POOL_FIRST, size=4, lock_dir=tmp_path_factory.mktemp("uid-locks")))
    yield pool
    pool.close()


@pytest.fixture
def run_tool(
    tmp_path: Path, sandbox_env: Path, sandbox_runtime: Path, warm_pool: WarmPool
) -> Iterator[Callable[..., SandboxOutcome]]:
    from tests.sandbox.test_isolation import SMALL

    def _run(
        source: str,
        *,
        arguments: dict | None = None,
        limits: Limits = SMALL,
        on_message: Callable[[dict], dict | None] | None = None,
        tool: str = "go",
        cancel: threading.Event | None = None,
    ) -> SandboxOutcome:
        path = tmp_path / f"toolkit-{uuid.uuid4().hex[:8]}.py"
        path.write_text(textwrap.dedent(source))
        return warm_pool.run(
            cancel=cancel,
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
        )

    yield _run
    # Whatever a test did, the pool's sandbox answers the next call or has been retired.
    for sandbox in warm_pool.idle():
        assert sandbox.usable(), sandbox.problems
