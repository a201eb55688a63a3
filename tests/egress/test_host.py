"""Egress cannot reach the worker host itself, and the per-run proxy socket is the run's alone.

The test network's host end (`TestNetwork.host_address`, a public-looking /32 on the root
namespace's end of the veth pair) is an address of this host, like a worker's public address.
A server bound to 0.0.0.0 on the host answers on it, so an empty allowlist must still refuse
`CONNECT` to it."""

from __future__ import annotations

import os
import pwd
import socket
import stat
import subprocess
import threading
import time
import uuid

import pytest

from tests.egress_fixtures import TestNetwork, test_network_fixture  # noqa: F401 - the fixture
from tests.sandbox_fixtures import require_sandbox
from toolhub.runs.models import RunStatus
from toolhub.runs.services import invocation_create
from toolhub.runs.tasks import run_invocation
from toolhub.sandbox.egress.rules import host_address_refusal_reason, host_local_networks
from toolhub.toolkits import sandboxing as run_sandbox
from toolhub.toolkits.models import Status
from toolhub.toolkits.services import toolkit_set_egress

PROBE = '''"""
title: Host Probe
author: ToolHub tests
description: Calls addresses through the egress proxy and looks at its socket.
version: 1.0.0
"""

import os
import urllib.request


class Tools:
    def fetch_all(self, urls: list[str]) -> list[str]:
        """GET each URL; one line per URL, the outcome or the error."""
        outcomes = []
        for url in urls:
            try:
                with urllib.request.urlopen(url, timeout=20) as response:
                    outcomes.append(f"ok {response.status}")
            except Exception as exc:
                outcomes.append(f"{type(exc).__name__}: {exc}")
        return outcomes

    def socket_facts(self, __event_emitter__=None) -> str:
        """Say who owns the proxy socket, after the host had a look at it."""
        __event_emitter__({"type": "status", "data": {"description": "look now", "done": False}})
        st = os.stat("/run/egress.sock")
        return f"{st.st_uid == os.getuid()} {oct(stat_mode(st.st_mode))}"


def stat_mode(mode):
    return mode & 0o777
'''

FIB_TRIE = """Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 45.45.7.46
        /32 link UNICAST
Local:
  +-- 0.0.0.0/0 3 0 5
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
     |-- 203.0.113.9
        /32 link BROADCAST
     |-- 45.45.7.46
        /32 host LOCAL
"""
IF_INET6 = "2a0100000000000000000000000000aa 04 40 00 80     eth0\n00000000000000000000000000000001 01 80 10 80       lo\n"


def test_the_hosts_own_addresses_are_read_from_the_kernels_local_routes():
    networks = host_local_networks(FIB_TRIE, IF_INET6)
    for own in ("45.45.7.46", "127.0.0.1", "127.255.0.9", "2a01::aa", "::1", "::ffff:45.45.7.46"):
        assert host_address_refusal_reason(own, networks) == "an address of the worker host itself", own
    for other in ("45.45.7.45", "203.0.113.9", "2a01::ab", "8.8.8.8"):
        assert host_address_refusal_reason(other, networks) is None, other


def test_the_live_host_addresses_include_loopback():
    networks = host_local_networks()
    assert host_address_refusal_reason("127.0.0.1", networks) is not None


class _Listener:
    """A TCP server on 0.0.0.0 of this host, as a careless host service would be."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        for port in range(21500, 21550):
            try:
                self.sock.bind(("0.0.0.0", port))
                break
            except OSError:
                continue
        self.port = self.sock.getsockname()[1]
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.accepted = 0
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi")
            conn.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join(5)
        self.sock.close()


@pytest.fixture
def probe(upload, build, admin):
    require_sandbox()
    toolkit = build(upload(admin, PROBE, slug=f"host_probe_{uuid.uuid4().hex[:6]}"))
    assert toolkit.current_revision.status == Status.READY, toolkit.current_revision.status_detail
    toolkit_set_egress(toolkit=toolkit, granted=True, hosts=[], by=admin)
    toolkit.refresh_from_db()
    return toolkit


def _run(toolkit, tool, user, **arguments):
    invocation = invocation_create(toolkit=toolkit, tool=tool, arguments=arguments, user=user)
    run_invocation.run(str(invocation.id))
    invocation.refresh_from_db()
    return invocation


@pytest.mark.sandbox
@pytest.mark.django_db(transaction=True)
def test_the_worker_hosts_own_public_address_is_refused(probe, admin, test_network: TestNetwork):
    listener = _Listener()
    try:
        own = test_network.host_address
        # The service answers on the host's address (the test process is on the host).
        with socket.create_connection((own, listener.port), timeout=5) as direct:
            assert direct.recv(100).startswith(b"HTTP/1.0 200")
        seen_before = listener.accepted
        urls = [f"http://{own}:{listener.port}/", f"http://[::ffff:{own}]:{listener.port}/",
                f"{test_network.url('/reachable')}"]
        started = time.monotonic()
        invocation = _run(probe, "fetch_all", admin, urls=urls)
        assert invocation.status == RunStatus.SUCCEEDED, invocation.error
        first, mapped, reachable = invocation.result
        assert f"ToolHub egress refused: {own} is an address of the worker host itself" in first, first
        assert "an address of the worker host itself" in mapped, mapped
        assert reachable == "ok 200", reachable
        assert time.monotonic() - started < 15
        assert listener.accepted == seen_before, "a refused connection reached the host's service"
        reasons = [entry["reason"] for entry in invocation.egress["refused"]]
        assert len(reasons) == 2 and all("worker host itself" in reason for reason in reasons)
    finally:
        listener.close()


@pytest.mark.sandbox
@pytest.mark.django_db(transaction=True)
def test_the_proxy_socket_belongs_to_the_runs_uid_alone(probe, admin, monkeypatch):
    """The socket is 0600 and owned by the sandbox uid, its directory 0700: another local account
    can neither list the directory nor connect, while the sandbox can."""
    seen: dict = {}
    original = run_sandbox.sandboxlib.run_sandboxed
    nobody = pwd.getpwnam("nobody")

    def watching(**kwargs):
        owned = list(kwargs.get("owned_paths") or [])
        on_message = kwargs["on_message"]

        def spy(message):
            if message.get("kind") == "event" and not seen:
                directory, sock = owned
                seen["dir"] = os.stat(directory)
                seen["sock"] = os.stat(sock)
                seen["other"] = subprocess.run(
                    ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups", "--",
                     "/usr/bin/python3.11", "-c",
                     "import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])", str(sock)],
                    capture_output=True, text=True, timeout=30,
                )
            return on_message(message)

        kwargs["on_message"] = spy
        return original(**kwargs)

    monkeypatch.setattr(run_sandbox.sandboxlib, "run_sandboxed", watching)
    invocation = _run(probe, "socket_facts", admin)
    assert invocation.status == RunStatus.SUCCEEDED, (invocation.error, invocation.traceback)
    assert invocation.result == "True 0o600"
    assert stat.S_IMODE(seen["dir"].st_mode) == 0o700
    assert stat.S_IMODE(seen["sock"].st_mode) == 0o600 and stat.S_ISSOCK(seen["sock"].st_mode)
    assert seen["dir"].st_uid == seen["sock"].st_uid != 0
    assert seen["other"].returncode != 0 and "PermissionError" in seen["other"].stderr
