"""Hostile input gets a clear 4xx, never a 500, and loses nothing.

Each test reproduces one finding: on PostgreSQL (CI's database) these requests answered 500,
because PostgreSQL refuses NUL, lone surrogates and values longer than their column.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import toolkit_source
from tests.helpers import ready_string_reverse, reverse_tool
from toolhub.packages.models import Package, PackageRequest
from toolhub.runs.models import Invocation
from toolhub.toolkits import services
from toolhub.toolkits.models import Revision, Toolkit
from toolhub.toolkits.source_checks import MAX_IMPORTS, MAX_REQUIREMENTS, ToolkitSourceInvalid

pytestmark = pytest.mark.django_db

API = "/api/v1"
PARAMETERS = {"type": "object", "properties": {"string": {"type": "string"}}, "required": ["string"]}


@pytest.fixture
def ready(upload, alice):
    """alice's ready toolkit with one tool, `reverse_string`."""
    return ready_string_reverse(upload, alice, tools=[reverse_tool(PARAMETERS)])


def _post(client, path: str, body, headers: dict):
    data = body if isinstance(body, str) else json.dumps(body)
    return client.post(API + path, data, content_type="application/json", **headers)


def _refused(response, status: int = 400) -> dict:
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"].startswith("application/json")
    [error] = response.json()["errors"]
    return error


# NUL AND TEXT THAT IS NOT UNICODE
# ------------------------------------------------------------------------------------------


def test_nul_in_the_query_string_of_the_api_is_a_400(client, carol, bearer):
    error = _refused(client.get(f"{API}/toolkits", {"q": "a\x00b"}, **bearer(carol)))
    assert error["message"] == 'Refused: query parameter "q" contains a NUL character, which cannot be stored.'
    assert error["field"] == "q"


def test_nul_in_the_query_string_of_a_page_is_a_400(client, carol):
    client.force_login(carol)
    response = client.get("/toolkits/", {"q": "a\x00b"})
    assert response.status_code == 400
    assert b"NUL" in response.content


def test_nul_in_a_slug_in_the_url_is_a_400(client, carol, bearer, ready):
    error = _refused(client.get(f"{API}/toolkits/string%00reverse", **bearer(carol)))
    assert "the address contains a NUL character" in error["message"]
    error = _refused(_post(client, f"/toolkits/{ready.slug}/tools/rev%00/invoke", {"arguments": {}}, bearer(carol)))
    assert "NUL" in error["message"]
    assert not Invocation.objects.exists()


def test_nul_in_a_reject_reason_is_a_400_and_decides_nothing(client, admin, alice, bearer, upload):
    upload(alice, toolkit_source("Sizes", "humanize>=4"), slug="sizes")
    error = _refused(_post(client, "/packages/humanize/reject", {"reason": "no\x00pe"}, bearer(admin)))
    assert error["field"] == "reason"
    assert Package.objects.get(name="humanize").status == "pending"


def test_nul_in_a_reject_reason_from_the_queue_page_is_a_400(client, admin, alice, upload):
    upload(alice, toolkit_source("Sizes", "humanize>=4"), slug="sizes")
    client.force_login(admin)
    response = client.post("/packages/decide/", {"name": "humanize", "action": "reject", "reason": "a\x00"})
    assert response.status_code == 400
    assert 'form field "reason" contains a NUL character, which cannot be stored' in response.content.decode()
    assert Package.objects.get(name="humanize").status == "pending"


@pytest.mark.parametrize("body", [
    {"arguments": {"string": "abc"}, "messages": [{"role": "user", "content": "hi\x00"}]},
    {"arguments": {"string": "abc"}, "files": [{"name": "a\x00.txt"}]},
    {"arguments": {"string": "a\x00c"}},
    {"arguments": {"str\x00ing": "abc"}},
    {"arguments": {"string": "\ud800"}},
])
def test_nul_or_a_lone_surrogate_anywhere_in_an_invocation_is_a_400(client, carol, bearer, ready, body):
    error = _refused(_post(client, f"/toolkits/{ready.slug}/tools/reverse_string/invoke", body, bearer(carol)))
    assert "JSON body" in error["message"]
    assert "\x00" not in error["message"] and "\ud800" not in error["message"]
    assert not Invocation.objects.exists()


def test_nul_in_a_form_upload_slug_is_a_400(client, alice):
    client.force_login(alice)
    response = client.post("/toolkits/new/", {"source": toolkit_source("Sizes"), "slug": "si\x00zes"})
    assert response.status_code == 400
    assert not Toolkit.objects.exists()


