"""Network egress end to end: a toolkit's tools reach the network only through ToolHub's egress proxy,
only when an admin granted it, and only to public addresses its allowlist covers.

Nothing is mocked. Each toolkit is uploaded and built for real (pip-compile, uv, introspection in
bubblewrap), and `run_invocation` - the worker's task - runs in this process: it starts the
filtering proxy on a UNIX socket, binds it into the sandbox at /run/egress.sock, and the runtime
inside starts its loopback forwarder and sets the proxy variables. The toolkit's code is plain
urllib and `socket`, unchanged from what an author would write.

The server the tools talk to is the private test network of tests/egress_fixtures.py: HTTP and
HTTPS servers at a global unicast address (45.45.x.45) that exists only in a network namespace
this test run creates, reached from the host over a veth pair. To the proxy it is an ordinary
public address, so no exemption of any kind is involved. Every other destination in these tests
(169.254.169.254, 127.0.0.1, 10.0.0.1, 192.168.1.1, localhost) must be refused before a single
packet is sent, which is what the tests check; nothing here reaches the internet.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from tests.egress_fixtures import TestNetwork, test_network_fixture  # noqa: F401 - the fixture
from tests.sandbox_fixtures import require_sandbox
from toolhub.accounts.models import ApiToken
from toolhub.runs.models import Invocation, RunStatus
from toolhub.runs.services import invocation_create
from toolhub.runs.tasks import run_invocation
from toolhub.toolkits.lifecycle import packages_approve
from toolhub.toolkits.models import Status
from toolhub.toolkits.services import toolkit_set_egress

pytestmark = [pytest.mark.sandbox, pytest.mark.django_db(transaction=True)]

# A refused or impossible connection must end in well under the tools' own 20 s timeouts: an
# answer from the proxy, or an immediate error inside the sandbox, never a wait.
FAST_SECONDS = 10.0

# The toolkit under test, as an author would write it. The test network's certificate is pasted
# into the source, the way a toolkit could pin a private CA; the tools verify the server with it,
# so a successful HTTPS call proves the TLS session ran end to end through the CONNECT tunnel.
PROBE = '''"""
title: Egress Probe
author: ToolHub tests
description: Calls web servers with urllib and opens raw sockets.
version: 1.0.0
"""

import socket
import ssl
import urllib.request

CA_PEM = """@CA_PEM@"""


def _get(url: str) -> bytes:
    context = ssl.create_default_context(cadata=CA_PEM)
    with urllib.request.urlopen(url, timeout=20, context=context) as response:
        return response.read()


class Tools:
    def fetch(self, url: str) -> str:
        """GET a URL with urllib and return the body as text."""
        return _get(url).decode()

    def download(self, url: str) -> str:
        """GET a URL with urllib and say how many bytes came back."""
        return f"{len(_get(url))} bytes"

    def fetch_all(self, urls: list[str]) -> list[str]:
        """GET each URL in turn; one line per URL, the outcome or the error."""
        outcomes = []
        for url in urls:
            try:
                outcomes.append(f"ok {len(_get(url))}")
            except Exception as exc:
                outcomes.append(f"{type(exc).__name__}: {exc}")
        return outcomes

    def connect(self, host: str, port: int) -> str:
        """Open a TCP connection with the socket module, as a database driver would."""
        with socket.create_connection((host, port), timeout=20):
            return "connected"
'''


@pytest.fixture(autouse=True)
def _sandbox_available():
    require_sandbox()


@pytest.fixture
def probe(upload, build, admin, test_network: TestNetwork):
    """The probe toolkit, uploaded by the admin and built; ready, with no grant yet."""
    toolkit = build(upload(admin, PROBE.replace("@CA_PEM@", test_network.ca_pem), slug="egress_probe"))
    revision = toolkit.current_revision
    assert revision.status == Status.READY, (revision.status_detail, revision.traceback)
    assert not toolkit.egress_granted
    return toolkit


def grant(toolkit, admin, hosts: list[str]):
    return toolkit_set_egress(toolkit=toolkit, granted=True, hosts=hosts, by=admin)


def run(toolkit, tool: str, user, **arguments) -> tuple[Invocation, float]:
    """Accept a call and run it the way the worker does; the invocation and how long it took."""
    invocation = invocation_create(toolkit=toolkit, tool=tool, arguments=arguments, user=user)
    started = time.monotonic()
    run_invocation.run(str(invocation.id))
    elapsed = time.monotonic() - started
    invocation.refresh_from_db()
    return invocation, elapsed


def token() -> str:
    """A path no other test uses, to find this test's requests in the servers' log."""
    return f"/t-{uuid.uuid4().hex}"


def test_without_a_grant_urllib_fails_at_once_with_an_error_naming_egress(probe, admin, test_network) -> None:
    path = token()

    invocation, elapsed = run(probe, "fetch", admin, url=test_network.url(path))

    assert invocation.status == RunStatus.FAILED
    assert elapsed < FAST_SECONDS
    assert invocation.error.startswith("URLError:")
    assert "this toolkit has no network egress; an admin can grant it on the toolkit's page" in invocation.error
    # No proxy ran, so there is no report, and the server never heard of the request.
    assert invocation.egress is None
    assert path not in test_network.paths_seen()


def test_without_a_grant_a_raw_socket_reaches_nothing(probe, admin, test_network) -> None:
    invocation, elapsed = run(probe, "connect", admin, host=test_network.address, port=test_network.http_port)

    assert invocation.status == RunStatus.FAILED
    assert elapsed < FAST_SECONDS
    assert invocation.error.startswith("EgressUnavailableError: [Errno 101]")
    assert "no network egress" in invocation.error
    assert invocation.egress is None


def test_a_grant_lets_urllib_reach_a_public_ip_literal_and_records_the_host(
    probe, admin, test_network, client
) -> None:
    grant(probe, admin, [])
    path = token()

    invocation, _ = run(probe, "fetch", admin, url=test_network.url(path))

    assert invocation.status == RunStatus.SUCCEEDED, invocation.error
    answer = json.loads(invocation.result)
    assert answer["path"] == path
    assert answer["host"] == f"{test_network.address}:{test_network.http_port}"
    # The request came from the host's end of the veth pair: the proxy on the host made it.
    assert answer["peer"] == test_network.host_address
    report = invocation.egress
    assert report["refused"] == [] and report["failed"] == []
    [host] = report["hosts"]
    assert (host["host"], host["port"], host["connections"]) == (test_network.address, test_network.http_port, 1)
    assert host["addresses"] == [test_network.address]
    assert host["bytes_in"] > len(invocation.result) and host["bytes_out"] > len(path)
    assert (report["bytes_in"], report["bytes_out"]) == (host["bytes_in"], host["bytes_out"])

    # The run page and the API show what the invocation contacted.
    client.force_login(admin)
    page = client.get(f"/invocations/{invocation.id}/").content.decode()
    assert f"<code>{test_network.address}</code>" in page
    assert str(host["bytes_in"]) in page
    _, raw = ApiToken.issue(user=admin, name="egress-e2e")
    api = client.get(f"/api/v1/invocations/{invocation.id}", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.status_code == 200
    assert api.json()["egress"]["hosts"][0]["host"] == test_network.address


def test_https_goes_end_to_end_through_a_connect_tunnel(probe, admin, test_network) -> None:
    grant(probe, admin, [])
    path = token()

    invocation, _ = run(probe, "fetch", admin, url=test_network.url(path, tls=True))

    # The tool verified the server's certificate itself, so the proxy only passed bytes on.
    assert invocation.status == RunStatus.SUCCEEDED, invocation.error
    answer = json.loads(invocation.result)
    assert (answer["path"], answer["tls"]) == (path, True)
    [host] = invocation.egress["hosts"]
    assert (host["host"], host["port"]) == (test_network.address, test_network.https_port)
    assert host["bytes_in"] > 0 and host["bytes_out"] > 0


def test_an_allowlist_refuses_an_ip_literal_it_does_not_name(probe, admin, test_network) -> None:
    grant(probe, admin, ["api.example.org"])
    plain, secure = token(), token()

    invocation, elapsed = run(
        probe, "fetch_all", admin, urls=[test_network.url(plain), test_network.url(secure, tls=True)]
    )

    assert invocation.status == RunStatus.SUCCEEDED, invocation.error
    assert elapsed < FAST_SECONDS
    over_http, over_connect = invocation.result
    reason = f"{test_network.address} is not in this toolkit's allowlist (api.example.org)"
    assert over_http == f"HTTPError: HTTP Error 403: ToolHub egress refused: {reason}"
    assert over_connect.startswith("URLError: <urlopen error Tunnel connection failed: 403 ToolHub egress refused")
    assert reason in over_connect
    report = invocation.egress
    assert report["hosts"] == []
    assert report["refused"] == [
        {"host": test_network.address, "port": test_network.http_port, "reason": reason},
        {"host": test_network.address, "port": test_network.https_port, "reason": reason},
    ]
    seen = test_network.paths_seen()
    assert plain not in seen and secure not in seen


# (URL, what the tool reads, the host and port recorded, the reason recorded)
FORBIDDEN = [
    (
        "http://169.254.169.254/latest/meta-data/",
        "169.254.169.254", 80,
        "169.254.169.254 is a link-local address (this includes cloud metadata services)",
    ),
    ("http://127.0.0.1:6379/", "127.0.0.1", 6379, "127.0.0.1 is a loopback address"),
    ("http://localhost:5432/", "localhost", 5432, "localhost resolves to 127.0.0.1, which is a loopback address"),
    ("http://10.0.0.1/", "10.0.0.1", 80, "10.0.0.1 is a private address"),
    ("http://192.168.1.1:8080/", "192.168.1.1", 8080, "192.168.1.1 is a private address"),
    ("https://10.0.0.1/", "10.0.0.1", 443, "10.0.0.1 is a private address"),
    ("http://[::1]:6379/", "::1", 6379, "::1 is a loopback address"),
]


def test_metadata_loopback_and_private_addresses_are_refused_with_reasons(probe, admin, test_network) -> None:
    # Any public host is allowed, so every refusal below comes from the address rules.
    grant(probe, admin, [])
    urls = [url for url, *_ in FORBIDDEN]

    invocation, elapsed = run(probe, "fetch_all", admin, urls=urls)

    assert invocation.status == RunStatus.SUCCEEDED, invocation.error
    # Seven refusals in one invocation, sandbox start-up included, and nothing waited.
    assert elapsed < FAST_SECONDS
    report = invocation.egress
    assert report["hosts"] == [] and report["failed"] == [] and report["connections"] == 0
    recorded = {(r["host"], r["port"]): r["reason"] for r in report["refused"]}
    assert len(report["refused"]) == len(FORBIDDEN)
    for (url, host, port, reason), outcome in zip(FORBIDDEN, invocation.result, strict=True):
        assert "ToolHub egress refused: " + reason in outcome, (url, outcome)
        assert recorded[(host, port)].startswith(reason), (url, recorded)
        assert recorded[(host, port)].endswith("ToolHub only connects to public addresses")


def test_a_raw_socket_fails_fast_with_an_egress_error_even_with_a_grant(probe, admin, test_network) -> None:
    grant(probe, admin, [])

    public, _ = run(probe, "connect", admin, host=test_network.address, port=test_network.http_port)
    redis, elapsed = run(probe, "connect", admin, host="127.0.0.1", port=6379)

    assert public.status == RunStatus.FAILED
    assert public.error.startswith("EgressUnavailableError: [Errno 101] cannot connect to")
    assert "only goes through ToolHub's HTTP/HTTPS proxy" in public.error
    # Loopback inside the sandbox is the sandbox's own: the host's Redis is not there.
    assert redis.status == RunStatus.FAILED
    assert elapsed < FAST_SECONDS
    assert redis.error.startswith("EgressUnavailableError: [Errno 111] cannot connect to 127.0.0.1:6379")
    assert "the sandbox has a loopback interface of its own" in redis.error
    # A socket that bypasses the proxy leaves nothing for the proxy to record.
    for invocation in (public, redis):
        assert invocation.egress["hosts"] == [] and invocation.egress["connections"] == 0


def test_the_byte_limit_cuts_a_download_and_refuses_what_follows(probe, admin, test_network, settings) -> None:
    settings.TOOLHUB_EGRESS_MAX_BYTES = 4096
    grant(probe, admin, [])
    after = token()

    invocation, elapsed = run(
        probe, "fetch_all", admin, urls=[test_network.url("/bytes/200000"), test_network.url(after)]
    )

    assert invocation.status == RunStatus.SUCCEEDED, invocation.error
    assert elapsed < FAST_SECONDS
    cut, refused = invocation.result
    assert cut.startswith("IncompleteRead:")
    assert refused == "HTTPError: HTTP Error 403: ToolHub egress refused: byte limit reached (4096 bytes per invocation)"
    report = invocation.egress
    assert report["limits_reached"] == ["bytes"]
    assert report["bytes_in"] + report["bytes_out"] <= 4096
    reasons = [r["reason"] for r in report["refused"]]
    assert reasons == [
        "byte limit reached (4096 bytes per invocation); the response was cut off",
        "byte limit reached (4096 bytes per invocation)",
    ]
    assert after not in test_network.paths_seen()


def test_the_connection_limit_refuses_connections_past_it(probe, admin, test_network, settings) -> None:
    settings.TOOLHUB_EGRESS_MAX_CONNECTIONS = 2
    grant(probe, admin, [])
    paths = [token(), token(), token()]

    invocation, _ = run(probe, "fetch_all", admin, urls=[test_network.url(p) for p in paths])

    assert invocation.status == RunStatus.SUCCEEDED, invocation.error
    first, second, third = invocation.result
    assert first.startswith("ok ") and second.startswith("ok ")
    assert third == "HTTPError: HTTP Error 403: ToolHub egress refused: connection limit reached (2 per invocation)"
    report = invocation.egress
    assert report["limits_reached"] == ["connections"]
    assert report["connections"] == 2 and report["hosts"][0]["connections"] == 2
    seen = test_network.paths_seen()
    assert paths[0] in seen and paths[1] in seen and paths[2] not in seen


def test_withdrawing_the_grant_cuts_the_toolkit_off_again(probe, admin, test_network) -> None:
    grant(probe, admin, [])
    reached, _ = run(probe, "fetch", admin, url=test_network.url(token()))
    toolkit_set_egress(toolkit=probe, granted=False, hosts=[], by=admin)
    path = token()

    cut_off, elapsed = run(probe, "fetch", admin, url=test_network.url(path))

    assert reached.status == RunStatus.SUCCEEDED, reached.error
    assert cut_off.status == RunStatus.FAILED and elapsed < FAST_SECONDS
    assert "this toolkit has no network egress" in cut_off.error
    assert cut_off.egress is None
    assert path not in test_network.paths_seen()


# The same checks with the HTTP clients toolkits use most. They are not part of the runtime, so a
# toolkit has to ask for them, an admin approves them, and the build installs them from the
# offline wheelhouse. Each test is skipped until its client's wheels are there (add the client
# and its dependencies, pinned, to tests/wheelhouse.txt).
CLIENT_PROBES = {
    "requests": """
