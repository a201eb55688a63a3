"""Safe defaults: DEBUG off under `make run`, error pages that say nothing internal,
private files in the data directory, and introspection output checked before it is stored."""

from __future__ import annotations

import os
import pwd
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.test import override_settings
from django.urls import reverse

from tests.sandbox_fixtures import SANDBOX_USER, require_sandbox
from toolhub.toolkits.introspection_checks import (
    MAX_DEPTH,
    MAX_ENUM_ITEMS,
    IntrospectionRefused,
    check_introspection,
)
from toolhub.toolkits.models import Status

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable

ECHO = '''"""
title: Echo
author: tests
description: Says it back.
version: 1.0.0
"""


class Tools:
    def echo(self, text: str) -> str:
        """Return the text."""
        return text
'''


def _tool(name: str, parameters: dict | None = None) -> dict:
    return {"type": "function", "function": {"name": name, "description": "", "parameters": parameters or {"type": "object", "properties": {}}}}


def _message(*tools: dict, **extra) -> dict:
    return {"kind": "introspection", "kind_of_toolkit": "openwebui", "tools": list(tools), "valves_schema": None,
            "user_valves_schema": None, "ragflow": None, **extra}


def _forging(message: str) -> str:
    """A toolkit whose import writes its own introspection line on the runtime's channel."""
    return ECHO + f'''

import gc as _gc
import os as _os

for _obj in _gc.get_objects():
    if type(_obj).__name__ == "Channel" and hasattr(_obj, "finish"):
        _obj.finish({message})
'''


# -- the checks themselves ------------------------------------------------------------------


def test_an_honest_introspection_passes():
    check_introspection(_message(_tool("echo")), kind="openwebui", tool_names=["echo", "other"])


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (_message(_tool("a/b")), "not a valid identifier"),
        (_message(_tool("../x")), "not a valid identifier"),
        (_message(_tool("")), "not a valid identifier"),
        (_message(_tool("e" * 65)), "not a valid identifier"),
        (_message(_tool("delete_all")), "does not define"),
        (_message(_tool("echo"), _tool("echo")), "twice"),
        (_message(_tool("echo"), kind_of_toolkit="ragflow"), "kind"),
        (_message({"type": "function", "function": "echo"}), "not a function description"),
        (_message(*[_tool("echo")] * 65), "at most 64"),
        (_message(_tool("echo", {"type": "object", "properties": {"x": {"enum": list(range(MAX_ENUM_ITEMS + 1))}}})), "enum"),
        (_message(_tool("echo", {"type": "object", "properties": {"x": {"description": "d" * 70_000}}})), "bytes long"),
        (_message(_tool("echo"), valves_schema="not a schema"), "Valves schema is not an object"),
        (_message(_tool("echo"), user_valves_schema={"title": "\ud800"}), "cannot be encoded"),
    ],
)
def test_a_forged_introspection_is_refused_with_a_reason(message, expected):
    with pytest.raises(IntrospectionRefused, match=expected):
        check_introspection(message, kind="openwebui", tool_names=["echo"])


def test_a_schema_nested_too_deep_is_refused():
    deep: dict = {"type": "object"}
    node = deep
    for _ in range(MAX_DEPTH):
        node["properties"] = {"x": {"type": "object"}}
        node = node["properties"]["x"]
    with pytest.raises(IntrospectionRefused, match="nested deeper"):
        check_introspection(_message(_tool("echo", deep)), kind="openwebui", tool_names=["echo"])


# -- a real forging toolkit, built and introspected in the sandbox --------------------------


@pytest.mark.sandbox
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("forged", "expected"),
    [
        ({"kind": "introspection", "kind_of_toolkit": "openwebui", "tools": [_tool("a/b")], "valves_schema": None,
          "user_valves_schema": None, "ragflow": None}, "'a/b', which is not a valid identifier"),
        ({"kind": "introspection", "kind_of_toolkit": "openwebui", "tools": [_tool("echo"), _tool("exfiltrate")],
          "valves_schema": None, "user_valves_schema": None, "ragflow": None}, "'exfiltrate' that the source does not define"),
    ],
)
def test_a_toolkit_that_forges_its_introspection_fails_its_revision(alice, upload, build, client, forged, expected):
    require_sandbox()
    toolkit = build(upload(alice, _forging(repr(forged))))
    revision = toolkit.latest_revision()
    assert revision.status == Status.FAILED, (revision.status, revision.status_detail, revision.traceback)
    assert "introspection was refused" in revision.status_detail
    assert expected in revision.status_detail
    assert revision.tools == []
    # The toolkit's pages stay usable.
    client.force_login(alice)
    assert client.get(reverse("toolkit_tools", args=[toolkit.slug])).status_code == 200


