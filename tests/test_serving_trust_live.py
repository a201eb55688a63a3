"""The serving boundary over real HTTP: a uvicorn server process, a real Celery worker and the
sandbox, driven by the official `mcp` client and plain HTTP, as LLM apps call ToolHub. Each test
reproduces a finding of the security review and passes only with its fix.

The people (tests/test_serving_live.py's stack): alice owns the toolkits; bob is another user;
admin creates the credentials that an app such as Open WebUI would use."""

from __future__ import annotations

import json

import httpx2 as httpx
import mcp_types as types
import pytest

from tests.serving_fixtures import start_server
from tests.test_serving_live import _get, _mcp, _post, _run, _token, ready, stack  # noqa: F401 - fixtures
from toolhub.accounts import clients
from toolhub.accounts.models import ClientCredential
from toolhub.runs.models import Event, Invocation, RunStatus

pytestmark = [pytest.mark.sandbox, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

EMAIL = "X-OpenWebUI-User-Email"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def test_an_apps_credential_never_becomes_admin_over_http(stack, admin, alice):  # noqa: F811
    _credential, token = clients.client_create(name="Open WebUI", acts_for_users=True, by=admin)
    as_admin = {"Authorization": f"Bearer {token}", EMAIL: "admin@example.org"}
    for path in ("/api/v1/clients", "/api/v1/reviews"):
        assert _get(f"{stack.url}{path}", headers=as_admin).status_code == 403
    assert _post(f"{stack.url}/api/v1/clients", headers=as_admin, json={"name": "Backdoor"}).status_code == 403
    assert _post(f"{stack.url}/openapi/served/greet", headers=as_admin, json={"name": "Ann"}).status_code == 403
    as_alice = {"Authorization": f"Bearer {token}", EMAIL: "alice@example.org"}
    refused = _get(f"{stack.url}/api/v1/clients", headers=as_alice)
    assert refused.status_code == 403 and refused.json()["errors"][0]["message"].startswith("A client credential cannot do this")
    assert _post(f"{stack.url}/openapi/served/greet", headers=as_alice, json={"name": "Ann"}).json() == "Hello Ann from Lyon!"

    # Allowed to act for admins: it calls tools as the admin, and still manages nothing.
    _credential, trusted = clients.client_create(name="Admin console", acts_for_users=True, may_act_for_admins=True, by=admin)
    as_admin = {"Authorization": f"Bearer {trusted}", EMAIL: "admin@example.org"}
    assert _post(f"{stack.url}/openapi/served/greet", headers=as_admin, json={"name": "Ann"}).json() == "Hello Ann from nowhere!"
    assert _post(f"{stack.url}/api/v1/clients", headers=as_admin, json={"name": "Backdoor"}).status_code == 403
    assert not ClientCredential.objects.filter(name="Backdoor").exists()


def test_a_doubled_identity_header_is_refused_on_every_surface(stack, admin, alice, bob):  # noqa: F811
    _credential, token = clients.client_create(name="Open WebUI", acts_for_users=True, by=admin)
    doubled = [("Authorization", f"Bearer {token}"), (EMAIL, "alice@example.org"), (EMAIL, "bob@example.org")]
    api = httpx.post(f"{stack.url}/api/v1/toolkits/served/tools/greet/invoke", headers=doubled,
                     json={"arguments": {"name": "Ann"}, "wait": True}, timeout=60)
    openapi = httpx.post(f"{stack.url}/openapi/served/greet", headers=doubled, json={"name": "Ann"}, timeout=60)
    mcp = httpx.post(f"{stack.url}/mcp/served", headers=[*doubled, *MCP_HEADERS.items()], json=INITIALIZE, timeout=60)
    for response in (api, openapi, mcp):
        assert response.status_code == 400, response.text
        assert "was sent more than once" in response.json()["errors"][0]["message"]
    assert not Invocation.objects.exists()


def _session_recorder():
    """An httpx client whose responses' Mcp-Session-Id is kept, as a browser's devtools would show it."""
    seen: list[str] = []

    async def keep(response):
        if "mcp-session-id" in response.headers:
            seen.append(response.headers["mcp-session-id"])

    return seen, keep


def test_an_mcp_session_belongs_to_whoever_opened_it(stack, alice, bob):  # noqa: F811
    """bob, with his own valid token and alice's session id, could list, answer alice's tool's
    question (the request ids are predictable) and end her session; now each gets 404."""
    alice_token, bob_token = _token(alice), _token(bob)
    bob_tries: dict[str, int] = {}

    async def scenario():
        seen, keep = _session_recorder()
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {alice_token}"}, event_hooks={"response": [keep]})
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async def on_elicit(context, params):
            # While alice's tool waits for her answer, bob answers it in her session.
            async with httpx.AsyncClient(headers={"Authorization": f"Bearer {bob_token}", **MCP_HEADERS,
                                                  "Mcp-Session-Id": seen[0], "Mcp-Protocol-Version": "2025-06-18"}) as bob_http:
                for request_id in range(0, 6):
                    answer = {"jsonrpc": "2.0", "id": request_id, "result": {"action": "accept", "content": {"confirm": True}}}
                    response = await bob_http.post(f"{stack.url}/mcp/served", json=answer)
                    bob_tries[f"answer {request_id}"] = response.status_code
            return types.ElicitResult(action="decline")

        client = Client(streamable_http_client(f"{stack.url}/mcp/served", http_client=http), mode="legacy",
                        elicitation_callback=on_elicit)
        async with http, client:
            await client.list_tools()
            async with httpx.AsyncClient(headers={"Authorization": f"Bearer {bob_token}", **MCP_HEADERS,
                                                  "Mcp-Session-Id": seen[0], "Mcp-Protocol-Version": "2025-06-18"}) as bob_http:
                listed = await bob_http.post(f"{stack.url}/mcp/served", json={"jsonrpc": "2.0", "id": 9, "method": "tools/list"})
                bob_tries["list"] = listed.status_code
                ended = await bob_http.delete(f"{stack.url}/mcp/served")
                bob_tries["delete"] = ended.status_code
            # alice's session goes on: her question is hers to answer.
            return await client.call_tool("delete_file", {"path": "/tmp/x"})

    result = _run(scenario())
    assert set(bob_tries.values()) == {404}, bob_tries
    assert result.content[0].text == "kept /tmp/x"


def test_an_elicitation_answered_with_an_error_is_a_decline(stack, alice):  # noqa: F811
    """The official SDKs answer with a JSON-RPC error when their elicitation handler throws:
    the tool gets "no" at once, and the events say why; before, the client was told the call
    failed while the invocation waited 120 s and then ran on as if unanswered."""

    async def failing_handler(context, params):
        raise RuntimeError("the user's browser tab was closed")

    async def scenario():
        client, http = _mcp(f"{stack.url}/mcp/served", _token(alice), mode="legacy", elicitation_callback=failing_handler)
        async with http, client:
            return await client.call_tool("delete_file", {"path": "/tmp/y"})

    result = _run(scenario())
    assert not result.is_error and result.content[0].text == "kept /tmp/y"
    invocation = Invocation.objects.get(user=alice, tool="delete_file")
    assert invocation.status == RunStatus.SUCCEEDED
    answered = Event.objects.get(invocation=invocation, type="call_answered")
    assert answered.data["declined"].startswith("The client answered the question with an error")


def test_mcp_checks_the_browser_origin_and_the_host_whatever_allowed_hosts_says(stack, alice, tmp_path):  # noqa: F811
    server = start_server(tmp_path, ALLOWED_HOSTS="*", TOOLHUB_MCP_ALLOWED_ORIGINS="http://inspector.example:6274")
    try:
        token = {"Authorization": f"Bearer {_token(alice)}", **MCP_HEADERS}
        rebinding = httpx.post(f"{server.url}/mcp", json=INITIALIZE, timeout=60,
                               headers={**token, "Host": "attacker.example", "Origin": "http://attacker.example"})
        assert rebinding.status_code == 400
        foreign = httpx.post(f"{server.url}/mcp", json=INITIALIZE, timeout=60, headers={**token, "Origin": "http://attacker.example"})
        assert foreign.status_code == 403 and "TOOLHUB_MCP_ALLOWED_ORIGINS" in foreign.json()["errors"][0]["message"]
        allowed = httpx.post(f"{server.url}/mcp", json=INITIALIZE, timeout=60,
                             headers={**token, "Origin": "http://inspector.example:6274"})
        without = httpx.post(f"{server.url}/mcp", json=INITIALIZE, timeout=60, headers=token)
        assert (allowed.status_code, without.status_code) == (200, 200)
        # The rest of ToolHub keeps Django's ALLOWED_HOSTS.
        assert httpx.get(f"{server.url}/accounts/login/", headers={"Host": "attacker.example"}, timeout=60).status_code == 200
    finally:
        server.kill()


def test_the_combined_document_of_an_app_that_names_nobody_is_what_everyone_may_use(stack, admin, alice, bob):  # noqa: F811
    """Open WebUI fetches /openapi/openapi.json once, with the key only, and offers it to all of
    its users: bob's private toolkit is not in it, and is listed for bob when the app names him."""
    _credential, token = clients.client_create(name="Open WebUI", acts_for_users=True, by=admin)
    shared = _get(f"{stack.url}/openapi/openapi.json", headers={"Authorization": f"Bearer {token}"}).json()
    assert any(p.startswith("/served__") for p in shared["paths"])
    assert not any(p.startswith("/private__") for p in shared["paths"])
    for_bob = _get(f"{stack.url}/openapi/openapi.json", headers={"Authorization": f"Bearer {token}", EMAIL: "bob@example.org"})
    assert "/private__secret_number" in for_bob.json()["paths"]
    answer = _post(f"{stack.url}/openapi/private__secret_number", json={},
                   headers={"Authorization": f"Bearer {token}", EMAIL: "bob@example.org"})
    assert json.loads(answer.text) == "42"


def test_mcp_lists_every_toolkit_page_by_page_and_calls_the_last(stack, alice, tmp_path):  # noqa: F811
    """With more toolkits than fit a page (here 2 a page, 7 toolkits), tools/list pages with
    nextCursor, and a toolkit far down the list is listed and called; before, the catalogue
    stopped silently at 500 toolkits and the rest could be neither listed nor called."""
    from tests.test_serving_boundary import SPEC, _ready
    from toolhub.toolkits import services

    for number in range(5):
        _ready(services.toolkit_create(source=f'"""\ntitle: A{number}\n"""\nclass Tools:\n    def echo(self, text: str) -> str:\n'
                                               f'        """Echo."""\n        return text\n', user=alice,
                                       slug=f"a{number}").toolkit, tools=(SPEC,))
    server = start_server(tmp_path, TOOLHUB_MCP_PAGE_TOOLKITS="2")
    try:
        async def scenario():
            client, http = _mcp(f"{server.url}/mcp", _token(alice), mode="legacy")
            names, pages, cursor = [], 0, None
            async with http, client:
                while True:
                    listed = await client.list_tools(cursor=cursor)
                    pages += 1
                    names += [t.name for t in listed.tools]
                    cursor = listed.next_cursor
                    if not cursor or pages > 10:
                        break
                result = await client.call_tool("served__greet", {"name": "Zed"})
                return names, pages, result

        names, pages, result = _run(scenario())
    finally:
        server.kill()
    assert pages == 4
    assert names[:5] == [f"a{n}__echo" for n in range(5)] and "served__greet" in names and "private__secret_number" in names
    assert len(names) == len(set(names))
    assert result.content[0].text == "Hello Zed from Lyon!"