import os
import tempfile

import requests


class Tools:
    def fetch_all(self, urls: list[str]) -> list[str]:
        \"\"\"GET each URL with requests; the status and body, or the error.\"\"\"
        ca_file = os.path.join(tempfile.gettempdir(), "test-network-ca.pem")
        with open(ca_file, "w") as handle:
            handle.write(CA_PEM)
        outcomes = []
        for url in urls:
            try:
                response = requests.get(url, timeout=20, verify=ca_file)
                outcomes.append(f"{response.status_code} {response.text}")
            except Exception as exc:
                outcomes.append(f"{type(exc).__name__}: {exc}")
        return outcomes
""",
    "httpx": """
import ssl

import httpx


class Tools:
    def fetch_all(self, urls: list[str]) -> list[str]:
        \"\"\"GET each URL with httpx; the status and body, or the error.\"\"\"
        outcomes = []
        with httpx.Client(verify=ssl.create_default_context(cadata=CA_PEM), timeout=20) as client:
            for url in urls:
                try:
                    response = client.get(url)
                    outcomes.append(f"{response.status_code} {response.text}")
                except Exception as exc:
                    outcomes.append(f"{type(exc).__name__}: {exc}")
        return outcomes
""",
    # No trust_env=True here: ToolHub's runtime makes every ClientSession honour the proxy.
    "aiohttp": """
