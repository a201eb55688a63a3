"""ToolHub as the tool backend of LLM apps, over real HTTP: a uvicorn server process, a real
Celery worker and the bubblewrap sandbox, driven by the official `mcp` Python client and by
plain HTTP for the OpenAPI tool servers.

The people: alice owns the toolkits; bob is another user; carol is kept out of the private
toolkit; admin creates the client credential that Open WebUI would use."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx
import pytest

from tests.conftest import REPO, start_worker
from tests.serving_fixtures import start_server
from toolhub.accounts.models import ApiToken
from toolhub.toolkits import access
from toolhub.toolkits.models import Status, Use
from toolhub.toolkits.valves import store_values

pytestmark = [pytest.mark.sandbox, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

SERVED = '''"""
title: Served Tools
author: ToolHub tests
description: Tools that LLM apps call through ToolHub.
version: 1.0.0
"""

from pydantic import BaseModel


class Tools:
    class UserValves(BaseModel):
        city: str = "nowhere"

    def greet(self, name: str, times: int = 1, __user__: dict = None) -> str:
        """Greet someone from the caller's city.
        :param name: Who to greet
        :param times: How often
        """
        city = __user__["valves"].city if __user__ and __user__.get("valves") else "?"
        return " ".join([f"Hello {name} from {city}!"] * times)

    def stats(self, numbers: list[int]) -> dict:
        """Sum and count of numbers."""
        return {"sum": sum(numbers), "count": len(numbers)}

    def explode(self, why: str) -> str:
        """Always fails."""
        raise ValueError(f"exploded: {why}")

    async def slow_count(self, n: int, __event_emitter__=None) -> str:
        """Count with status lines."""
        for i in range(n):
            await __event_emitter__({"type": "status", "data": {"description": f"step {i + 1} of {n}", "done": False}})
        await __event_emitter__({"type": "citation", "data": {"document": ["counted"], "metadata": [{}],
                                                              "source": {"name": "Counter", "url": "https://example.org/count"}}})
        return f"counted {n}"

    async def delete_file(self, path: str, __event_call__=None) -> str:
        """Delete a file after asking."""
        ok = await __event_call__({"type": "confirmation", "data": {"title": "Delete?", "message": f"Delete {path}?"}})
        return f"deleted {path}" if ok is True else f"kept {path}"
'''

PRIVATE = '''"""
title: Private Tools
version: 1.0.0
"""


class Tools:
    def secret_number(self) -> int:
        """A number only some people may get."""
        return 42
'''


@pytest.fixture
def ready(upload, build):
    def _ready(user, source: str, slug: str):
        toolkit = build(upload(user, source, slug=slug))
        assert toolkit.current_revision.status == Status.READY, (
            toolkit.current_revision.status_detail, toolkit.current_revision.traceback)
        return toolkit

    return _ready


@pytest.fixture
def stack(ready, alice, bob, carol, tmp_path):
    """Both toolkits built, then a worker and a server; alice and bob have their own cities."""
    served = ready(alice, SERVED, "served")
    private = ready(alice, PRIVATE, "private")
    access.toolkit_set_access(toolkit=private, use=Use.GROUPS, groups=[], users=["bob"], by=alice)
    store_values(toolkit=served, values={"city": "Lyon"}, user=alice)
    store_values(toolkit=served, values={"city": "Gdańsk"}, user=bob)
    worker = start_worker(tmp_path, concurrency=2)
    server = start_server(tmp_path)
    yield server
    server.kill()
    worker.kill()
    # Shown with the report of a test that failed: why the server answered 500, if it did.
    if "Traceback" in server.output():
        print("server log:\n" + server.output()[-6000:], file=sys.stderr)


def _get(url: str, **kwargs):
    # A generous client timeout: the machine is shared and the server may wait on SQLite.
    return httpx.get(url, timeout=60, **kwargs)


def _post(url: str, **kwargs):
    return httpx.post(url, timeout=60, **kwargs)


def _token(user) -> str:
    return ApiToken.issue(user=user, name="tests")[1]


# MCP, with the official client
# ------------------------------------------------------------------------------


def _mcp(url: str, token: str, **kwargs):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
    return Client(streamable_http_client(url, http_client=http), **kwargs), http


def _run(coro):
    # In a thread of its own: Playwright's sync API, used by the browser tests earlier in the
    # same session, leaves an event loop set on the main thread, and asyncio.run refuses to
    # start inside one.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_mcp_lists_and_calls_tools_as_the_caller(stack, alice, bob, carol, mode):
    async def scenario(user, slug_path):
        client, http = _mcp(f"{stack.url}{slug_path}", _token(user), mode=mode)
        async with http, client:
            tools = (await client.list_tools()).tools
            names = sorted(t.name for t in tools)
            greet = next((t for t in tools if t.name.endswith("greet")), None)
            result = await client.call_tool(greet.name, {"name": "Ann", "times": 2}) if greet else None
            return names, greet, result

    names, greet, result = _run(scenario(alice, "/mcp/served"))
    assert names == ["delete_file", "explode", "greet", "slow_count", "stats"]
    from toolhub.toolkits.models import Toolkit

    spec = next(s["function"] for s in Toolkit.objects.get(slug="served").current_revision.tools if s["function"]["name"] == "greet")
    assert greet.description == spec["description"] and greet.input_schema == spec["parameters"]
    assert not result.is_error
    assert result.content[0].text == "Hello Ann from Lyon! Hello Ann from Lyon!"

    _names, _greet, result = _run(scenario(bob, "/mcp/served"))
    assert result.content[0].text == "Hello Ann from Gdańsk! Hello Ann from Gdańsk!"

    # Every toolkit at once, with prefixed names: carol does not get the private toolkit.
    names, _greet, _result = _run(scenario(carol, "/mcp"))
    assert "served__greet" in names and not any(n.startswith("private__") for n in names)
    names, _greet, _result = _run(scenario(bob, "/mcp"))
    assert "private__secret_number" in names


def test_mcp_results_errors_progress_and_refusals(stack, alice, carol):
    async def scenario():
        progress: list[tuple[float, str | None]] = []

        async def on_progress(value, total, message):
            progress.append((value, message))

        client, http = _mcp(f"{stack.url}/mcp/served", _token(alice), mode="legacy")
        async with http, client:
            stats = await client.call_tool("stats", {"numbers": [1, 2, 3]})
            failed = await client.call_tool("explode", {"why": "on purpose"})
            invalid = await client.call_tool("stats", {"numbers": "many"})
            counted = await client.call_tool("slow_count", {"n": 3}, progress_callback=on_progress)
            return stats, failed, invalid, counted, progress

    stats, failed, invalid, counted, progress = _run(scenario())
    assert stats.structured_content == {"sum": 6, "count": 3} and json.loads(stats.content[0].text) == {"sum": 6, "count": 3}
    assert failed.is_error and "exploded: on purpose" in failed.content[0].text and "Traceback" not in failed.content[0].text
    assert invalid.is_error and invalid.content[0].text.startswith("Invalid call: numbers")
    assert counted.content[0].text == "counted 3"
    assert [m for _v, m in progress] == ["step 1 of 3", "step 2 of 3", "step 3 of 3"]
    assert counted.content[1].type == "resource_link" and counted.content[1].uri == "https://example.org/count"

    from toolhub.runs.models import Invocation

    assert set(Invocation.objects.filter(user=alice).values_list("surface", flat=True)) == {"mcp"}

    # carol may not use the private toolkit: its endpoint is a 404, and its tools are unknown at /mcp.
    response = _post(f"{stack.url}/mcp/private", headers={"Authorization": f"Bearer {_token(carol)}"},
                          json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert response.status_code == 404
    assert _post(f"{stack.url}/mcp/served", json={}).status_code == 401

    async def carol_calls():
        from mcp.shared.exceptions import MCPError

        client, http = _mcp(f"{stack.url}/mcp", _token(carol), mode="legacy")
        async with http, client:
            try:
                await client.call_tool("private__secret_number", {})
            except MCPError as exc:
                return str(exc)
        return None

    assert _run(carol_calls()) == "Unknown tool: private__secret_number"
    assert not Invocation.objects.filter(user=carol).exists()


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_mcp_confirmation_is_answered_through_elicitation(stack, alice, mode):
    import mcp_types as types

    asked: list[str] = []

    async def on_elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"confirm": True})

    async def scenario(**kwargs):
        client, http = _mcp(f"{stack.url}/mcp/served", _token(alice), mode=mode, **kwargs)
        async with http, client:
            return await client.call_tool("delete_file", {"path": "/tmp/x"})

    result = _run(scenario(elicitation_callback=on_elicit))
    assert result.content[0].text == "deleted /tmp/x", result
    assert asked == ["Delete?\nDelete /tmp/x?"]
    # A client without elicitation: the tool gets "no" at once instead of waiting.
    result = _run(scenario())
    assert result.content[0].text == "kept /tmp/x"


# OpenAPI tool servers
# ------------------------------------------------------------------------------


def _openwebui_specs(document: dict) -> list[dict]:
    """What Open WebUI makes of an OpenAPI tool server: one tool per operation with an
    operationId; name = operationId, description = description else summary, parameters =
    the JSON request body's schema."""
    specs = []
    for _path, methods in document["paths"].items():
        for _method, operation in methods.items():
            if "operationId" not in operation:
                continue
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            specs.append({"name": operation["operationId"],
                          "description": operation.get("description") or operation.get("summary", ""),
                          "parameters": body})
    return specs


