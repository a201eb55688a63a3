"""Tests of the egress proxy (toolhub.sandbox.egress.proxy) and the in-sandbox forwarder.

Nothing here reaches the internet. Test servers listen on 127.0.0.1, and the proxy is told
about them in the only way it allows: a fake resolver maps made-up names (`*.example.test`) to
127.0.0.1, and `test_only_loopback_targets` exempts exactly those (ip, port) pairs from the
loopback refusal. Where a test needs a "public" address, an injected `connect` records the
address the proxy dialled and connects to a local server instead.
"""

from __future__ import annotations

import contextlib
import datetime
import inspect
import ipaddress
import json
import os
import shutil
import socket
import socketserver
import ssl
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox_fixtures import require_sandbox
from toolhub.runtime import egress_forwarder
from toolhub.runtime.egress_forwarder import EgressForwarder, proxy_environment
from toolhub.sandbox.egress import proxy as egress
from toolhub.sandbox.egress.proxy import (
    EgressPolicy,
    EgressProxy,
    ProxyHandle,
    address_refusal_reason,
    host_matches_allowlist,
    run_proxy_in_thread,
    start_proxy_thread,
    validate_host_pattern,
)

pytestmark = pytest.mark.timeout(60)

FORWARDER_FILE = Path(egress_forwarder.__file__)
# A public address that no test ever reaches: an injected `connect` stands in for it.
PUBLIC_IP = "93.184.216.34"
BIG = 10**9


# Local servers


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


class _Web(BaseHTTPRequestHandler):
    """Answers every request with JSON describing what it received."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while (size := int(self.rfile.readline().split(b";")[0], 16)) > 0:
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            body = self.rfile.read(length)
        if self.path.startswith("/big"):
            payload = b"x" * 5000
        else:
            payload = json.dumps(
                {
                    "method": self.command,
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": body.decode(),
                }
            ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Keep-Alive", "timeout=5")
        self.send_header("Connection", "keep-alive")
        self.send_header("X-Server", "test")
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


class _ThreadingTCP(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = _ThreadingTCP(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def web_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Web)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # UNIX socket paths are limited to 108 bytes, so not pytest's long tmp_path.
    path = Path(tempfile.mkdtemp(prefix="egress-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


# The proxy under test


class FakeResolver:
    """Answers from a table; a name mapped to several lists answers with the next one each time."""

    def __init__(self, table: dict[str, list[str] | list[list[str]]]) -> None:
        self.table = table
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        answer = self.table.get(host)
        if answer is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if answer and isinstance(answer[0], list):
            return list(answer.pop(0))  # type: ignore[arg-type]
        return list(answer)  # type: ignore[arg-type]


class RedirectingConnect:
    """Records the address the proxy dials and connects to a local port instead."""

    def __init__(self, local_port: int | None) -> None:
        self.local_port = local_port
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, ip: str, port: int) -> Any:
        import asyncio

        self.calls.append((ip, port))
        if self.local_port is None:
            raise AssertionError(f"the proxy must not connect anywhere, but dialled {ip}:{port}")
        return await asyncio.open_connection("127.0.0.1", self.local_port)


@pytest.fixture
def start_proxy(socket_dir: Path) -> Iterator[Callable[..., ProxyHandle]]:
    handles: list[ProxyHandle] = []

    def start(
        *,
        allow_hosts: list[str] | None = None,
        max_bytes: int = BIG,
        max_connections: int = 100,
        names: FakeResolver | None = None,
        connect: RedirectingConnect | None = None,
        targets: tuple[tuple[str, int], ...] = (),
    ) -> ProxyHandle:
        proxy = EgressProxy(
            EgressPolicy(allow_hosts=allow_hosts, max_bytes=max_bytes, max_connections=max_connections),
            socket_dir / f"proxy{len(handles)}.sock",
            resolver=names or FakeResolver({}),
            connect=connect,
            test_only_loopback_targets=targets,
        )
        handle = start_proxy_thread(proxy)
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        handle.stop()


# Talking to the proxy socket


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while data := sock.recv(65536):
        chunks.append(data)
    return b"".join(chunks)


def exchange(handle: ProxyHandle, raw: bytes) -> bytes:
    """Send raw bytes to the proxy socket and read until it closes the connection."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(handle.socket_path)
        sock.sendall(raw)
        return _read_all(sock)


def open_tunnel(handle: ProxyHandle, target: str, early: bytes = b"") -> tuple[socket.socket, bytes]:
    """Send CONNECT and return the socket and the proxy's response head."""
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    sock.connect(handle.socket_path)
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode() + early)
    head = b""
    while b"\r\n\r\n" not in head:
        data = sock.recv(1)
        if not data:
            break
        head += data
    return sock, head


def connect_status(handle: ProxyHandle, target: str) -> tuple[int, str]:
    """CONNECT and return (status, body) for a refused tunnel, or (200, "") for an open one."""
    sock, head = open_tunnel(handle, target)
    with sock:
        status = int(head.split(b" ")[1])
        body = "" if status == 200 else _read_all(sock).decode()
    return status, body


def split_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    return int(lines[0].split(" ")[1]), headers, body


