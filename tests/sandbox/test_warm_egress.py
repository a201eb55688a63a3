"""Warm sandboxes with an egress grant (toolhub.sandbox.warm with an EgressPolicy), for real: a
real sandbox, its real proxy, and the private test network of tests/egress_fixtures.py as the
allowed host (a public-looking address that exists only on this machine).

What must hold: calls of one policy reuse one sandbox and its proxy, each call's report and caps
are its own, another policy (or none) never gets that sandbox, and the proxy, its socket and its
thread go when the sandbox retires.
"""

from __future__ import annotations

import os
import stat
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest_plugins = ["tests.sandbox_fixtures"]

from tests.egress_fixtures import TestNetwork, test_network_fixture  # noqa: E402,F401 - the fixture
from tests.sandbox.test_warm import LIMITS  # noqa: E402
from tests.sandbox_fixtures import POOL_FIRST, require_sandbox, wait_for_no_sandbox_processes  # noqa: E402
from toolhub.sandbox.egress import EgressPolicy  # noqa: E402
from toolhub.sandbox.egress.endpoint import SANDBOX_SOCKET  # noqa: E402
from toolhub.sandbox.launcher import SandboxOutcome  # noqa: E402
from toolhub.sandbox.uids import UidPool  # noqa: E402
from toolhub.sandbox.warm import WarmSandbox  # noqa: E402
from toolhub.sandbox.warm_pool import WarmPool  # noqa: E402

pytestmark = pytest.mark.sandbox

PROBE = """
import os, stat, urllib.request

class Tools:
    def go(self, urls: list) -> dict:
        outcomes = []
        for url in urls:
            try:
                with urllib.request.urlopen(url, timeout=20) as response:
                    outcomes.append(f"ok {response.read().decode()}")
            except Exception as exc:
                outcomes.append(f"{type(exc).__name__}: {exc}")
        try:
            st = os.stat("/run/egress.sock")
            socket = [st.st_uid == os.getuid(), oct(stat.S_IMODE(st.st_mode))]
        except FileNotFoundError:
            socket = None
        return {"outcomes": outcomes, "socket": socket}
"""


def _proxy_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "toolhub-egress"]


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[WarmPool]:
    require_sandbox()
    threads_before = set(_proxy_threads())
    warm = WarmPool(size=1, uid_pool=UidPool(first=POOL_FIRST, size=4, lock_dir=tmp_path / "uid-locks"))
    yield warm
    warm.close()
    left = wait_for_no_sandbox_processes()
    assert left == [], f"processes of the sandbox users survived the test: {left}"
    assert set(_proxy_threads()) <= threads_before, "a warm sandbox's proxy outlived it"


@pytest.fixture
def call(tmp_path: Path, sandbox_env: Path, sandbox_runtime: Path, pool: WarmPool) -> Callable[..., SandboxOutcome]:
    source = tmp_path / "probe.py"
    source.write_text(textwrap.dedent(PROBE))

    def _call(urls: list[str], egress: EgressPolicy | None) -> SandboxOutcome:
        return pool.run(
            interpreter_env=sandbox_env,
            runtime_dir=sandbox_runtime,
            source_path=source,
            request={
                "op": "invoke",
                "source_path": "/opt/toolkit/toolkit.py",
                "tool": "go",
                "arguments": {"urls": urls},
                "egress": None if egress is None else {"socket_path": SANDBOX_SOCKET},
            },
            limits=LIMITS,
            on_message=lambda message: None,
            egress=egress,
        )

    return _call


def _result(outcome: SandboxOutcome) -> dict:
    assert outcome.status == "ok", outcome
    assert outcome.final is not None and outcome.final["kind"] == "result", outcome
    return outcome.final["result"]


def _only_sandbox(pool: WarmPool) -> WarmSandbox:
    idle = pool.idle()
    assert len(idle) == 1, idle
    return idle[0]


def _policy(*hosts: str, max_connections: int = 10) -> EgressPolicy:
    return EgressPolicy(allow_hosts=list(hosts), max_bytes=1 << 20, max_connections=max_connections)


def _token() -> str:
    return f"/t-{uuid.uuid4().hex}"


def test_a_granted_toolkits_calls_reuse_one_sandbox_and_each_gets_its_own_report(
    call, pool: WarmPool, test_network: TestNetwork
) -> None:
    policy = _policy(test_network.address)
    first_path, second_path, third_path = _token(), _token(), _token()

    first = call([test_network.url(first_path)], policy)
    sandbox = _only_sandbox(pool)
    second = call([test_network.url(second_path), test_network.url(third_path)], policy)

    assert _only_sandbox(pool) is sandbox and sandbox.calls == 2 and pool.started == 1
    for outcome, paths in ((first, [first_path]), (second, [second_path, third_path])):
        outcomes = _result(outcome)["outcomes"]
        assert [line.startswith("ok ") for line in outcomes] == [True] * len(paths), outcomes
        assert [path in line for path, line in zip(paths, outcomes, strict=True)] == [True] * len(paths)
    seen = test_network.paths_seen()
    assert {first_path, second_path, third_path} <= set(seen)
    # Each report counts its own call's connections and bytes, nothing of the other's.
    assert first.egress is not None and second.egress is not None
    assert first.egress["connections"] == 1 and second.egress["connections"] == 2
    [host] = second.egress["hosts"]
    assert (host["host"], host["port"], host["connections"]) == (test_network.address, test_network.http_port, 2)
    assert first.egress["bytes_in"] < second.egress["bytes_in"]