def test_openapi_document_matches_the_specs_and_every_operation_runs(stack, alice, bob, carol):
    from toolhub.toolkits.models import Toolkit

    headers = {"Authorization": f"Bearer {_token(alice)}"}
    document = _get(f"{stack.url}/openapi/served/openapi.json", headers=headers).json()
    assert document["openapi"].startswith("3.1")
    stored = [s["function"] for s in Toolkit.objects.get(slug="served").current_revision.tools]
    assert _openwebui_specs(document) == stored

    arguments = {"greet": {"name": "Ann"}, "stats": {"numbers": [2, 3]}, "explode": {"why": "x"},
                 "slow_count": {"n": 1}, "delete_file": {"path": "a"}}
    answers = {name: _post(f"{stack.url}/openapi/served/{name}", headers=headers, json=body)
               for name, body in arguments.items()}
    assert answers["greet"].json() == "Hello Ann from Lyon!"
    assert answers["stats"].json() == {"sum": 5, "count": 2}
    assert answers["explode"].status_code == 500 and "exploded: x" in answers["explode"].json()["errors"][0]["message"]
    assert answers["slow_count"].json() == "counted 1"
    assert answers["delete_file"].json() == "kept a"
    bad = _post(f"{stack.url}/openapi/served/stats", headers=headers, json={"numbers": "x"})
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "numbers"

    # Every toolkit at once; carol does not see the private one and cannot call it.
    carol_headers = {"Authorization": f"Bearer {_token(carol)}"}
    everything = _get(f"{stack.url}/openapi/openapi.json", headers=carol_headers).json()
    assert "/served__greet" in everything["paths"] and not any(p.startswith("/private__") for p in everything["paths"])
    assert _post(f"{stack.url}/openapi/private__secret_number", headers=carol_headers, json={}).status_code == 404
    assert _get(f"{stack.url}/openapi/private/openapi.json", headers=carol_headers).status_code == 404
    bob_headers = {"Authorization": f"Bearer {_token(bob)}"}
    assert _post(f"{stack.url}/openapi/private__secret_number", headers=bob_headers, json={}).json() == "42"
    assert _post(f"{stack.url}/openapi/served__greet", headers=bob_headers, json={"name": "Z"}).json() == "Hello Z from Gdańsk!"
    assert _get(f"{stack.url}/openapi/served/openapi.json").status_code == 401