def get(handle: ProxyHandle, url: str, extra: str = "") -> tuple[int, dict[str, str], bytes]:
    return split_response(exchange(handle, f"GET {url} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode()))


# CONNECT


def test_it_tunnels_connect_to_an_allowed_name(start_proxy, echo_port: int) -> None:
    handle = start_proxy(
        allow_hosts=["echo.example.test"],
        names=FakeResolver({"echo.example.test": ["127.0.0.1"]}),
        targets=(("127.0.0.1", echo_port),),
    )
    sock, head = open_tunnel(handle, f"echo.example.test:{echo_port}")
    with sock:
        assert head.startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"hello through the tunnel")
        sock.shutdown(socket.SHUT_WR)
        assert _read_all(sock) == b"hello through the tunnel"

    report = handle.stop()
    assert report["hosts"] == [
        {
            "host": "echo.example.test",
            "port": echo_port,
            "addresses": ["127.0.0.1"],
            "connections": 1,
            "bytes_in": 24,
            "bytes_out": 24,
        }
    ]
    assert report["refused"] == []
    assert report["connections"] == 1


def test_it_passes_on_bytes_sent_right_after_the_connect_head(start_proxy, echo_port: int) -> None:
    # TLS clients may send their ClientHello in the same packet as CONNECT.
    handle = start_proxy(
        names=FakeResolver({"echo.example.test": ["127.0.0.1"]}),
        targets=(("127.0.0.1", echo_port),),
    )
    sock, head = open_tunnel(handle, f"ECHO.example.test.:{echo_port}", early=b"early bytes")
    with sock:
        assert head.startswith(b"HTTP/1.1 200 ")
        sock.shutdown(socket.SHUT_WR)
        assert _read_all(sock) == b"early bytes"
    assert handle.report()["hosts"][0]["host"] == "echo.example.test"


# Plain HTTP


def test_it_forwards_a_plain_http_get(start_proxy, web_port: int) -> None:
    handle = start_proxy(
        allow_hosts=["web.example.test"],
        names=FakeResolver({"web.example.test": ["127.0.0.1"]}),
        targets=(("127.0.0.1", web_port),),
    )
    status, headers, body = get(
        handle,
        f"http://web.example.test:{web_port}/path?q=1#fragment",
        "Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\n"
        "Connection: keep-alive, X-Drop\r\nX-Drop: 1\r\nKeep-Alive: 300\r\nX-Keep: 2\r\n",
    )
    assert status == 200
    seen = json.loads(body)
    assert seen["method"] == "GET"
    assert seen["path"] == "/path?q=1"
    assert seen["headers"]["host"] == f"web.example.test:{web_port}"
    assert seen["headers"]["x-keep"] == "2"
    assert seen["headers"]["connection"] == "close"
    for dropped in ("proxy-authorization", "proxy-connection", "x-drop", "keep-alive"):
        assert dropped not in seen["headers"]
    # The server's own hop-by-hop headers do not reach the client either.
    assert headers["connection"] == "close"
    assert "keep-alive" not in headers
    assert headers["x-server"] == "test"

    entry = handle.report()["hosts"][0]
    assert entry["host"] == "web.example.test"
    assert entry["bytes_in"] > len(body)
    assert entry["bytes_out"] > 0


def test_it_forwards_a_request_body_with_content_length(start_proxy, web_port: int) -> None:
    handle = start_proxy(
        names=FakeResolver({"web.example.test": ["127.0.0.1"]}),
        targets=(("127.0.0.1", web_port),),
    )
    raw = (
        f"POST http://web.example.test:{web_port}/submit HTTP/1.1\r\n"
        "Content-Type: text/plain\r\nContent-Length: 11\r\n\r\nhello world"
    )
    status, _, body = split_response(exchange(handle, raw.encode()))
    assert status == 200
    assert json.loads(body)["body"] == "hello world"


def test_it_forwards_a_chunked_request_body(start_proxy, web_port: int) -> None:
    handle = start_proxy(
        names=FakeResolver({"web.example.test": ["127.0.0.1"]}),
        targets=(("127.0.0.1", web_port),),
    )
    raw = (
        f"POST http://web.example.test:{web_port}/submit HTTP/1.1\r\n"
        "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    )
    status, _, body = split_response(exchange(handle, raw.encode()))
    assert status == 200
    assert json.loads(body)["body"] == "hello world"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("GET /path HTTP/1.1\r\nHost: a\r\n\r\n", "absolute-form"),
        ("GET https://web.example.test/ HTTP/1.1\r\n\r\n", "CONNECT"),
        ("GET http://user:pw@web.example.test/ HTTP/1.1\r\n\r\n", "credentials"),
        ("GET http://web.example.test:99999/ HTTP/1.1\r\n\r\n", "invalid URL"),
        (
            "POST http://web.example.test/ HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            "both",
        ),
        ("GET http://web.example.test/ HTTP/1.1\r\nX: a\nInjected: b\r\n\r\n", "stray"),
        ("GET http://web.example.test/ HTTP/1.1\r\n folded\r\n\r\n", "malformed"),
        ("CONNECT web.example.test HTTP/1.1\r\n\r\n", "host:port"),
        ("CONNECT ::1:443 HTTP/1.1\r\n\r\n", "host:port"),
        ("hello\r\n\r\n", "request line"),
        ("GET http://web.example.test/ HTTP/2.0\r\n\r\n", "version"),
    ],
)
def test_it_rejects_malformed_requests(start_proxy, raw: str, message: str) -> None:
    names = FakeResolver({"web.example.test": [PUBLIC_IP]})
    handle = start_proxy(names=names, connect=RedirectingConnect(None))
    status, _, body = split_response(exchange(handle, raw.encode()))
    assert status == 400
    assert message in body.decode()
    assert names.calls == []


