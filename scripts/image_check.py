"""Build the container image and run a tool in its sandbox, for real (`make image-check`).

    DATABASE_URL=postgres://... REDIS_URL=redis://... .venv/bin/python scripts/image_check.py \
        [--base IMAGE] [--offline] [--wheelhouse DIR] [--port P] [--keep]

Builds the Dockerfile (from `--base`, default debian:bookworm-slim; `--offline` installs the
requirements from `.image-wheels/`, filled here from pip's configured index first), then runs
the image as docker/compose.yaml's services would, but on the host's network against the
PostgreSQL server of DATABASE_URL (a scratch database `<name>_image_<pid>`, dropped at the end)
and the Redis of REDIS_URL: `migrate`, the web server (non-root), a worker (root, with
seccomp=unconfined, apparmor=unconfined and systempaths=unconfined, nothing more) and the
maintenance worker (non-root). Then it waits for `/readyz`, uploads a toolkit through the API,
waits for it to be built and introspected in the worker's build sandbox, calls its tool with
`"wait": true`, and checks the answer came from inside the sandbox (an unprivileged uid, no
network). `--wheelhouse` is mounted into the worker for offline environment builds. Prints how
long each step took. Needs a Docker daemon."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parents[1]
TOOLKIT = '''"""
title: Image Check
author: ToolHub
description: Says where it ran.
version: 1.0.0
"""

import os
import socket


class Tools:
    def where(self, text: str) -> str:
        """
        Echo the text with the uid it ran as and whether it could reach the network.
        :param text: Any text
        """
        try:
            socket.create_connection(("1.1.1.1", 53), timeout=2).close()
            network = "network"
        except OSError:
            network = "no network"
        return f"{text} (uid {os.getuid()}, {network})"
'''
SANDBOX_OPTIONS = ["--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
                   "--security-opt", "systempaths=unconfined"]


def _run(*args: str, capture: bool = False) -> str:
    done = subprocess.run(args, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args[:6])}... failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return done.stdout if capture else ""


def _api(port: int, method: str, path: str, token: str, body: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", method=method, data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="debian:bookworm-slim")
    parser.add_argument("--image", default="toolhub:image-check")
    parser.add_argument("--offline", action="store_true")
    parser.add_argument("--wheelhouse", default="")
    parser.add_argument("--port", type=int, default=18780)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    database_url, redis_url = os.environ.get("DATABASE_URL", ""), os.environ.get("REDIS_URL", "")
    if not database_url.startswith(("postgres://", "postgresql://")) or not redis_url:
        raise SystemExit("set DATABASE_URL (postgres://...) and REDIS_URL: the containers use the host's servers")
    timings: list[tuple[str, float]] = []

    def step(label: str, started: float) -> None:
        timings.append((label, time.monotonic() - started))
        print(f"{label}: {timings[-1][1]:.1f} s", flush=True)

    started = time.monotonic()
    build = ["docker", "build", "-q", "--build-arg", f"BASE={args.base}", "-t", args.image]
    if args.offline:
        wheels = REPO / ".image-wheels"
        wheels.mkdir(exist_ok=True)
        _run(sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--no-deps", "-d", str(wheels),
             "-r", str(REPO / "requirements.txt"))
        build += ["--build-arg", "PIP_ARGS=--no-index --find-links /tmp/wheels"]
    subprocess.run([*build, str(REPO)], check=True, env=dict(os.environ, DOCKER_BUILDKIT="0"), stdout=subprocess.DEVNULL)
    step("image built", started)

    from cryptography.fernet import Fernet

    parts = urlsplit(database_url)
    name = f"{parts.path.lstrip('/') or 'postgres'}_image_{os.getpid()}"
    admin_url = urlunsplit(parts._replace(path="/postgres"))
    _run("psql", admin_url, "-qc", f'CREATE DATABASE "{name}"')
    env_file = Path(f"/tmp/toolhub-image-check-{os.getpid()}.env")
    env_file.write_text(
        f"SECRET_KEY={os.urandom(24).hex()}\nTOOLHUB_ENCRYPTION_KEYS={Fernet.generate_key().decode()}\n"
        f"DATABASE_URL={urlunsplit(parts._replace(path='/' + name))}\nREDIS_URL={redis_url}\n"
    )
    env_file.chmod(0o600)
    base = ["docker", "run", "--network", "host", "--env-file", str(env_file)]
    containers = [f"toolhub-check-{role}-{os.getpid()}" for role in ("web", "worker", "maintenance")]
    try:
        started = time.monotonic()
        _run(*base, "--rm", args.image, "python", "manage.py", "migrate", "--noinput")
        token = _run(*base, "--rm", args.image, "python", "manage.py", "shell", "-c",
                     "from django.contrib.auth import get_user_model; from toolhub.accounts.models import ApiToken; "
                     "u = get_user_model().objects.create_user('check-admin', is_staff=True, is_superuser=True); "
                     "print(ApiToken.issue(user=u, name='image check')[1])", capture=True).strip().splitlines()[-1]
        step("migrated, admin made", started)

        started = time.monotonic()
        worker_env = ["-v", f"{args.wheelhouse}:/wheels:ro", "-e", "TOOLHUB_FIND_LINKS=/wheels", "-e",
                      "TOOLHUB_NO_INDEX=1"] if args.wheelhouse else []
        _run(*base, "-d", "--name", containers[0], args.image, "uvicorn", "toolhub.asgi:application", "--host",
             "127.0.0.1", "--port", str(args.port), "--no-access-log")
        _run(*base, "-d", "--name", containers[1], "--user", "root", *SANDBOX_OPTIONS, *worker_env, args.image,
             "celery", "-A", "toolhub", "worker", "-Q", "builds,sandbox,celery", "-c", "2", "-n", "work@%h")
        _run(*base, "-d", "--name", containers[2], args.image, "celery", "-A", "toolhub", "worker", "-Q", "maintenance",
             "-c", "1", "-n", "maintenance@%h")
        deadline = time.monotonic() + 90
        ready: tuple[int, dict] = (0, {})
        while time.monotonic() < deadline:
            try:
                ready = _api(args.port, "GET", "/readyz", token)
            except (urllib.error.URLError, ConnectionError):
                pass
            if ready[0] == 200:
                break
            time.sleep(1)
        if ready[0] != 200:
            raise SystemExit(f"/readyz did not answer 200: {ready}")
        step(f"web, worker and maintenance worker ready ({ready[1]['checks']['workers']})", started)

        started = time.monotonic()
        status, body = _api(args.port, "POST", "/api/v1/toolkits", token, {"source": TOOLKIT})
        if status != 201:
            raise SystemExit(f"the upload answered {status}: {body}")
        slug = body["slug"]
        while time.monotonic() < started + 300:
            status, body = _api(args.port, "GET", f"/api/v1/toolkits/{slug}", token)
            if body.get("status") in ("ready", "failed", "rejected"):
                break
            time.sleep(1)
        if body.get("status") != "ready":
            raise SystemExit(f"the toolkit did not become ready: {json.dumps(body)[:2000]}")
        step("toolkit built and introspected in the build sandbox", started)

        started = time.monotonic()
        status, body = _api(args.port, "POST", f"/api/v1/toolkits/{slug}/tools/where/invoke", token,
                            {"arguments": {"text": "hello"}, "wait": True})
        if status != 200 or body.get("status") != "succeeded":
            raise SystemExit(f"the call answered {status}: {json.dumps(body)[:2000]}")
        result = body["result"]
        print(f"result: {result!r}")
        if "uid 0" in result or "no network" not in result:
            raise SystemExit("the tool did not run in the sandbox (root, or with network)")
        step("tool called in the sandbox (wait: true)", started)
    finally:
        if args.keep:
            print(f"kept the containers {containers}, the database {name} and {env_file}")
        else:
            subprocess.run(["docker", "rm", "-f", *containers], check=False, capture_output=True)
            subprocess.run(["psql", admin_url, "-qc", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'], check=False)
            env_file.unlink(missing_ok=True)
    print("image check passed: " + ", ".join(f"{label} {seconds:.1f} s" for label, seconds in timings))


if __name__ == "__main__":
    main()