def test_a_client_credential_acts_for_each_user_with_their_own_settings(stack, admin, alice, bob):
    from toolhub.accounts import clients
    from toolhub.runs.models import Invocation

    _credential, token = clients.client_create(name="Open WebUI", acts_for_users=True, by=admin)
    for email, city in (("alice@example.org", "Lyon"), ("bob@example.org", "Gdańsk")):
        response = _post(f"{stack.url}/openapi/served/greet", json={"name": "Ann"},
                              headers={"Authorization": f"Bearer {token}", "X-OpenWebUI-User-Email": email})
        assert response.json() == f"Hello Ann from {city}!"
    # Without a user header the app calls as itself: no UserValves, the schema's default.
    response = _post(f"{stack.url}/openapi/served/greet", json={"name": "Ann"}, headers={"Authorization": f"Bearer {token}"})
    assert response.json() == "Hello Ann from nowhere!"
    unknown = _post(f"{stack.url}/openapi/served/greet", json={"name": "Ann"},
                         headers={"Authorization": f"Bearer {token}", "X-OpenWebUI-User-Email": "who@example.org"})
    assert unknown.status_code == 403
    rows = Invocation.objects.filter(client__name="Open WebUI").order_by("created_at")
    assert [(r.user.username, r.surface) for r in rows][:2] == [("alice", "openapi"), ("bob", "openapi")]
    clients.client_revoke(client=_credential)
    assert _post(f"{stack.url}/openapi/served/greet", json={"name": "Ann"},
                      headers={"Authorization": f"Bearer {token}"}).status_code == 401