# Refusals of addresses


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.254", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("192.0.2.10", "documentation"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("::ffff:127.0.0.1", "IPv4-mapped form of 127.0.0.1"),
        ("::ffff:169.254.169.254", "IPv4-mapped form of 169.254.169.254"),
        ("::127.0.0.1", "IPv4-compatible"),
        ("64:ff9b::a00:1", "NAT64 form of 10.0.0.1"),
        ("2002:7f00:1::1", "6to4 form of 127.0.0.1"),
        ("2002:a9fe:a9fe::1", "6to4 form of 169.254.169.254"),
        ("2001:0:808:808:0:0:80ff:fffe", "Teredo client form of 127.0.0.1"),
        ("fe80::1", "link-local"),
        ("fc00::1", "unique local"),
        ("fd12:3456::1", "unique local"),
        ("fec0::1", "site-local"),
        ("ff02::1", "multicast"),
        ("2001:db8::1", "documentation"),
    ],
)
def test_it_refuses_names_that_resolve_to_non_public_addresses(start_proxy, address: str, reason: str) -> None:
    connect = RedirectingConnect(None)
    handle = start_proxy(names=FakeResolver({"api.example.test": [address]}), connect=connect)

    status, body = connect_status(handle, "api.example.test:443")

    assert status == 403
    assert body.startswith("ToolHub egress refused: api.example.test resolves to ")
    assert reason in body
    assert connect.calls == []
    assert handle.report()["refused"] == [
        {"host": "api.example.test", "port": 443, "reason": body.removeprefix("ToolHub egress refused: ").strip()}
    ]


def test_it_refuses_a_name_if_any_of_its_addresses_is_not_public(start_proxy) -> None:
    connect = RedirectingConnect(None)
    names = FakeResolver({"api.example.test": [PUBLIC_IP, "127.0.0.1"]})
    handle = start_proxy(names=names, connect=connect)

    status, body = connect_status(handle, "api.example.test:443")

    assert status == 403
    assert "127.0.0.1, which is a loopback address" in body
    assert connect.calls == []


def test_it_refuses_a_loopback_name_on_ports_that_are_not_exempt(start_proxy, echo_port) -> None:
    # The test switch names exact (ip, port) pairs: Redis and PostgreSQL stay out of reach.
    names = FakeResolver({"db.example.test": ["127.0.0.1"]})
    handle = start_proxy(names=names, targets=(("127.0.0.1", echo_port),))
    for port in (6379, 5432):
        status, body = connect_status(handle, f"db.example.test:{port}")
        assert status == 403
        assert "loopback" in body


@pytest.mark.parametrize(
    "target",
    [
        "127.0.0.1:{echo}",
        "[::1]:{echo}",
        "[::ffff:127.0.0.1]:{echo}",
        "10.1.2.3:443",
        "172.16.5.4:443",
        "192.168.0.10:80",
        "169.254.169.254:80",
        "224.0.0.251:5353",
        "[fe80::1%25eth0]:443",
        "127.1:{echo}",
        "0x7f000001:{echo}",
        "2130706433:{echo}",
        "017700000001:{echo}",
    ],
)
def test_it_refuses_non_public_ip_literals(start_proxy, echo_port: int, target: str) -> None:
    # Even the loopback port that the test switch exempts for names is refused as a literal.
    names = FakeResolver({})
    connect = RedirectingConnect(None)
    handle = start_proxy(names=names, connect=connect, targets=(("127.0.0.1", echo_port),))

    status, body = connect_status(handle, target.format(echo=echo_port))

    assert status == 403
    assert body.startswith("ToolHub egress refused: ")
    assert names.calls == []
    assert connect.calls == []


def test_it_refuses_the_metadata_address_over_plain_http(start_proxy) -> None:
    handle = start_proxy(connect=RedirectingConnect(None))
    status, _, body = get(handle, "http://169.254.169.254/latest/meta-data/")
    assert status == 403
    assert b"169.254.169.254 is a link-local address" in body


def test_it_allows_a_public_ip_literal_when_there_is_no_allowlist(start_proxy, echo_port) -> None:
    connect = RedirectingConnect(echo_port)
    handle = start_proxy(connect=connect)

    status, _ = connect_status(handle, f"{PUBLIC_IP}:443")

    assert status == 200
    assert connect.calls == [(PUBLIC_IP, 443)]


def test_it_dials_an_ipv4_mapped_public_address_as_ipv4(start_proxy, echo_port) -> None:
    connect = RedirectingConnect(echo_port)
    handle = start_proxy(names=FakeResolver({"a.example.test": [f"::ffff:{PUBLIC_IP}"]}), connect=connect)
    assert connect_status(handle, "a.example.test:443")[0] == 200
    assert connect.calls == [(PUBLIC_IP, 443)]


# The allowlist


def test_it_refuses_a_name_outside_the_allowlist_without_resolving_it(start_proxy) -> None:
    names = FakeResolver({"evil.example.org": [PUBLIC_IP]})
    connect = RedirectingConnect(None)
    handle = start_proxy(allow_hosts=["api.example.org", "*.example.net"], names=names, connect=connect)

    status, body = connect_status(handle, "evil.example.org:443")

    assert status == 403
    assert body == (
        "ToolHub egress refused: evil.example.org is not in this toolkit's allowlist (api.example.org, *.example.net)\n"
    )
    assert names.calls == []
    assert connect.calls == []


def test_it_refuses_ip_literals_that_the_allowlist_does_not_list(start_proxy, echo_port) -> None:
    connect = RedirectingConnect(echo_port)
    handle = start_proxy(allow_hosts=["api.example.org", PUBLIC_IP], connect=connect)
    assert connect_status(handle, "1.1.1.1:443")[0] == 403
    assert connect_status(handle, f"{PUBLIC_IP}:443")[0] == 200
    assert connect.calls == [(PUBLIC_IP, 443)]


def test_it_applies_wildcards_through_the_proxy(start_proxy, echo_port) -> None:
    names = FakeResolver({"a.example.org": [PUBLIC_IP], "example.org": [PUBLIC_IP]})
    handle = start_proxy(allow_hosts=["*.example.org"], names=names, connect=RedirectingConnect(echo_port))
    assert connect_status(handle, "a.example.org:443")[0] == 200
    assert connect_status(handle, "example.org:443")[0] == 403