import ssl

import aiohttp


class Tools:
    async def fetch_all(self, urls: list[str]) -> list[str]:
        \"\"\"GET each URL with aiohttp; the status and body, or the error.\"\"\"
        context = ssl.create_default_context(cadata=CA_PEM)
        outcomes = []
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as session:
            for url in urls:
                try:
                    async with session.get(url, ssl=context) as response:
                        outcomes.append(f"{response.status} {await response.text()}")
                except Exception as exc:
                    outcomes.append(f"{type(exc).__name__}: {exc}")
        return outcomes
""",
}


def _has_wheel(name: str) -> bool:
    return any(any(Path(directory).glob(f"{name}-*.whl")) for directory in django_settings.TOOLHUB_FIND_LINKS)


@pytest.mark.parametrize("client_name", sorted(CLIENT_PROBES))
def test_unchanged_http_clients_reach_allowed_hosts_and_see_the_refusals(
    client_name, upload, build, admin, test_network
) -> None:
    if not _has_wheel(client_name):
        pytest.skip(f"no {client_name} wheel in the offline wheelhouse ({django_settings.TOOLHUB_FIND_LINKS})")
    packages_approve(names=[client_name], user=admin)
    head = f'''"""
title: {client_name} probe
author: ToolHub tests
version: 1.0.0
requirements: {client_name}
"""

CA_PEM = """{test_network.ca_pem}"""
'''
    toolkit = build(upload(admin, head + CLIENT_PROBES[client_name], slug=f"probe_{client_name}"))
    revision = toolkit.current_revision
    assert revision.status == Status.READY, (revision.status_detail, revision.build_log[-3000:], revision.traceback)
    grant(toolkit, admin, [])
    plain, secure = token(), token()
    urls = [
        test_network.url(plain),
        test_network.url(secure, tls=True),
        "http://169.254.169.254/latest/meta-data/",
        "https://10.0.0.1/",
    ]

    invocation, elapsed = run(toolkit, "fetch_all", admin, urls=urls)

    assert invocation.status == RunStatus.SUCCEEDED, (invocation.error, invocation.traceback)
    assert elapsed < 2 * FAST_SECONDS
    over_http, over_https, metadata, private = invocation.result
    status, body = over_http.split(" ", 1)
    assert (status, json.loads(body)["path"]) == ("200", plain), over_http
    status, body = over_https.split(" ", 1)
    assert (status, json.loads(body)["path"], json.loads(body)["tls"]) == ("200", secure, True), over_https
    assert metadata.startswith("403 ToolHub egress refused: 169.254.169.254 is a link-local address"), metadata
    assert "ToolHub egress refused: 10.0.0.1 is a private address" in private, private
    report = invocation.egress
    contacted = sorted((h["host"], h["port"]) for h in report["hosts"])
    assert contacted == [(test_network.address, test_network.http_port), (test_network.address, test_network.https_port)]
    assert sorted((r["host"], r["port"]) for r in report["refused"]) == [("10.0.0.1", 443), ("169.254.169.254", 80)]
