"""A private test network for the egress tests: HTTP and HTTPS servers at a public address that
exists only on this machine.

The egress proxy refuses loopback, private and reserved addresses, and it has no exemption the
end-to-end tests may use, so a test server has to look like a server on the internet. The
`test_network` fixture (the function `test_network_fixture`) builds one the way a deployment would see it:

- a network namespace of its own (`ip netns add th-egress-<pid>-<n>`) with a veth pair: the host
  end stays in the root namespace, the peer goes into the new namespace;
- the peer gets a global unicast address (`45.45.<n>.45/32`) and the host end
  `45.45.<n>.46/32`; each side has a /32 route to the other through the veth and nothing else,
  so packets for that one address stay on this machine and no other address is affected;
- inside the namespace (`ip netns exec`) a small threaded HTTP server and an HTTPS server with
  a throwaway self-signed certificate for that address (its PEM is handed to the tests, so a
  toolkit can verify the server end to end through a CONNECT tunnel).

The servers log every request they receive, and `TestNetwork.seen()` reads the log straight
from the test process (which is in the root namespace and reaches the address directly). That
is how a test proves that a refused request never arrived. Nothing here sends traffic anywhere
but to loopback and to the namespace's own address.

Teardown stops the servers, deletes the namespace and the host end of the veth pair (the /32
routes go with it). It needs root and `ip` from iproute2; without them the tests are skipped
with the reason, unless `TOOLHUB_REQUIRE_SANDBOX=1` asks for a failure instead (as CI does for
the sandbox tests).
"""

from __future__ import annotations

import datetime
import ipaddress
import itertools
import json
import os
import re
import select
import shutil
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

HTTP_PORT = 8080
HTTPS_PORT = 8443
# The third octet of the addresses is chosen per test process, so that parallel pytest runs
# each get their own namespace, veth pair and /32 routes.
_ADDRESS_PREFIX = "45.45"
_START_TIMEOUT = 15.0
_instances = itertools.count()

# The servers that run inside the namespace. They answer every path with JSON describing the
# request, except `/bytes/<n>` (n bytes of payload) and `/__seen` (the log, not logged itself).
_SERVER = textwrap.dedent(
    '''
    import json, ssl, sys, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    address, http_port, https_port, cert, key = sys.argv[1:6]
    seen = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            tls = isinstance(self.connection, ssl.SSLSocket)
            if self.path == "/__seen":
                with lock:
                    payload = json.dumps(seen).encode()
                kind = "application/json"
            else:
                entry = {"method": self.command, "path": self.path, "host": self.headers.get("Host"),
                         "tls": tls, "body_bytes": len(body), "peer": self.client_address[0]}
                with lock:
                    seen.append(entry)
                if self.path.startswith("/bytes/"):
                    payload = b"x" * int(self.path.split("/")[2])
                    kind = "application/octet-stream"
                else:
                    payload = json.dumps(dict(entry, server="th-egress-test")).encode()
                    kind = "application/json"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = _answer

        def log_message(self, *args):
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

    plain = Server((address, int(http_port)), Handler)
    secure = Server((address, int(https_port)), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    secure.socket = context.wrap_socket(secure.socket, server_side=True)
    threading.Thread(target=secure.serve_forever, daemon=True).start()
    print("ready", flush=True)
    plain.serve_forever()
    '''
)


@dataclass
class TestNetwork:
    namespace: str
    address: str
    host_address: str
    http_port: int
    https_port: int
    ca_pem: str

    __test__ = False  # not a test class, whatever pytest thinks of the name

    def url(self, path: str = "/", *, tls: bool = False) -> str:
        scheme, port = ("https", self.https_port) if tls else ("http", self.http_port)
        return f"{scheme}://{self.address}:{port}{path}"

    def seen(self) -> list[dict]:
        """Every request the servers received so far, read directly (no proxy involved)."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(self.url("/__seen"), timeout=10) as response:
            return json.loads(response.read())

    def paths_seen(self) -> list[str]:
        return [entry["path"] for entry in self.seen()]


def netns_unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "creating a network namespace and a veth pair needs root"
    if shutil.which("ip") is None:
        return "`ip` is missing: install the Debian package iproute2 (scripts/system-setup test should)"
    return None


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("TOOLHUB_REQUIRE_SANDBOX") == "1":
        pytest.fail(f"TOOLHUB_REQUIRE_SANDBOX=1 but the egress test network is unavailable: {reason}")
    pytest.skip(f"egress test network unavailable: {reason}")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def _self_signed(address: str, directory: Path) -> tuple[Path, Path, str]:
    """A certificate for the IP address, valid for a day, that is its own trust anchor."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ToolHub egress test server")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "server.pem", directory / "server.key"
    pem = certificate.public_bytes(serialization.Encoding.PEM).decode()
    cert_path.write_text(pem)
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    key_path.chmod(0o600)
    return cert_path, key_path, pem