@pytest.mark.parametrize(
    ("host", "patterns", "allowed"),
    [
        ("api.example.org", ["api.example.org"], True),
        ("API.Example.ORG.", ["api.example.org"], True),
        ("api.example.org", ["API.EXAMPLE.ORG."], True),
        ("x.api.example.org", ["api.example.org"], False),
        ("example.org", ["api.example.org"], False),
        ("sub.example.org", ["*.example.org"], True),
        ("a.b.example.org", ["*.example.org"], True),
        ("Sub.Example.Org.", ["*.example.org"], True),
        ("example.org", ["*.example.org"], False),
        ("badexample.org", ["*.example.org"], False),
        ("example.org.evil.net", ["*.example.org"], False),
        ("sub.example.org.evil.net", ["*.example.org"], False),
        ("anything.test", None, True),
        ("anything.test", [], False),
        ("1.2.3.4", ["1.2.3.4"], True),
        ("[2001:4860::8888]", ["2001:4860:0::8888"], True),
    ],
)
def test_allowlist_matching(host: str, patterns: list[str] | None, allowed: bool) -> None:
    assert host_matches_allowlist(host, patterns) is allowed


@pytest.mark.parametrize(
    "pattern",
    [
        "*",
        "*.",
        "*.org",
        "a.*.org",
        "*example.org",
        "**.example.org",
        "http://x.org",
        "exa mple.org",
        "",
        "x.example.org/path",
        "api.example.org:443",
        "-a.example.org",
        "*.1.2.3.4",
        "127.1",
    ],
)
def test_it_rejects_invalid_allowlist_patterns(pattern: str) -> None:
    with pytest.raises(ValueError):
        validate_host_pattern(pattern)
    with pytest.raises(ValueError):
        EgressPolicy(allow_hosts=[pattern], max_bytes=1, max_connections=1)


def test_the_policy_normalizes_patterns_and_checks_limits() -> None:
    policy = EgressPolicy(
        allow_hosts=["API.Example.org.", "*.Example.net", "api.example.org"],
        max_bytes=10,
        max_connections=2,
    )
    assert policy.allow_hosts == ["api.example.org", "*.example.net"]
    with pytest.raises(ValueError):
        EgressPolicy(allow_hosts="api.example.org", max_bytes=1, max_connections=1)  # type: ignore[arg-type]
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError):
            EgressPolicy(allow_hosts=None, max_bytes=bad, max_connections=1)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            EgressPolicy(allow_hosts=None, max_bytes=1, max_connections=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "address",
    [
        PUBLIC_IP,
        "8.8.8.8",
        "1.1.1.1",
        "2606:4700:4700::1111",
        f"::ffff:{PUBLIC_IP}",
        "2002:5db8:d822::1",
        "64:ff9b::808:808",
    ],
)
def test_public_addresses_have_no_refusal_reason(address: str) -> None:
    assert address_refusal_reason(address) is None
    assert address_refusal_reason(ipaddress.ip_address(address)) is None


# DNS rebinding


def test_it_connects_to_the_address_it_checked(start_proxy, echo_port: int) -> None:
    # A rebinding name answers with a public address first and with loopback afterwards.
    names = FakeResolver({"rebind.example.test": [[PUBLIC_IP], ["127.0.0.1"]]})
    connect = RedirectingConnect(echo_port)
    handle = start_proxy(names=names, connect=connect)

    assert connect_status(handle, "rebind.example.test:443")[0] == 200
    # One lookup per request, and the dial went to the address that was checked.
    assert names.calls == ["rebind.example.test"]
    assert connect.calls == [(PUBLIC_IP, 443)]

    status, body = connect_status(handle, "rebind.example.test:443")
    assert status == 403
    assert "resolves to 127.0.0.1, which is a loopback address" in body
    assert connect.calls == [(PUBLIC_IP, 443)]


def test_it_tries_the_next_checked_address_when_one_fails(start_proxy, echo_port: int) -> None:
    import asyncio

    calls: list[str] = []

    async def connect(ip: str, port: int) -> Any:
        calls.append(ip)
        if ip == "8.8.8.8":
            raise ConnectionRefusedError(111, "Connection refused")
        return await asyncio.open_connection("127.0.0.1", echo_port)

    names = FakeResolver({"two.example.test": ["8.8.8.8", PUBLIC_IP]})
    handle = start_proxy(names=names, connect=connect)  # type: ignore[arg-type]
    assert connect_status(handle, "two.example.test:443")[0] == 200
    assert calls == ["8.8.8.8", PUBLIC_IP]


# Limits


def test_it_refuses_connections_over_the_limit(start_proxy, echo_port: int) -> None:
    names = FakeResolver({"echo.example.test": ["127.0.0.1"]})
    handle = start_proxy(max_connections=2, names=names, targets=(("127.0.0.1", echo_port),))
    assert connect_status(handle, f"echo.example.test:{echo_port}")[0] == 200
    assert connect_status(handle, f"echo.example.test:{echo_port}")[0] == 200

    status, body = connect_status(handle, f"echo.example.test:{echo_port}")

    assert status == 403
    assert body == "ToolHub egress refused: connection limit reached (2 per invocation)\n"
    report = handle.report()
    assert report["connections"] == 2
    assert report["limits_reached"] == ["connections"]
    assert report["hosts"][0]["connections"] == 2