# -- error pages ----------------------------------------------------------------------------


@pytest.mark.django_db
@override_settings(DEBUG=False)
def test_an_unknown_address_gets_the_styled_404_without_the_url_list(client, carol):
    client.force_login(carol)
    response = client.get("/no/such/page/")
    assert response.status_code == 404
    body = response.content.decode()
    assert 'data-error-page="404"' in body and "Page not found." in body
    assert "urlpatterns" not in body and "URLconf" not in body and "api/v1/" not in body


@pytest.mark.django_db
@override_settings(DEBUG=False)
def test_a_forbidden_action_gets_the_styled_403(client, carol):
    client.force_login(carol)
    response = client.get(reverse("toolkit_new"))
    assert response.status_code == 403
    body = response.content.decode()
    assert 'data-error-page="403"' in body and "You may not upload toolkits." in body


@pytest.mark.django_db
@override_settings(DEBUG=False)
def test_a_crashing_page_gets_the_styled_500_with_nothing_internal(client, alice, carol, upload, settings):
    """A tool named `a/b` stored before introspection was checked made the Tools page
    raise; a plain user must see the styled page, never settings, environment or traceback."""
    toolkit = upload(alice, ECHO)
    revision = toolkit.latest_revision()
    revision.tools = [_tool("a/b")]
    revision.set_status(Status.READY)
    revision.save()
    toolkit.current_revision = revision
    toolkit.save()
    client.force_login(carol)
    client.raise_request_exception = False
    for language, heading in (("en", "Something went wrong."), ("fr", None)):
        client.cookies["django_language"] = language
        response = client.get(reverse("toolkit_tools", args=[toolkit.slug]))
        assert response.status_code == 500
        body = response.content.decode()
        assert 'data-error-page="500"' in body
        if heading:
            assert heading in body
        else:
            assert "Something went wrong." not in body, "the 500 page is not translated"
        for internal in ("Traceback", "NoReverseMatch", "SECRET_KEY", "DATABASE", "settings", "a/b", str(REPO)):
            assert internal not in body


# -- private files in the data directory ----------------------------------------------------


def _sandbox_can_read(path: Path) -> bool:
    user = pwd.getpwnam(SANDBOX_USER)
    result = subprocess.run(
        ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--",
         "/usr/bin/python3.11", "-c", "import sys; open(sys.argv[1], 'rb').read(1)", str(path)],
        capture_output=True, text=True, timeout=30,
    )
    return result.returncode == 0


def _fresh_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DEBUG", "DJANGO_SETTINGS_MODULE", "TOOLHUB_TESTING")}
    env.update(
        TOOLHUB_DATA_DIR=str(data_dir),
        TOOLHUB_ENV_FILE="/nonexistent",
        SECRET_KEY="a-secret-key-for-the-hardening-tests-only-0123456789",
        TOOLHUB_ENCRYPTION_KEYS="k0TA1fW4Wk2s3kX0Zr6Cz9Gm4t1sR8hL2bQ5yE7uN0o=",
        **extra,
    )
    return env