def test_a_refused_host_is_refused_and_reported_by_that_call_alone(
    call, pool: WarmPool, test_network: TestNetwork
) -> None:
    policy = _policy(test_network.address)
    refused = call([test_network.url(_token()), "http://api.example.org/x"], policy)
    after = call([test_network.url(_token())], policy)

    allowed_line, refused_line = _result(refused)["outcomes"]
    reason = f"api.example.org is not in this toolkit's allowlist ({test_network.address})"
    assert allowed_line.startswith("ok ") and refused_line == f"HTTPError: HTTP Error 403: ToolHub egress refused: {reason}"
    assert refused.egress is not None and refused.egress["refused"] == [{"host": "api.example.org", "port": 80, "reason": reason}]
    assert after.egress is not None and after.egress["refused"] == [] and after.egress["connections"] == 1
    assert pool.started == 1


def test_the_connection_cap_is_per_call(call, pool: WarmPool, test_network: TestNetwork) -> None:
    policy = _policy(test_network.address, max_connections=1)
    urls = [test_network.url(_token()), test_network.url(_token())]

    first, second = call(urls, policy), call(urls, policy)

    for outcome in (first, second):
        reached, capped = _result(outcome)["outcomes"]
        assert reached.startswith("ok ") and "connection limit reached (1 per invocation)" in capped
        assert outcome.egress is not None and outcome.egress["limits_reached"] == ["connections"]
    assert pool.started == 1


def test_another_policy_or_none_never_gets_the_sandbox_of_the_old_one(
    call, pool: WarmPool, test_network: TestNetwork
) -> None:
    _result(call([test_network.url(_token())], _policy(test_network.address)))
    granted = _only_sandbox(pool)

    # The grant's hosts changed: a sandbox of its own, whose proxy applies the new list.
    widened = call(["http://api.example.org/x"], _policy(test_network.address, "other.example.org"))
    assert pool.started == 2 and granted in pool.idle()
    assert widened.egress is not None
    [refusal] = widened.egress["refused"]
    assert refusal["reason"].endswith(f"allowlist ({test_network.address}, other.example.org)")

    # No grant (revoked, held or not entrusted): a sandbox without the proxy's socket at all.
    path = _token()
    cut_off = call([test_network.url(path)], None)
    assert pool.started == 3 and cut_off.egress is None
    assert _result(cut_off)["socket"] is None
    [line] = _result(cut_off)["outcomes"]
    assert "this toolkit has no network egress" in line, line
    assert path not in test_network.paths_seen()
    # The old grant again: its own sandbox, still warm.
    again = call([test_network.url(_token())], _policy(test_network.address))
    assert pool.started == 3 and again.egress is not None and again.egress["connections"] == 1
    assert granted.calls == 2


def test_the_socket_is_the_sandbox_uids_alone_and_goes_with_the_sandbox(
    call, pool: WarmPool, test_network: TestNetwork
) -> None:
    outcome = call([test_network.url(_token())], _policy(test_network.address))
    assert _result(outcome)["socket"] == [True, "0o600"]
    sandbox = _only_sandbox(pool)
    endpoint = sandbox._endpoint
    assert endpoint is not None
    directory, socket_path = endpoint.directory, endpoint.socket_path
    for path, mode in ((directory, 0o700), (socket_path, 0o600)):
        info = os.stat(path)
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (sandbox.uid, mode), path
    assert endpoint.handle.alive() and endpoint.handle._thread in _proxy_threads()

    pool.idle_timeout = 0
    pool.reap()

    assert sandbox.retired and pool.idle() == []
    deadline = time.monotonic() + 5
    while endpoint.handle._thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not endpoint.handle._thread.is_alive()
    assert not socket_path.exists() and not directory.exists()


def test_a_sandbox_whose_proxy_stopped_is_never_used_again(call, pool: WarmPool, test_network: TestNetwork) -> None:
    policy = _policy(test_network.address)
    _result(call([test_network.url(_token())], policy))
    sandbox = _only_sandbox(pool)
    assert sandbox._endpoint is not None
    sandbox._endpoint.handle.stop()
    assert not sandbox.usable()

    outcome = call([test_network.url(_token())], policy)

    assert _result(outcome)["outcomes"][0].startswith("ok ")
    assert sandbox.retired and pool.started == 2 and _only_sandbox(pool) is not sandbox