def test_it_closes_a_tunnel_at_the_byte_limit(start_proxy, echo_port: int) -> None:
    names = FakeResolver({"echo.example.test": ["127.0.0.1"]})
    handle = start_proxy(max_bytes=100, names=names, targets=(("127.0.0.1", echo_port),))
    sock, head = open_tunnel(handle, f"echo.example.test:{echo_port}")
    with sock:
        assert head.startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"x" * 60)
        # 60 bytes out fit; echoing them back would make 120, so the tunnel is closed instead.
        assert _read_all(sock) == b""

    status, body = connect_status(handle, f"echo.example.test:{echo_port}")
    assert status == 403
    assert body == "ToolHub egress refused: byte limit reached (100 bytes per invocation)\n"

    report = handle.stop()
    assert report["bytes_out"] == 60
    assert report["bytes_in"] == 0
    assert report["limits_reached"] == ["bytes"]
    assert [r["reason"] for r in report["refused"]] == [
        "byte limit reached (100 bytes per invocation); the connection was closed",
        "byte limit reached (100 bytes per invocation)",
    ]


def test_it_refuses_an_http_response_over_the_byte_limit(start_proxy, web_port: int) -> None:
    names = FakeResolver({"web.example.test": ["127.0.0.1"]})
    handle = start_proxy(max_bytes=1000, names=names, targets=(("127.0.0.1", web_port),))
    raw = exchange(handle, f"GET http://web.example.test:{web_port}/big HTTP/1.1\r\n\r\n".encode())
    # The head fits and is passed on; the 5000-byte body does not, so the response is cut off.
    status, _, body = split_response(raw)
    assert status == 200
    assert len(body) < 5000
    report = handle.report()
    assert report["bytes_in"] + report["bytes_out"] <= 1000
    assert report["refused"][0]["reason"].endswith("the response was cut off")


# The report


def test_the_report_lists_hosts_refusals_and_failures(start_proxy, echo_port: int) -> None:
    names = FakeResolver({"echo.example.test": ["127.0.0.1"], "private.example.test": ["10.0.0.8"]})
    handle = start_proxy(names=names, targets=(("127.0.0.1", echo_port),))
    sock, _ = open_tunnel(handle, f"echo.example.test:{echo_port}")
    with sock:
        sock.sendall(b"abc")
        sock.shutdown(socket.SHUT_WR)
        _read_all(sock)
    assert connect_status(handle, "private.example.test:5432")[0] == 403
    status, body = connect_status(handle, "missing.example.test:443")
    assert status == 502
    assert body.startswith("ToolHub egress failed: could not resolve missing.example.test")

    report = handle.stop()

    json.dumps(report)
    assert report["hosts"] == [
        {
            "host": "echo.example.test",
            "port": echo_port,
            "addresses": ["127.0.0.1"],
            "connections": 1,
            "bytes_in": 3,
            "bytes_out": 3,
        }
    ]
    assert report["refused"] == [
        {
            "host": "private.example.test",
            "port": 5432,
            "reason": "private.example.test resolves to 10.0.0.8, which is a private address; "
            "ToolHub only connects to public addresses",
        }
    ]
    assert report["failed"] == [
        {
            "host": "missing.example.test",
            "port": 443,
            "reason": "could not resolve missing.example.test: [Errno -2] Name or service not known",
        }
    ]
    assert report["connections"] == 1
    assert (report["bytes_in"], report["bytes_out"]) == (3, 3)
    assert report["dropped_records"] == 0


def test_the_report_keeps_a_bounded_number_of_attempts(start_proxy) -> None:
    handle = start_proxy(allow_hosts=["api.example.org"])
    for _ in range(egress.MAX_RECORDED_ATTEMPTS + 5):
        assert connect_status(handle, "other.example.org:443")[0] == 403
    report = handle.report()
    assert len(report["refused"]) == egress.MAX_RECORDED_ATTEMPTS
    assert report["dropped_records"] == 5


# Running the proxy


def test_run_proxy_in_thread_listens_and_cleans_up(socket_dir: Path) -> None:
    path = socket_dir / "egress.sock"
    handle = run_proxy_in_thread(EgressPolicy(allow_hosts=None, max_bytes=10, max_connections=1), path)
    mode = path.stat().st_mode
    assert stat.S_ISSOCK(mode)
    # Private: the worker hands it to the run's sandbox uid (tests/egress/test_host.py).
    assert stat.S_IMODE(mode) == 0o600
    status, body = connect_status(handle, "127.0.0.1:6379")
    assert status == 403
    assert "loopback" in body

    report = handle.stop()

    assert not path.exists()
    assert report["refused"][0]["port"] == 6379


def test_stopping_closes_open_tunnels(start_proxy, echo_port: int) -> None:
    names = FakeResolver({"echo.example.test": ["127.0.0.1"]})
    handle = start_proxy(names=names, targets=(("127.0.0.1", echo_port),))
    sock, head = open_tunnel(handle, f"echo.example.test:{echo_port}")
    with sock:
        assert head.startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"ping")
        assert sock.recv(4) == b"ping"

        report = handle.stop()

        assert _read_all(sock) == b""
    assert not Path(handle.socket_path).exists()
    assert report["hosts"][0]["bytes_in"] == 4


# One proxy for many calls (a warm sandbox's), one at a time


def test_each_call_gets_a_report_and_limits_of_its_own(start_proxy, web_port: int) -> None:
    names = FakeResolver({"web.example.test": [PUBLIC_IP]})
    handle = start_proxy(max_connections=1, names=names, connect=RedirectingConnect(web_port))
    assert get(handle, "http://web.example.test/one")[0] == 200
    refused, _, body = get(handle, "http://web.example.test/two")
    assert (refused, body) == (403, b"ToolHub egress refused: connection limit reached (1 per invocation)\n")

    first = handle.end_call()
    assert get(handle, "http://web.example.test/three")[0] == 200
    second = handle.end_call()
    nothing = handle.end_call()

    assert first["connections"] == 1 and first["limits_reached"] == ["connections"]
    assert len(first["refused"]) == 1 and first["hosts"][0]["connections"] == 1
    # The second call was allowed its own connection, and its report holds only that one.
    assert second["connections"] == 1 and second["refused"] == [] and second["limits_reached"] == []
    assert second["hosts"][0]["bytes_in"] > 0 and second["hosts"][0]["bytes_out"] > 0
    assert (nothing["connections"], nothing["hosts"], nothing["bytes_in"]) == (0, [], 0)
    assert Path(handle.socket_path).exists()