@pytest.mark.sandbox
def test_the_sqlite_database_and_its_wal_are_private_to_toolhub(tmp_path):
    """The database and its WAL were 0644, so another local account (here the sandbox
    user) could read live session keys."""
    require_sandbox()
    data = Path("/tmp") / f"th-hardening-{os.getpid()}"
    subprocess.run(["rm", "-rf", str(data)], check=True)
    try:
        env = _fresh_env(data)
        subprocess.run([PY, "manage.py", "migrate", "--noinput"], cwd=REPO, env=env, check=True, capture_output=True, timeout=300)
        # A process that keeps the database open, so the WAL and shared-memory files exist.
        holder = subprocess.Popen(
            [PY, "-c", "import django, sys, time; django.setup(); from django.contrib.sessions.backends.db import SessionStore;"
             " s = SessionStore(); s['k'] = 'v'; s.create(); print('ok', flush=True); time.sleep(60)"],
            cwd=REPO, env=dict(env, DJANGO_SETTINGS_MODULE="toolhub.settings"), stdout=subprocess.PIPE, text=True,
        )
        try:
            assert holder.stdout.readline().strip() == "ok"
            database = data / "toolhub.sqlite3"
            wal = Path(f"{database}-wal")
            assert wal.is_file()
            for path in (database, wal, Path(f"{database}-shm")):
                assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
                assert not _sandbox_can_read(path), path
            # The data directory is traversable (environments are bound from below it), not listable.
            assert stat.S_IMODE(data.stat().st_mode) == 0o711
            shared = {"environments", "runtime"}
            for root, dirs, files in os.walk(data):
                relative = Path(root).relative_to(data)
                if relative.parts and relative.parts[0] in shared:
                    continue
                for name in files:
                    assert stat.S_IMODE((Path(root) / name).stat().st_mode) & 0o077 == 0, relative / name
                for name in dirs:
                    if not relative.parts and name in shared:
                        continue
                    assert stat.S_IMODE((Path(root) / name).stat().st_mode) & 0o077 == 0, relative / name
        finally:
            holder.kill()
            holder.wait(10)
    finally:
        subprocess.run(["rm", "-rf", str(data)], check=False)


@pytest.mark.sandbox
def test_an_old_world_readable_database_is_made_private_at_start():
    require_sandbox()
    data = Path("/tmp") / f"th-hardening-old-{os.getpid()}"
    subprocess.run(["rm", "-rf", str(data)], check=True)
    try:
        data.mkdir(mode=0o755)
        database = data / "toolhub.sqlite3"
        database.write_bytes(b"")
        database.chmod(0o644)
        Path(f"{database}-wal").write_bytes(b"")
        Path(f"{database}-wal").chmod(0o644)
        subprocess.run([PY, "manage.py", "check"], cwd=REPO, env=_fresh_env(data), check=True, capture_output=True, timeout=120)
        assert stat.S_IMODE(database.stat().st_mode) == 0o600
        assert stat.S_IMODE(Path(f"{database}-wal").stat().st_mode) == 0o600
    finally:
        subprocess.run(["rm", "-rf", str(data)], check=False)


# -- `make run`'s web server ------------------------------------------------------------------


def _free_port() -> int:
    for port in range(21550, 21600):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


def _run_target_command() -> str:
    makefile = (REPO / "Makefile").read_text()
    run = makefile.split("\nrun:", 1)[1].split("\n\n", 1)[0]
    return run


def test_make_run_does_not_turn_debug_on():
    assert "DEBUG" not in _run_target_command()
    assert "DEBUG" not in (REPO / "scripts" / "serve.py").read_text()


def test_the_production_server_serves_static_files_and_styled_errors_with_debug_off(tmp_path):
    """What `make run` starts (its web server, DEBUG unset): static files come from whitenoise and an
    unknown page is the styled 404, not Django's technical page."""
    data = Path("/tmp") / f"th-hardening-web-{os.getpid()}"
    subprocess.run(["rm", "-rf", str(data)], check=True)
    port = _free_port()
    env = _fresh_env(data)
    subprocess.run([PY, "manage.py", "migrate", "--noinput"], cwd=REPO, env=env, check=True, capture_output=True, timeout=300)
    # The web server exactly as `make run` starts it (scripts/serve.py), DEBUG unset.
    import importlib.util

    spec = importlib.util.spec_from_file_location("toolhub_serve", REPO / "scripts" / "serve.py")
    serve = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(serve)
    web = serve.commands(PY, port, data)["web"]
    assert "DEBUG" not in " ".join(web)
    server = subprocess.Popen(
        web,
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/static/css/toolhub.css", timeout=5) as response:
                    assert response.status == 200
                    assert b".topbar" in response.read()
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.3)
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/no-such-page/", timeout=10)
        assert missing.value.code == 404
        body = missing.value.read().decode()
        assert 'data-error-page="404"' in body
        assert "URLconf" not in body and "DEBUG" not in body
    finally:
        os.killpg(server.pid, 15)
        server.wait(20)
        subprocess.run(["rm", "-rf", str(data)], check=False)
