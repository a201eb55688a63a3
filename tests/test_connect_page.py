"""The Connect page (one block per host, filled in for the chosen credential), the guides the
dashboard links to, the Copy buttons at a token's creation, and the `servers` entry of the
OpenAPI documents. The browser walk and the real clients are in tests/browser/test_connect.py.

The people: admin picks a client credential; carol is a plain user with her own API token."""

from __future__ import annotations

import pytest

from tests.conftest import toolkit_source
from toolhub.accounts import clients
from toolhub.toolkits import access
from toolhub.toolkits.models import Use

pytestmark = pytest.mark.django_db


def _ready(toolkit):
    revision = toolkit.current_revision
    revision.tools = [{"type": "function", "function": {"name": "echo", "description": "Echo.",
                                                        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}}]
    revision.set_status("ready")
    revision.save()
    return toolkit


def test_an_admin_sees_every_host_filled_in_for_the_chosen_credential(client, admin, settings):
    settings.ALLOWED_HOSTS = ["tools.example.org"]
    credential, raw = clients.client_create(name="LibreChat", acts_for_users=True, user_header="X-User-Email", by=admin)
    client.force_login(admin)
    page = client.get(f"/connect/?client={credential.pk}", HTTP_HOST="tools.example.org:8443").content.decode()
    for host in ("Open WebUI, as an OpenAPI tool server", "Open WebUI, as an MCP server", "LibreChat", "Dify", "RAGFlow", "Any MCP client"):
        assert host in page
    assert "http://tools.example.org:8443/mcp</code>" in page and "http://tools.example.org:8443/openapi</code>" in page
    # LibreChat's snippet sends the credential's own header, and allows the address with its port.
    assert 'X-User-Email: "{{LIBRECHAT_USER_EMAIL}}"' in page
    assert '- "tools.example.org:8443"' in page
    assert "ENABLE_FORWARD_USER_INFO_HEADERS=true" in page
    # Open WebUI sends only its own header: a credential reading another one is pointed out.
    assert "which Open WebUI does not send" in page
    assert "Admin Panel → Settings → Integrations → External Tool Servers → Add Connection" in page
    assert "neither a tool&#x27;s status lines nor its citations" in page or "neither a tool's status lines nor its citations" in page
    assert "uvx --with &#x27;mcp&lt;2&#x27; mcpo" in page or "uvx --with 'mcp&lt;2' mcpo" in page
    # The token is never in the page: only a field to paste it into.
    assert raw not in page and 'id="connect-token"' in page


def test_the_default_header_of_open_webui_needs_no_warning(client, admin):
    credential, _raw = clients.client_create(name="Open WebUI", acts_for_users=True, by=admin)
    client.force_login(admin)
    page = client.get(f"/connect/?client={credential.pk}").content.decode()
    assert "X-OpenWebUI-User-Email" in page and "which Open WebUI does not send" not in page


def test_a_credential_that_calls_as_itself_sends_no_user_header(client, admin):
    credential, _raw = clients.client_create(name="Batch", by=admin)
    client.force_login(admin)
    page = client.get(f"/connect/?client={credential.pk}").content.decode()
    assert "it calls as itself" in page and "LIBRECHAT_USER_EMAIL" not in page


def test_a_revoked_or_unknown_credential_is_not_offered(client, admin):
    credential, _raw = clients.client_create(name="Old app", by=admin)
    clients.client_revoke(client=credential)
    client.force_login(admin)
    for value in (str(credential.pk), "999999", "x' or 1=1"):
        page = client.get("/connect/", {"client": value}).content.decode()
        assert "Old app" not in page and "Your own API token" in page


def test_a_plain_user_sees_the_page_for_their_own_token_and_no_credentials(client, admin, carol):
    clients.client_create(name="Open WebUI production", acts_for_users=True, by=admin)
    credential = clients.client_create(name="Hidden", by=admin)[0]
    client.force_login(carol)
    page = client.get(f"/connect/?client={credential.pk}").content.decode()
    assert "Your own API token" in page and "Open WebUI production" not in page and "Hidden" not in page
    assert 'name="client"' not in page