def test_ending_a_call_closes_what_it_left_open(start_proxy, echo_port: int) -> None:
    names = FakeResolver({"echo.example.test": ["127.0.0.1"]})
    handle = start_proxy(names=names, targets=(("127.0.0.1", echo_port),))
    sock, head = open_tunnel(handle, f"echo.example.test:{echo_port}")
    with sock:
        assert head.startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"ping")
        assert sock.recv(4) == b"ping"

        report = handle.end_call()

        # Closed, and nothing sent on it later is counted for the next call.
        assert _read_all(sock) == b""
    assert report["hosts"][0]["bytes_in"] == 4
    assert handle.end_call()["bytes_in"] == 0


def test_a_request_a_call_left_in_the_backlog_is_never_carried_out(start_proxy, web_port: int) -> None:
    connect = RedirectingConnect(web_port)
    handle = start_proxy(names=FakeResolver({"web.example.test": [PUBLIC_IP]}), connect=connect)
    assert handle._loop is not None
    # The proxy's loop is held up while the call sends a request and ends, so the connection
    # still waits in the listener's backlog when the call's end is reported.
    handle._loop.call_soon_threadsafe(time.sleep, 0.5)
    with socket.socket(socket.AF_UNIX) as left:
        left.connect(handle.socket_path)
        left.sendall(b"GET http://web.example.test/left HTTP/1.1\r\n\r\n")

    ended = handle.end_call()

    assert (ended["connections"], ended["hosts"]) == (0, [])
    time.sleep(0.2)
    assert connect.calls == [] and handle.report()["connections"] == 0
    # The proxy goes on serving the next call.
    assert get(handle, "http://web.example.test/next")[0] == 200
    assert connect.calls == [(PUBLIC_IP, 80)]


def test_the_test_only_switch_cannot_come_from_settings() -> None:
    # Settings and the UI build an EgressPolicy and call run_proxy_in_thread; neither can
    # carry the loopback exemption, and the exemption itself only accepts loopback.
    assert "test_only_loopback_targets" not in {f.name for f in fields(EgressPolicy)}
    assert list(inspect.signature(run_proxy_in_thread).parameters) == ["policy", "socket_path", "socket_mode"]
    policy = EgressPolicy(allow_hosts=None, max_bytes=1, max_connections=1)
    with pytest.raises(ValueError):
        EgressProxy(policy, "/tmp/x.sock", test_only_loopback_targets=[("10.0.0.1", 80)])


# Inside the sandbox: the forwarder and the clients


@pytest.fixture
def forwarder_to(request) -> Iterator[Callable[[str], EgressForwarder]]:
    started: list[EgressForwarder] = []

    def start(socket_path: str) -> EgressForwarder:
        forwarder = EgressForwarder(socket_path=socket_path, port=0).start()
        started.append(forwarder)
        return forwarder

    yield start
    for forwarder in started:
        forwarder.stop()


def _opener_with_env(monkeypatch, forwarder: EgressForwarder, *handlers: Any) -> Any:
    for name, value in proxy_environment(forwarder.proxy_url).items():
        monkeypatch.setenv(name, value)
    # A fresh opener reads the proxy variables now (urlopen's global one may be older).
    return urllib.request.build_opener(*handlers)


def test_urllib_reaches_an_allowed_host_through_the_forwarder(
    start_proxy, forwarder_to, web_port: int, monkeypatch
) -> None:
    handle = start_proxy(
        allow_hosts=["web.example.test"],
        names=FakeResolver({"web.example.test": ["127.0.0.1"]}),
        targets=(("127.0.0.1", web_port),),
    )
    opener = _opener_with_env(monkeypatch, forwarder_to(handle.socket_path))

    with opener.open(f"http://web.example.test:{web_port}/hello?x=1", timeout=10) as response:
        seen = json.loads(response.read())

    assert seen["path"] == "/hello?x=1"
    assert handle.report()["hosts"][0]["host"] == "web.example.test"


def test_urllib_shows_the_refusal_reason(start_proxy, forwarder_to, monkeypatch) -> None:
    handle = start_proxy(allow_hosts=["web.example.test"])
    opener = _opener_with_env(monkeypatch, forwarder_to(handle.socket_path))

    with pytest.raises(urllib.error.HTTPError) as caught:
        opener.open("http://10.0.0.1/admin", timeout=10)

    assert caught.value.code == 403
    assert (
        caught.value.read().decode().startswith("ToolHub egress refused: 10.0.0.1 is not in this toolkit's allowlist")
    )


def _self_signed(host: str, directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_urllib_reaches_https_end_to_end_through_connect(
    start_proxy, forwarder_to, monkeypatch, tmp_path: Path
) -> None:
    cert, key = _self_signed("tls.example.test", tmp_path)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Web)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    server.socket = server_context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    port = server.server_address[1]
    try:
        handle = start_proxy(
            allow_hosts=["tls.example.test"],
            names=FakeResolver({"tls.example.test": ["127.0.0.1"]}),
            targets=(("127.0.0.1", port),),
        )
        client_context = ssl.create_default_context(cafile=str(cert))
        opener = _opener_with_env(
            monkeypatch,
            forwarder_to(handle.socket_path),
            urllib.request.HTTPSHandler(context=client_context),
        )
        with opener.open(f"https://tls.example.test:{port}/secure", timeout=10) as response:
            seen = json.loads(response.read())
    finally:
        server.shutdown()
        server.server_close()

    # The certificate was checked for tls.example.test by the client: the proxy only tunnelled.
    assert seen["path"] == "/secure"
    entry = handle.report()["hosts"][0]
    assert (entry["host"], entry["port"]) == ("tls.example.test", port)
    assert entry["bytes_in"] > 0