class _Links:
    """The namespace and veth pair of one test process, and their removal."""

    def __init__(self) -> None:
        # pytest makes one instance of the fixture per test module that imports it, so a
        # process may hold more than one network; each gets its own names (at most 15
        # characters for a link).
        pid, number = os.getpid(), next(_instances)
        self.namespace = f"th-egress-{pid}-{number}"
        self.host_link = f"the{pid % 10_000_000}x{number % 100}"
        self.peer_link = f"the{pid % 10_000_000}p{number % 100}"
        self.address = ""
        self.host_address = ""

    @staticmethod
    def remove_stale() -> None:
        """Remove what an earlier run that was killed left behind: namespaces named by this
        fixture whose test process is gone (their host ends and routes go with them)."""
        listing = _ip("netns", "list", check=False).stdout
        for match in re.finditer(r"^th-egress-([0-9]+)-([0-9]+)\b", listing, re.MULTILINE):
            pid, number = int(match.group(1)), int(match.group(2))
            if not Path(f"/proc/{pid}").exists():
                _ip("link", "del", f"the{pid % 10_000_000}x{number % 100}", check=False)
                _ip("netns", "del", match.group(0), check=False)

    def create(self) -> None:
        self.remove_stale()
        _ip("netns", "add", self.namespace)
        _ip("link", "add", self.host_link, "type", "veth", "peer", "name", self.peer_link)
        _ip("link", "set", self.peer_link, "netns", self.namespace)
        _ip("link", "set", self.host_link, "up")
        inside = ("netns", "exec", self.namespace, "ip")
        _ip(*inside, "link", "set", "lo", "up")
        _ip(*inside, "link", "set", self.peer_link, "up")
        # An octet per process; if another run holds it (its /32 route exists), try the next.
        first = os.getpid() % 200 + 20
        for attempt in range(30):
            octet = (first + attempt - 20) % 200 + 20
            address, host_address = f"{_ADDRESS_PREFIX}.{octet}.45", f"{_ADDRESS_PREFIX}.{octet}.46"
            if _ip("route", "add", f"{address}/32", "dev", self.host_link, check=False).returncode == 0:
                break
        else:
            raise RuntimeError("no free 45.45.x.45 address for the test network")
        self.address, self.host_address = address, host_address
        _ip("addr", "add", f"{host_address}/32", "dev", self.host_link)
        _ip(*inside, "addr", "add", f"{address}/32", "dev", self.peer_link)
        _ip(*inside, "route", "add", f"{host_address}/32", "dev", self.peer_link)

    def remove(self) -> None:
        # Deleting the namespace destroys the peer and with it the host end, but the kernel
        # does that asynchronously; deleting the host end first makes teardown deterministic.
        _ip("link", "del", self.host_link, check=False)
        _ip("netns", "del", self.namespace, check=False)


def _wait_ready(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.2)
        if ready:
            line = process.stdout.readline()
            if line.strip() == "ready":
                return
        if process.poll() is not None:
            break
    process.kill()
    stderr = process.stderr.read() if process.stderr else ""
    raise RuntimeError(f"the test servers in the namespace did not start: {stderr[-2000:]}")


@pytest.fixture(scope="session", name="test_network")
def test_network_fixture(tmp_path_factory) -> Iterator[TestNetwork]:
    """The test network, for the whole session; test modules import this function to use it."""
    reason = netns_unavailable_reason()
    if reason is not None:
        _skip_or_fail(reason)
    links = _Links()
    try:
        links.create()
    except (subprocess.CalledProcessError, RuntimeError) as exc:
        links.remove()
        detail = exc.stderr.strip() if isinstance(exc, subprocess.CalledProcessError) else str(exc)
        _skip_or_fail(f"could not create the namespace and veth pair ({detail})")
    directory = tmp_path_factory.mktemp("egress-net")
    cert, key, pem = _self_signed(links.address, directory)
    script = directory / "servers.py"
    script.write_text(_SERVER)
    process = subprocess.Popen(
        ["ip", "netns", "exec", links.namespace, sys.executable, "-I", str(script),
         links.address, str(HTTP_PORT), str(HTTPS_PORT), str(cert), str(key)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        _wait_ready(process)
        yield TestNetwork(
            namespace=links.namespace,
            address=links.address,
            host_address=links.host_address,
            http_port=HTTP_PORT,
            https_port=HTTPS_PORT,
            ca_pem=pem,
        )
    finally:
        # `ip netns exec` execs the server, so the process is the server itself.
        if process.poll() is None:
            process.kill()
        process.wait(10)
        links.remove()