def test_a_toolkit_named_narrows_the_urls_only_when_the_person_may_use_it(client, alice, bob, carol, upload):
    toolkit = _ready(upload(alice, toolkit_source("Echo"), slug="echo"))
    client.force_login(carol)
    assert "/mcp/echo</code>" in client.get("/connect/?toolkit=echo").content.decode()
    access.toolkit_set_access(toolkit=toolkit, use=Use.GROUPS, groups=[], users=["bob"], by=alice)
    page = client.get("/connect/?toolkit=echo").content.decode()
    assert "/mcp/echo" not in page and "/mcp</code>" in page


def test_the_connect_page_is_for_signed_in_people_and_only_get(client, carol):
    assert client.get("/connect/").status_code == 302
    client.force_login(carol)
    assert client.post("/connect/").status_code == 405


def test_the_connect_page_query_count_does_not_grow_with_credentials(client, admin, django_assert_num_queries):
    for i in range(5):
        clients.client_create(name=f"App {i}", by=admin)
    client.force_login(admin)
    client.get("/connect/")
    # Session, user, the credentials (the menu's badges: packages and reviews waiting).
    with django_assert_num_queries(5):
        page = client.get("/connect/").content.decode()
    assert all(f">App {i}</option>" in page for i in range(5))


def test_the_menu_and_the_toolkit_tab_link_to_the_connect_page_and_the_guide(client, alice, upload):
    _ready(upload(alice, toolkit_source("Echo"), slug="echo"))
    client.force_login(alice)
    tab = client.get("/toolkits/echo/connect/").content.decode()
    assert 'href="/connect/"' in tab and 'href="/connect/?toolkit=echo"' in tab and 'href="/guides/connect/"' in tab
    assert 'X-OpenWebUI-User-Email: "{{LIBRECHAT_USER_EMAIL}}"' in tab and "X-User-Email:" not in tab
    assert "uvx --with &#x27;mcp&lt;2&#x27; mcpo" in tab or "uvx --with 'mcp&lt;2' mcpo" in tab


def test_the_guide_is_rendered_from_docs_and_unknown_guides_are_404(client, carol):
    assert client.get("/guides/connect/").status_code == 302
    client.force_login(carol)
    page = client.get("/guides/connect/").content.decode()
    assert "<h1>Connecting LLM applications to ToolHub</h1>" in page
    assert "ENABLE_FORWARD_USER_INFO_HEADERS" in page
    assert client.get("/guides/settings/").status_code == 404
    assert client.get("/guides/..%2Fsettings/").status_code == 404
    assert client.post("/guides/connect/").status_code == 405


def test_a_new_client_token_has_a_copy_button_and_a_way_to_connect(client, admin):
    client.force_login(admin)
    page = client.post("/clients/", {"name": "Open WebUI"}).content.decode()
    assert 'data-copy="new-token"' in page
    from toolhub.accounts.models import ClientCredential

    assert f'href="/connect/?client={ClientCredential.objects.get(name="Open WebUI").pk}"' in page
    # The page's tables name every column, the actions one too (axe: empty-table-header).
    assert "<th></th>" not in page


def test_a_new_api_token_has_a_copy_button(client, carol):
    client.force_login(carol)
    page = client.post("/account/tokens/", {"name": "laptop"}).content.decode()
    assert 'data-copy="new-token"' in page and "<th></th>" not in page


def test_every_openapi_document_names_its_absolute_server(client, alice, bearer, upload, settings):
    settings.ALLOWED_HOSTS = ["tools.example.org"]
    _ready(upload(alice, toolkit_source("Echo"), slug="echo"))
    one = client.get("/openapi/echo/openapi.json", HTTP_HOST="tools.example.org", **bearer(alice)).json()
    assert one["servers"] == [{"url": "http://tools.example.org/openapi/echo"}]
    assert "/echo" in one["paths"]
    every = client.get("/openapi/openapi.json", HTTP_HOST="tools.example.org", **bearer(alice)).json()
    assert every["servers"] == [{"url": "http://tools.example.org/openapi"}]
    assert "/echo__echo" in every["paths"]