def test_the_forwarder_answers_502_when_the_proxy_is_gone(forwarder_to, socket_dir, monkeypatch) -> None:
    opener = _opener_with_env(monkeypatch, forwarder_to(str(socket_dir / "missing.sock")))
    with pytest.raises(urllib.error.HTTPError) as caught:
        opener.open("http://web.example.test/", timeout=10)
    assert caught.value.code == 502
    assert b"egress proxy is not reachable" in caught.value.read()


def test_proxy_environment_names_every_variable() -> None:
    env = proxy_environment("http://127.0.0.1:3128")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        assert env[name] == "http://127.0.0.1:3128"
    # Nothing bypasses the proxy, loopback included: inside the sandbox it would only reach
    # the sandbox itself, and through the proxy the refusal is explained and recorded.
    assert "NO_PROXY" not in env and "no_proxy" not in env


def _run_python(code: str, *paths: Path) -> subprocess.CompletedProcess[str]:
    """Run code in a fresh interpreter, so import hooks and patches stay out of this one."""
    env = {"PYTHONPATH": os.pathsep.join(str(p) for p in paths), "PATH": os.environ["PATH"]}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _fake_aiohttp(directory: Path) -> None:
    package = directory / "aiohttp"
    package.mkdir()
    (package / "__init__.py").write_text("from .client import ClientSession\n")
    (package / "client.py").write_text(
        "class ClientSession:\n"
        "    def __init__(self, base_url=None, *, trust_env=False, timeout=None):\n"
        "        self.trust_env = trust_env\n"
        "        self.base_url = base_url\n"
    )