def test_nul_in_valve_values_is_a_400(client, admin, bearer, ready):
    error = _refused(client.put(
        f"{API}/toolkits/{ready.slug}/valves", json.dumps({"values": {"k": "v\x00"}}),
        content_type="application/json", **bearer(admin),
    ))
    assert error["field"] == "values.k"


# NON-FINITE NUMBERS
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("number", ["1e400", "-1e400", "NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_refused(client, carol, bearer, ready, number):
    body = '{"arguments": {"string": "abc", "n": ' + number + '}}'
    error = _refused(_post(client, f"/toolkits/{ready.slug}/tools/reverse_string/invoke", body, bearer(carol)))
    assert "JSON" in error["message"]
    assert not Invocation.objects.exists()


# LENGTHS AND COUNTS OF A TOOLKIT
# ------------------------------------------------------------------------------------------


def _source_errors(source: str) -> list:
    with pytest.raises(ToolkitSourceInvalid) as caught:
        services.toolkit_create(source=source, user=None)
    return caught.value.errors


def test_a_toolkit_may_ask_for_at_most_so_many_packages(client, alice, bearer):
    many = ", ".join(f"pkg-{i}" for i in range(MAX_REQUIREMENTS + 1))
    error = _refused(_post(client, "/toolkits", {"source": toolkit_source("Many", many)}, bearer(alice)))
    assert error["line"] == 6
    assert f"lists {MAX_REQUIREMENTS + 1} packages" in error["message"]
    assert f"at most {MAX_REQUIREMENTS}" in error["message"]
    assert not Toolkit.objects.exists() and not Package.objects.exists()


def test_exactly_the_maximum_is_accepted_and_recorded(client, alice, bearer):
    many = ", ".join(f"pkg-{i}" for i in range(MAX_REQUIREMENTS))
    response = _post(client, "/toolkits", {"source": toolkit_source("Many", many)}, bearer(alice))
    assert response.status_code == 201, response.content
    assert PackageRequest.objects.count() == MAX_REQUIREMENTS


def test_a_requirement_name_longer_than_its_column_is_a_line_numbered_400(client, alice, bearer):
    source = toolkit_source("Long", "a" * 201 + ">=1")
    error = _refused(_post(client, "/toolkits", {"source": source}, bearer(alice)))
    assert error["line"] == 6
    assert "name longer than 200 characters" in error["message"]
    assert not Toolkit.objects.exists()


def test_a_requirement_specifier_longer_than_its_column_is_a_line_numbered_400(client, alice, bearer):
    # One clause (commas separate requirements), a valid version of 243 characters.
    source = toolkit_source("Long", "humanize==1" + ".0" * 120)
    error = _refused(_post(client, "/toolkits", {"source": source}, bearer(alice)))
    assert error["line"] == 6
    assert "version specifier longer than 200 characters" in error["message"]
    assert not Toolkit.objects.exists() and not Package.objects.exists()


def test_a_tool_name_longer_than_its_column_is_a_line_numbered_400(client, alice, bearer):
    source = toolkit_source("Long").replace("def echo(", f"def {'e' * 201}(")
    error = _refused(_post(client, "/toolkits", {"source": source}, bearer(alice)))
    assert error["line"] == 10
    assert "201 characters long" in error["message"]
    assert not Toolkit.objects.exists()


def test_too_many_imports_are_a_line_numbered_400(alice):
    imports = "".join(f"import mod{i}\n" for i in range(MAX_IMPORTS + 1))
    source = imports + toolkit_source("Imports")
    [error] = _source_errors(source)
    assert error.code == "too_many_imports"
    assert error.line is not None
    assert not Revision.objects.exists()


# PACKAGE DECISIONS
# ------------------------------------------------------------------------------------------


def test_an_overlong_package_name_in_the_url_is_a_400(client, admin, bearer):
    error = _refused(_post(client, f"/packages/{'a' * 201}/approve", {}, bearer(admin)))
    assert error["field"] == "name"
    assert not Package.objects.exists()


def test_an_overlong_constraint_or_reason_is_a_400(client, admin, alice, bearer, upload):
    upload(alice, toolkit_source("Sizes", "humanize>=4"), slug="sizes")
    error = _refused(_post(client, "/packages/humanize/approve", {"constraint": ">=1," * 60}, bearer(admin)))
    assert error["field"] == "constraint"
    error = _refused(_post(client, "/packages/humanize/reject", {"reason": "x" * 2001}, bearer(admin)))
    assert error["field"] == "reason"
    assert Package.objects.get(name="humanize").status == "pending"


@pytest.mark.parametrize("body", ["[]", '[{"constraint": ">=1"}]', '"x"', '{"constraint": ">=1", "extra": 1}'])
def test_approve_takes_only_its_documented_object(client, admin, alice, bearer, upload, body):
    upload(alice, toolkit_source("Sizes", "humanize>=4"), slug="sizes")
    _refused(_post(client, "/packages/humanize/approve", body, bearer(admin)))
    assert Package.objects.get(name="humanize").status == "pending"


def test_an_empty_source_is_a_400(client, alice, bearer):
    error = _refused(_post(client, "/toolkits", {"source": ""}, bearer(alice)))
    assert error["field"] == "source"


# THE PACKAGES API PAGINATES AND LOADS NO REVISION
# ------------------------------------------------------------------------------------------


def test_the_packages_api_pages(client, admin, alice, bearer, upload):
    upload(alice, toolkit_source("Many", ", ".join(f"pkg-{i:02}" for i in range(30))), slug="many")
    headers = bearer(admin)
    first = client.get(f"{API}/packages", {"limit": 20}, **headers).json()
    assert (first["count"], first["next_offset"], len(first["items"])) == (30, 20, 20)
    second = client.get(f"{API}/packages", {"limit": 20, "offset": 20}, **headers).json()
    assert (second["next_offset"], len(second["items"])) == (None, 10)
    names = [p["name"] for p in first["items"] + second["items"]]
    assert names == [f"pkg-{i:02}" for i in range(30)]
    _refused(client.get(f"{API}/packages", {"limit": 501}, **headers))
    _refused(client.get(f"{API}/packages", {"offset": -1}, **headers))


def test_a_package_lists_the_first_fifty_of_its_requests_and_counts_them(client, admin, alice, bearer, upload):
    for i in range(53):
        upload(alice, toolkit_source(f"Sizes {i}", "humanize"), slug=f"sizes_{i:02}")
    [package] = client.get(f"{API}/packages", **bearer(admin)).json()["items"]
    assert package["requested_count"] == 53
    assert [r["toolkit"] for r in package["requested_by"]] == [f"sizes_{i:02}" for i in range(50)]


def test_the_packages_api_never_reads_a_revisions_heavy_columns(client, admin, alice, bearer, upload):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    upload(alice, toolkit_source("Sizes", "humanize"), slug="sizes")
    headers = bearer(admin)
    client.get(f"{API}/packages", **headers)
    with CaptureQueriesContext(connection) as queries:
        assert client.get(f"{API}/packages", **headers).status_code == 200
    sql = " ".join(q["sql"] for q in queries)
    for column in ('"source"', '"build_log"', '"lock"', '"traceback"'):
        assert column not in sql


# LARGE BODIES GET A READABLE 413 OVER A REAL SOCKET
# ------------------------------------------------------------------------------------------


@pytest.fixture
def gunicorn(tmp_path):
    from tests.live_fixtures import start_gunicorn

    server = start_gunicorn(tmp_path, {"DJANGO_SETTINGS_MODULE": "toolhub.settings_test"}, workers=1)
    yield server
    server.stop()


@pytest.mark.parametrize("path", ["/api/v1/toolkits", "/toolkits/new/"])
def test_a_body_over_the_limit_gets_a_readable_413_not_a_dropped_connection(gunicorn, path):
    import http.client

    # 6 MiB: more than the socket buffers absorb, so an unread body resets the connection.
    body = json.dumps({"source": "#" * (6 * 1024 * 1024)}).encode()
    for _ in range(3):
        connection = http.client.HTTPConnection("127.0.0.1", gunicorn.port, timeout=30)
        connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        text = response.read().decode()
        connection.close()
        assert response.status == 413
        assert "larger than 2,097,152 bytes" in text
        if path.startswith("/api/"):
            assert json.loads(text)["errors"][0]["message"].startswith("The request body is larger")


# THE OPENAPI DOCUMENT SAYS WHAT THE API ACCEPTS
# ------------------------------------------------------------------------------------------


def _openapi(client) -> dict:
    response = client.get(f"{API}/openapi.json")
    assert response.status_code == 200
    return response.json()


def _resolve(document: dict, schema: dict) -> dict:
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _body(document: dict, path: str, method: str = "post") -> dict:
    content = document["paths"][path][method]["requestBody"]["content"]["application/json"]
    return _resolve(document, content["schema"])


def test_the_openapi_document_states_enums_body_shapes_and_lengths(client):
    document = _openapi(client)
    [status] = [p for p in document["paths"]["/api/v1/packages"]["get"]["parameters"] if p["name"] == "status"]
    assert "pending" in json.dumps(status["schema"]) and "rejected" in json.dumps(status["schema"])
    for path in ("/api/v1/packages/{name}/approve", "/api/v1/packages/{name}/reject",
                 "/api/v1/toolkits/{slug}/tools/{tool}/invoke", "/api/v1/toolkits"):
        body = _body(document, path)
        assert body["type"] == "object" and body["additionalProperties"] is False, path
    assert _body(document, "/api/v1/toolkits")["properties"]["source"]["minLength"] == 1
    assert _body(document, "/api/v1/packages/{name}/reject")["properties"]["reason"]["maxLength"] == 2000
    invocation = document["components"]["schemas"]["InvocationOut"]["properties"]["status"]
    assert "timed_out" in json.dumps(_resolve(document, invocation))
    package_list = document["components"]["schemas"]["PackageList"]["properties"]
    assert {"items", "count", "next_offset"} <= set(package_list)


# Found by the schemathesis run (tests/test_openapi_fuzz.py).
CLOSED_BODIES = ("/clients", "/model-connections", "/agent-runs")


def test_every_json_body_is_a_closed_object_and_an_unknown_key_is_refused(client, admin, bearer):
    document = _openapi(client)
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if "requestBody" in operation and path != "/api/v1/imports/openwebui":
                assert _body(document, path, method)["additionalProperties"] is False, (method, path)
    headers = bearer(admin)
    for path in CLOSED_BODIES:
        response = _post(client, path, {"surplus": 1}, headers)
        assert response.status_code == 400, path
        assert "surplus" in json.dumps(response.json()["errors"]), path
    Toolkit.objects.create(slug="kit", owner=admin)
    response = client.put(f"{API}/toolkits/kit/access", json.dumps({"use": "everyone", "surplus": 1}),
                          content_type="application/json", **headers)
    assert response.status_code == 400


def test_a_body_value_of_another_json_type_is_refused_not_coerced(client, admin, bearer, upload, alice):
    upload(alice, toolkit_source("Sizes", "humanize>=4"), slug="sizes")
    response = _post(client, "/packages/humanize/approve", {"approve_unknown": 0}, bearer(admin))
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "approve_unknown"
    assert Package.objects.get(name="humanize").status == "pending"


def test_the_openapi_document_states_the_bounds_and_choices_the_services_check(client, admin, bearer):
    from toolhub.accounts.clients import MAX_RATE
    from toolhub.agents import services as agents
    from toolhub.agents.models import Use as ConnectionUse
    from toolhub.toolkits.models import Use

    document = _openapi(client)
    schemas = document["components"]["schemas"]
    rate = schemas["ClientIn"]["properties"]["calls_per_minute"]["anyOf"][0]
    assert (rate["minimum"], rate["maximum"]) == (0, MAX_RATE)
    connection = schemas["ModelConnectionIn"]["properties"]
    assert connection["base_url"]["maxLength"] == agents.MAX_URL == 500 and connection["base_url"]["minLength"] == 1
    assert connection["name"]["maxLength"] == agents.MAX_NAME
    assert (connection["timeout_seconds"]["minimum"], connection["timeout_seconds"]["maximum"]) == (agents.MIN_TIMEOUT, agents.MAX_TIMEOUT)
    iterations = schemas["AgentRunIn"]["properties"]["max_iterations"]
    assert (iterations["minimum"], iterations["maximum"]) == (1, agents.MAX_ITERATIONS)
    for name in ("AccessIn", "AccessOut", "ModelConnectionIn", "ModelConnectionOut"):
        assert set(_resolve(document, schemas[name]["properties"]["use"])["enum"]) == set(Use.values) == set(ConnectionUse.values), name
    # What the document refuses, the API refuses, before any service runs.
    headers = bearer(admin)
    response = _post(client, "/model-connections", {"name": "m", "base_url": "http://h/" + "a" * 500}, headers)
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "base_url"
    response = _post(client, "/clients", {"name": "c", "calls_per_minute": MAX_RATE + 1}, headers)
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "calls_per_minute"


def test_listing_toolkits_documents_its_refusals(client, carol, bearer):
    document = _openapi(client)
    assert {"200", "400", "401"} <= set(document["paths"]["/api/v1/toolkits"]["get"]["responses"])
    response = client.get(f"{API}/toolkits", {"q": "\x00"}, **bearer(carol))
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "q"


def test_an_unknown_api_path_with_a_newline_is_a_json_404(client, carol, bearer):
    response = client.get(f"{API}/no%0Asuch", **bearer(carol))
    assert response.status_code == 404
    assert response.json()["errors"][0]["message"] == "No such endpoint."


def test_a_malformed_multipart_body_is_a_readable_400(client, carol, bearer):
    """Found by schemathesis: a multipart body without a boundary got Django's HTML 400 page."""
    response = client.generic("POST", f"{API}/clients", b"x", content_type="multipart/form-data", **bearer(carol))
    assert response.status_code == 400 and response["Content-Type"] == "application/json"
    assert response.json()["errors"][0]["message"] == "The form body cannot be read (a malformed multipart body)."
    client.force_login(carol)
    response = client.generic("POST", "/toolkits/new/", b"x", content_type="multipart/form-data")
    assert response.status_code == 400 and response.content.decode().startswith("The form body cannot be read")


def test_the_import_body_and_answers_are_documented(client):
    document = _openapi(client)
    operation = document["paths"]["/api/v1/imports/openwebui"]["post"]
    many, one = operation["requestBody"]["content"]["application/json"]["schema"]["oneOf"]
    assert many["type"] == "array" and many["minItems"] == 1 and many["maxItems"] == 200
    assert set(one["required"]) == {"id", "content"}
    refs = {code: json.dumps(answer) for code, answer in operation["responses"].items()}
    assert "ImportOut" in refs["200"] and "ImportRefusedOut" in refs["400"]


def test_the_refusal_is_translated(client, carol):
    client.force_login(carol)
    response = client.get("/toolkits/", {"q": "\x00"}, HTTP_ACCEPT_LANGUAGE="fr")
    assert response.status_code == 400
    assert response.content.decode() == 'Refusé : le paramètre de requête « q » contient un caractère NUL, qui ne peut pas être stocké.\n'


# THE PACKAGE QUEUE PAGE AND BULK REQUESTS
# ------------------------------------------------------------------------------------------


def _upload_queries(alice, title: str, count: int) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    source = toolkit_source(title, ", ".join(f"{title.lower()}-{i}" for i in range(count)))
    with CaptureQueriesContext(connection) as queries:
        services.toolkit_create(source=source, user=alice)
    return len(queries)


def test_recording_a_revisions_package_requests_is_a_bulk_operation(alice):
    few = _upload_queries(alice, "Few", 2)
    many = _upload_queries(alice, "Many", MAX_REQUIREMENTS)
    assert many == few
    assert PackageRequest.objects.count() == 2 + MAX_REQUIREMENTS


def test_the_queue_page_pages_and_never_reads_a_revisions_heavy_columns(client, admin, alice, upload):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    upload(alice, toolkit_source("Many", ", ".join(f"pkg-{i:02}" for i in range(60))), slug="many")
    for i in range(22):
        upload(alice, toolkit_source(f"Again {i}", "pkg-00"), slug=f"again_{i:02}")
    client.force_login(admin)
    client.get("/packages/")
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/packages/")
    assert response.status_code == 200
    sql = " ".join(q["sql"] for q in queries)
    for column in ('"source"', '"build_log"', '"lock"', '"traceback"', '"manifest"'):
        # A revision's column; a person's profile has a `source` of its own (local or oidc).
        assert f'"toolkits_revision".{column}' not in sql
    assert '"toolkits_revision"."number"' in sql
    page = response.content.decode()
    assert page.count('<tr data-package="pkg-') == 50
    assert "and 3 more revisions" in page  # pkg-00: many and again_00..21 ask, 20 are listed
    assert "Page 1 of 2" in page
    second = client.get("/packages/", {"page": 2}).content.decode()
    assert second.count('<tr data-package="pkg-') == 10


def test_the_queue_form_refuses_an_overlong_reason_or_constraint(client, admin, alice, upload):
    upload(alice, toolkit_source("Sizes", "humanize>=4"), slug="sizes")
    client.force_login(admin)
    response = client.post("/packages/decide/", {"name": "humanize", "action": "reject", "reason": "x" * 2001}, follow=True)
    assert "A reason has at most 2,000 characters." in response.content.decode()
    response = client.post("/packages/decide/", {"name": "humanize", "action": "approve", "constraint": ">=1," * 60}, follow=True)
    assert "A constraint has at most 200 characters." in response.content.decode()
    response = client.post("/packages/decide/", {"name": "a" * 201, "action": "approve"}, follow=True)
    assert "A package name has at most 200 characters." in response.content.decode()
    assert Package.objects.get(name="humanize").status == "pending"
    assert Package.objects.count() == 1
