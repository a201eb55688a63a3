"""Backup and restore (docs/deploying.md, "Backups"): what the document says to back up is
enough. A database with stored valves (an admin's, with a secret, and a user's) and a built
toolkit is dumped with `pg_dump -Fc`, restored with `pg_restore` into a fresh database, and
served from a fresh, empty data directory by a new process with the same
TOOLHUB_ENCRYPTION_KEYS: the valves decrypt, and the toolkit's environment is built again from
the stored lock on first use and runs the tool in the sandbox with the restored valves. With
another key, the same dump's valves are lost: the keys must be backed up with the database."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from cryptography.fernet import Fernet
from django.db import connection

from tests.conftest import REPO, _database_url
from toolhub.toolkits import valves
from toolhub.toolkits.models import Status

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.skipif(
    shutil.which("pg_dump") is None or connection.vendor != "postgresql", reason="needs PostgreSQL and its client tools"
)]

SECRET = "sk-restore-4f1c9e7a"
SOURCE = '''"""
title: Backup Check
author: tests
description: Shows what its valves hold.
version: 1.0.0
"""

from pydantic import BaseModel, Field


class Tools:
    class Valves(BaseModel):
        api_key: str = Field("", description="A key")

    class UserValves(BaseModel):
        style: str = Field("short", description="A style")

    def __init__(self):
        self.valves = self.Valves()

    def key_end(self) -> str:
        """The last four characters of the key."""
        return self.valves.api_key[-4:]
'''

# Runs in the restored installation: a new process, the restored database, an empty data
# directory. Prints what it found as one JSON line.
RESTORED = r'''
import json, sys
import django
django.setup()
from django.contrib.auth import get_user_model
from toolhub.packages.environments import environment_existing
from toolhub.runs import engine
from toolhub.runs.models import Invocation
from toolhub.toolkits import valves
from toolhub.toolkits.models import Toolkit

toolkit = Toolkit.objects.select_related("current_revision").get(slug="backup_check")
revision = toolkit.current_revision
found = {"built_here_before": environment_existing(lock=revision.lock) is not None}
try:
    found["admin"] = valves.load_values(toolkit=toolkit)
    found["user"] = valves.load_values(toolkit=toolkit, user=get_user_model().objects.get(username="carol"))
except Exception as exc:
    found["error"] = type(exc).__name__
    print(json.dumps(found)); sys.exit(0)
run = Invocation.objects.create(toolkit=toolkit, revision=revision, tool="key_end", arguments={}, user=toolkit.owner)
engine.run(str(run.pk))
run.refresh_from_db()
found.update(status=run.status, result=run.result, error=run.error)
path = environment_existing(lock=revision.lock)
found["environment"] = str(path) if path else None
print(json.dumps(found))
'''


def _restored_url(name: str) -> str:
    parts = urlsplit(_database_url())
    return urlunsplit(parts._replace(path=f"/{name}"))


def _admin_url() -> str:
    return urlunsplit(urlsplit(_database_url())._replace(path="/postgres"))


def _run_restored(database_url: str, data_dir: Path, keys: str) -> dict:
    env = dict(os.environ, DATABASE_URL=database_url, TOOLHUB_DATA_DIR=str(data_dir), TOOLHUB_ENCRYPTION_KEYS=keys,
               DJANGO_SETTINGS_MODULE="toolhub.settings_test")
    done = subprocess.run([sys.executable, "-c", RESTORED], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_dump_restored_on_a_fresh_data_directory_keeps_valves_and_rebuilds_environments(
    upload, build, alice, carol, admin, tmp_path, settings
):
    toolkit = build(upload(alice, SOURCE))
    revision = toolkit.current_revision
    assert revision.status == Status.READY, revision.status_detail
    assert revision.lock
    valves.store_values(toolkit=toolkit, values={"api_key": SECRET}, by=admin)
    valves.store_values(toolkit=toolkit, values={"style": "long"}, user=carol, by=carol)

    # The backup, as docs/deploying.md says.
    dump = tmp_path / "toolhub.dump"
    subprocess.run(["pg_dump", "--format=custom", f"--file={dump}", _database_url()], check=True, timeout=300)
    assert SECRET.encode() not in dump.read_bytes()

    name = f"{connection.settings_dict['NAME']}_restored"
    subprocess.run(["psql", _admin_url(), "-qc", f'DROP DATABASE IF EXISTS "{name}"'], check=True)
    subprocess.run(["createdb", "--maintenance-db", _admin_url(), name], check=True)
    # Under /tmp and traversable (not listable), as a data directory must be for the build and
    # sandbox users (pytest's own temporary directories are 0700).
    data_root = Path(tempfile.mkdtemp(prefix="toolhub-restore-", dir="/tmp"))
    data_root.chmod(0o711)
    try:
        subprocess.run(["pg_restore", "--no-owner", f"--dbname={_restored_url(name)}", str(dump)], check=True, timeout=300)
        fresh = data_root / "fresh-data"
        fresh.mkdir(mode=0o711)
        found = _run_restored(_restored_url(name), fresh, settings.TOOLHUB_ENCRYPTION_KEYS)
        assert found["admin"] == {"api_key": SECRET}
        assert found["user"] == {"style": "long"}
        assert found["built_here_before"] is False
        assert (found["status"], found["result"], found["error"]) == ("succeeded", SECRET[-4:], ""), found
        assert found["environment"].startswith(str(fresh))

        other_data = data_root / "other-data"
        other_data.mkdir(mode=0o711)
        lost = _run_restored(_restored_url(name), other_data, Fernet.generate_key().decode())
        assert lost == {"built_here_before": False, "error": "DecryptionError"}
    finally:
        subprocess.run(["psql", _admin_url(), "-qc", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'], check=True)
        shutil.rmtree(data_root, ignore_errors=True)