def test_aiohttp_sessions_trust_the_proxy_environment(tmp_path: Path) -> None:
    _fake_aiohttp(tmp_path)
    shutil.copy(FORWARDER_FILE, tmp_path / "egress_forwarder.py")
    result = _run_python(
        """
        import egress_forwarder
        egress_forwarder.install_aiohttp_trust_env()
        import aiohttp
        from aiohttp.client import ClientSession
        print(ClientSession is aiohttp.ClientSession)
        print(aiohttp.ClientSession().trust_env)
        print(aiohttp.ClientSession("http://a", trust_env=False).trust_env)
        print(aiohttp.ClientSession("http://a").base_url)
        print(type(aiohttp.__spec__.loader).__name__)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True", "True", "http://a", "SourceFileLoader"]


def test_aiohttp_imported_before_the_hook_is_patched_too(tmp_path: Path) -> None:
    _fake_aiohttp(tmp_path)
    shutil.copy(FORWARDER_FILE, tmp_path / "egress_forwarder.py")
    result = _run_python(
        """
        import aiohttp, egress_forwarder
        egress_forwarder.install_aiohttp_trust_env()
        egress_forwarder.install_aiohttp_trust_env()
        print(aiohttp.ClientSession().trust_env)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True"]


def test_direct_connections_fail_with_an_error_that_names_egress(tmp_path: Path) -> None:
    # A stand-in for the kernel's answer inside the sandbox, where only `lo` exists.
    shutil.copy(FORWARDER_FILE, tmp_path / "egress_forwarder.py")
    result = _run_python(
        """
        import errno, socket
        def unreachable(self, address):
            raise OSError(errno.ENETUNREACH, "Network is unreachable")
        socket.socket.connect = unreachable
        import egress_forwarder
        egress_forwarder.install_clear_network_errors(granted=True)
        try:
            socket.create_connection(("93.184.216.34", 6379), timeout=1)
        except OSError as exc:
            print(type(exc).__name__, exc.errno == errno.ENETUNREACH)
            print(exc)
        egress_forwarder.install_clear_network_errors(granted=False)
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect("/nonexistent")
        except OSError as exc:
            print(type(exc).__name__)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "EgressUnavailableError True"
    assert "cannot connect to 93.184.216.34:6379" in lines[1]
    assert "ToolHub's HTTP/HTTPS proxy" in lines[1]
    # Only IP sockets are explained; a UNIX socket's error is left alone.
    assert lines[2] == "OSError"


# The real thing: bwrap as the sandbox user, the socket bound in, the forwarder inside


_PROBE = """
import json, socket, sys, urllib.error, urllib.request
sys.path.insert(0, "/opt/probe")
import egress_forwarder

out = {}
granted = sys.argv[1] == "granted"
if granted:
    egress_forwarder.enable_egress()
    opener = urllib.request.build_opener()
    with opener.open(sys.argv[2], timeout=10) as response:
        out["body"] = json.loads(response.read())
    try:
        opener.open("http://169.254.169.254/latest/meta-data/", timeout=10)
    except urllib.error.HTTPError as exc:
        out["metadata"] = [exc.code, exc.read().decode()]
else:
    egress_forwarder.install_clear_network_errors(granted=False)
try:
    socket.create_connection(("93.184.216.34", 80), timeout=5)
except OSError as exc:
    out["direct"] = [type(exc).__name__, exc.errno, str(exc)]
try:
    socket.create_connection(("example.org", 443), timeout=5)
except OSError as exc:
    out["lookup"] = [type(exc).__name__, str(exc)]
print(json.dumps(out))
"""


def _bwrap(probe_dir: Path, extra: list[str], *args: str) -> dict[str, Any]:
    # The same isolation as toolhub.sandbox.launcher: every namespace, no user namespace inside,
    # a read-only root; the proxy socket arrives as a read-only bind (connect() still works).
    command = [
        "setpriv",
        "--reuid=toolhub-sandbox",
        "--regid=toolhub-sandbox",
        "--clear-groups",
        "bwrap",
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--as-pid-1",
        "--clearenv",
        "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/lib", "/lib",
        "--symlink", "usr/lib64", "/lib64",
        "--symlink", "usr/bin", "/bin",
        "--proc", "/proc",
        "--dev", "/dev",
        "--tmpfs", "/tmp",
        "--ro-bind", str(probe_dir), "/opt/probe",
        *extra,
        "--remount-ro", "/",
        "/usr/bin/python3.11", "-I", "/opt/probe/probe.py", *args,
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.sandbox
def test_a_sandboxed_process_reaches_an_allowed_host_and_nothing_else(web_port: int) -> None:
    require_sandbox()
    work = Path(tempfile.mkdtemp(prefix="egress-bwrap-", dir="/tmp"))
    try:
        # The sandbox user may traverse the run directory but not list it.
        work.chmod(0o711)
        probe_dir = work / "probe"
        probe_dir.mkdir(mode=0o755)
        probe_dir.chmod(0o755)
        shutil.copy(FORWARDER_FILE, probe_dir / "egress_forwarder.py")
        (probe_dir / "probe.py").write_text(_PROBE)
        for file in probe_dir.iterdir():
            file.chmod(0o644)
        socket_path = work / "egress.sock"
        proxy = EgressProxy(
            EgressPolicy(allow_hosts=["web.example.test"], max_bytes=BIG, max_connections=10),
            socket_path,
            resolver=FakeResolver({"web.example.test": ["127.0.0.1"]}),
            test_only_loopback_targets=[("127.0.0.1", web_port)],
        )
        with start_proxy_thread(proxy) as handle:
            granted = _bwrap(
                probe_dir,
                ["--ro-bind", str(socket_path), "/run/egress.sock"],
                "granted",
                f"http://web.example.test:{web_port}/from-the-sandbox",
            )
            report = handle.report()
        denied = _bwrap(probe_dir, [], "denied")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    assert granted["body"]["path"] == "/from-the-sandbox"
    assert granted["metadata"][0] == 403
    assert "web.example.test" in report["hosts"][0]["host"]
    assert report["refused"][0]["host"] == "169.254.169.254"
    name, number, message = granted["direct"]
    assert (name, number) == ("EgressUnavailableError", 101)
    assert "ToolHub's HTTP/HTTPS proxy" in message
    assert "ToolHub's HTTP/HTTPS proxy" in granted["lookup"][1]
    assert denied["direct"][0] == "EgressUnavailableError"
    assert "no network egress" in denied["direct"][2]
    assert "no network egress" in denied["lookup"][1]


def test_only_targets_reach_exactly_those_pairs_whatever_their_addresses(socket_dir: Path, echo_port) -> None:
    # What package builds use for their index hosts: a mirror on loopback or on the LAN is
    # reachable at its own port, and nothing else is, not even the same host at another port.
    connect = RedirectingConnect(echo_port)
    proxy = EgressProxy(
        EgressPolicy(allow_hosts=None, max_bytes=BIG, max_connections=100),
        socket_dir / "build.sock",
        resolver=FakeResolver({"mirror.lan": ["10.1.2.3"]}),
        connect=connect,
        only_targets=[("127.0.0.1", 8080), ("Mirror.LAN", 443)],
    )
    with start_proxy_thread(proxy) as handle:
        assert connect_status(handle, "127.0.0.1:8080") == (200, "")
        assert connect_status(handle, "mirror.lan:443") == (200, "")
        for target in ("127.0.0.1:5432", "127.0.0.1:6379", "mirror.lan:80", "pypi.org:443", "[::1]:8080"):
            status, body = connect_status(handle, target)
            assert status == 403, target
            assert "is not one of the hosts allowed here (127.0.0.1:8080, mirror.lan:443)" in body, body
    assert connect.calls == [("127.0.0.1", 8080), ("10.1.2.3", 443)]


def test_a_build_steps_forwarder_says_when_it_refused_connections_for_its_cap(socket_dir: Path) -> None:
    """The forwarder of a build step (run as a script around the step's command, in a network
    namespace of its own as in the build sandbox) refuses connections past its cap, and says so
    on the step's output after the command: uv itself only reports a "tunnel error"."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root's unshare for a network namespace")
    held: list[socket.socket] = []
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(socket_dir / "egress.sock"))
    server.listen(200)

    def accept() -> None:
        # The proxy's end of each connection, held open so that every one counts as open.
        with contextlib.suppress(OSError):
            while True:
                held.append(server.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    over = 3
    client = textwrap.dedent(f"""
        import socket, time
        refused = 0
        connections = []
        for _ in range({egress_forwarder.MAX_CONNECTIONS + over}):
            connections.append(socket.create_connection(("127.0.0.1", {egress_forwarder.DEFAULT_PORT})))
            time.sleep(0.005)
        time.sleep(0.5)
        for connection in connections:
            connection.settimeout(0.2)
            try:
                refused += connection.recv(100).startswith(b"HTTP/1.1 503")
            except OSError:
                pass
        print("refused", refused, flush=True)
    """)
    script = Path(egress_forwarder.__file__)
    try:
        step = subprocess.run(
            ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "step",
             sys.executable, "-I", str(script), str(socket_dir / "egress.sock"), "--", sys.executable, "-c", client],
            capture_output=True, text=True, timeout=60, check=False,
        )
    finally:
        server.close()
        for connection in held:
            connection.close()
    assert step.returncode == 0, step.stderr
    assert step.stdout.strip() == f"refused {over}"
    assert step.stderr.strip().splitlines()[-1] == (
        f"ToolHub egress refused {over} connections: more than {egress_forwarder.MAX_CONNECTIONS} connections open at once"
    )