# mcpo, a third-party MCP client from PyPI
# ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def mcpo_bin(tmp_path_factory) -> Path:
    """mcpo in a virtualenv of its own, from the test wheelhouse (`make wheelhouse` fills
    .data/wheelhouse/mcpo from tests/wheelhouse-mcpo.txt): it needs the 1.x `mcp` client."""
    wheels = REPO / ".data" / "wheelhouse" / "mcpo"
    if not wheels.is_dir():
        pytest.fail(f"{wheels} is missing: run `make wheelhouse`")
    venv = tmp_path_factory.mktemp("mcpo") / "venv"
    uv = Path(sys.executable).parent / "uv"
    subprocess.run([str(uv), "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    subprocess.run([str(uv), "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "--offline", "--no-index",
                    "--find-links", str(wheels), "-r", str(REPO / "tests" / "wheelhouse-mcpo.txt")], check=True)
    return venv / "bin" / "mcpo"


def test_mcpo_serves_a_toolkit_through_its_own_openapi_endpoint(stack, alice, mcpo_bin, tmp_path):
    from tests.serving_fixtures import _free_port

    port = _free_port()
    log = tmp_path / "mcpo.log"
    header = json.dumps({"Authorization": f"Bearer {_token(alice)}"})
    process = subprocess.Popen(
        [str(mcpo_bin), "--host", "127.0.0.1", "--port", str(port), "--server-type", "streamable-http",
         "--header", header, "--", f"{stack.url}/mcp/served"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        document = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=5)
                if response.status_code == 200 and response.json().get("paths"):
                    document = response.json()
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        assert document is not None, log.read_text(errors="replace")[-3000:]
        assert "/greet" in document["paths"] and "/stats" in document["paths"]
        answer = _post(f"http://127.0.0.1:{port}/greet", json={"name": "Ann"})
        assert answer.status_code == 200, answer.text
        assert "Hello Ann from Lyon!" in answer.text
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(10)
    from toolhub.runs.models import Invocation

    assert Invocation.objects.filter(user=alice, surface="mcp", tool="greet").exists()
