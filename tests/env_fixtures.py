"""Offline package index for the environment tests.

`demo_index` builds a throwaway wheelhouse once per test session: a few tiny pure-Python
distributions made here, plus the runtime's real wheels (pydantic and its dependencies) and
`humanize`, copied from the project's wheelhouse (`$TOOLHUB_WHEELHOUSE`, by default
`.data/wheelhouse`, filled by `make wheelhouse`). Nothing here touches the network.

The distributions:
- `toolhub-demo-a 1.0` (wheel) depends on `toolhub-demo-b>=1` and has a console script.
- `toolhub-demo-b 1.0` and `2.0` (wheels), so constraints have two versions to choose from.
- `toolhub-demo-broken 1.0` (sdist only): its metadata builds, its wheel build fails, so a lock
  succeeds and the environment build fails.
- `toolhub-demo-nometa 1.0` (sdist only): even its metadata fails, so locking it fails.
- `toolhub-demo-slow 1.0` (sdist only): its wheel build reports who built it and then waits
  while the gate file exists, so a test can catch a build in the middle.

Builds run in the build sandbox (toolhub/sandbox/build.py), which sees the wheelhouse
read-only and nothing else of the tests' files (and, offline, no network), so build code
reports over a UNIX socket in the wheelhouse (`Reports`; a socket on a read-only mount can
still be connected to). The receiving end learns the sender's host pid and uid from the kernel
(SO_PEERCRED), not from what the build code says, and appends one JSON line per report to a
file. The gate file lies in the wheelhouse too.

All of them use the small in-tree build backend below, because setuptools would have to come
from an index and the tests have none.
"""

from __future__ import annotations

import json
import os
import runpy
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from toolhub.packages.envbuild import IndexSettings

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WHEELHOUSE = REPO_ROOT / ".data" / "wheelhouse"

# A PEP 517 backend small enough to read in one go. It takes everything from
# toolhub_fixture.json next to it, so every demo project shares the same file.
_BACKEND_SOURCE = r"""
import base64
import hashlib
import io
import json
import os
import pathlib
import sys
import tarfile
import time
import zipfile

_HERE = pathlib.Path(__file__).resolve().parent
_EPOCH = (2020, 1, 1, 0, 0, 0)


def _config():
    return json.loads((_HERE / "toolhub_fixture.json").read_text())


def _probe(path):
    try:
        if path.startswith("tcp:"):
            import socket

            _, host, port = path.split(":")
            socket.create_connection((host, int(port)), timeout=2).close()
        elif path.startswith("http://"):
            # Through HTTP_PROXY when the build has one, as pip's and uv's own requests go.
            import urllib.request

            urllib.request.urlopen(path, timeout=5).close()
        elif os.path.isdir(path):
            os.listdir(path)
        else:
            with open(path, "rb") as handle:
                handle.read(1)
        return True
    except OSError:
        return False


def _report(config, hook):
    # What this build code could do, sent to the test's receiver (see tests/env_fixtures.py).
    if hook not in config.get("report_hooks", []):
        return
    import socket

    report = {
        "hook": hook,
        "uid": os.getuid(),
        "env": sorted(os.environ),
        "probes": {path: _probe(path) for path in config.get("probes", [])},
    }
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as channel:
        channel.connect(config["socket"])
        channel.sendall(json.dumps(report).encode())
        channel.shutdown(socket.SHUT_WR)
        channel.recv(16)


def get_requires_for_build_wheel(config_settings=None):
    _report(_config(), "get_requires_for_build_wheel")
    return []


def _stem(config):
    return config["name"].replace("-", "_") + "-" + config["version"]


def _metadata(config):
    lines = ["Metadata-Version: 2.1", "Name: " + config["name"], "Version: " + config["version"]]
    lines += ["Requires-Dist: " + requirement for requirement in config["requires"]]
    return "\n".join(lines) + "\n"


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    config = _config()
    _report(config, "prepare_metadata_for_build_wheel")
    if config.get("fail_metadata"):
        print(config["name"] + ": this package is made to fail its metadata", file=sys.stderr)
        raise RuntimeError(config["name"] + " has no metadata to give")
    dist_info = pathlib.Path(metadata_directory) / (_stem(config) + ".dist-info")
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(_metadata(config))
    return dist_info.name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    config = _config()
    _report(config, "build_wheel")
    gate = config.get("gate")
    give_up = time.monotonic() + 60
    while gate and os.path.exists(gate) and time.monotonic() < give_up:
        time.sleep(0.05)
    if config.get("fail_build"):
        print("toolhub-demo-broken: this package is made to fail its build", file=sys.stderr)
        raise RuntimeError("toolhub-demo-broken refuses to build")
    dist_info = _stem(config) + ".dist-info"
    files = {path: text.encode() for path, text in config["files"].items()}
    files[dist_info + "/METADATA"] = _metadata(config).encode()
    files[dist_info + "/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: toolhub-fixture\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    if config["scripts"]:
        lines = ["[console_scripts]"] + [k + " = " + v for k, v in config["scripts"].items()]
        files[dist_info + "/entry_points.txt"] = ("\n".join(lines) + "\n").encode()
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(path + ",sha256=" + digest + "," + str(len(data)))
    record.append(dist_info + "/RECORD,,")
    files[dist_info + "/RECORD"] = ("\n".join(record) + "\n").encode()
    name = _stem(config) + "-py3-none-any.whl"
    with zipfile.ZipFile(pathlib.Path(wheel_directory) / name, "w") as wheel:
        for path, data in files.items():
            wheel.writestr(zipfile.ZipInfo(path, _EPOCH), data)
    return name


def build_sdist(sdist_directory, config_settings=None):
    config = _config()
    name = _stem(config) + ".tar.gz"
    members = {
        "PKG-INFO": _metadata(config).encode(),
        "pyproject.toml": (_HERE / "pyproject.toml").read_bytes(),
        "toolhub_fixture.json": (_HERE / "toolhub_fixture.json").read_bytes(),
        "_toolhub_backend.py": (_HERE / "_toolhub_backend.py").read_bytes(),
    }
    with tarfile.open(pathlib.Path(sdist_directory) / name, "w:gz") as archive:
        for member, data in members.items():
            info = tarfile.TarInfo(_stem(config) + "/" + member)
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    return name
"""

_PYPROJECT = """\
[build-system]
requires = []
build-backend = "_toolhub_backend"
backend-path = ["."]
"""


class Reports:
    """Receives what package build code reports (`_report` in the backend above) on the UNIX
    socket `name` (a path anyone may connect to) and appends it, with the sender's host pid and
    uid, to `path` as JSON lines."""

    def __init__(self, path: Path, name: Path) -> None:
        self.path = path
        self.name = str(name)
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.name)
        name.chmod(0o777)
        self._server.listen(16)
        threading.Thread(target=self._serve, daemon=True, name="build-reports").start()

    def _serve(self) -> None:
        while True:
            connection, _ = self._server.accept()
            with connection:
                pid, uid, _gid = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
                data = b""
                while chunk := connection.recv(65536):
                    data += chunk
                report = json.loads(data) | {"pid": pid, "host_uid": uid}
                with open(self.path, "a") as record:
                    record.write(json.dumps(report) + "\n")
                connection.sendall(b"ok")


_reports: dict[Path, Reports] = {}


def reports_to(path: Path, wheelhouse: Path) -> Reports:
    """The receiver that appends to `path`, listening in `wheelhouse` (one per file for the
    whole test session)."""
    if path not in _reports:
        wheelhouse.mkdir(parents=True, exist_ok=True)
        _reports[path] = Reports(path, wheelhouse / f"reports-{secrets.token_hex(4)}.sock")
    return _reports[path]


def build_sdist(project: Path, wheelhouse: Path) -> None:
    backend = runpy.run_path(str(project / "_toolhub_backend.py"))
    backend["build_sdist"](str(wheelhouse))


def build_wheel(project: Path, wheelhouse: Path) -> None:
    # The ambient pip configuration on a developer machine may add indexes or find-links;
    # these builds need neither, so they ignore it.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(project)}
    env |= {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_NO_INPUT": "1"}
    env |= {"PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run(
        [Path(sys.executable).parent / "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(wheelhouse), str(project)],
        check=True,
        env=env,
    )


def traversable(path: Path) -> None:
    """Let other users (the build user) pass through path and the directories above it, as
    bubblewrap needs for what it binds; pytest makes its temporary directories 0700."""
    path.mkdir(parents=True, exist_ok=True)
    for directory in (path, *path.parents):
        if not directory.stat().st_mode & 0o001:
            directory.chmod(directory.stat().st_mode | 0o711)


def readable_by_others(top: Path) -> None:
    """The build user must read a wheelhouse (the tests' umask makes everything private)."""
    traversable(top.parent)
    for directory, _subdirs, files in os.walk(top):
        os.chmod(directory, 0o755)
        for name in files:
            path = Path(directory, name)
            if path.is_file():  # not the reports socket, which stays open to all
                path.chmod(0o644)


@dataclass(frozen=True)
class DemoIndex:
    """A local wheelhouse and the files that steer `toolhub-demo-slow`."""

    wheelhouse: Path
    # While this file exists, a build of toolhub-demo-slow waits (for at most a minute).
    gate: Path
    # Every build of toolhub-demo-slow appends one JSON line: its pid and environment names.
    build_record: Path

    @property
    def settings(self) -> IndexSettings:
        return IndexSettings(find_links=(str(self.wheelhouse),), no_index=True)

    def slow_builds(self) -> list[dict]:
        if not self.build_record.exists():
            return []
        return [json.loads(line) for line in self.build_record.read_text().splitlines()]

    def wait_for_slow_build(self, *, count: int = 1, timeout: float = 60) -> dict:
        """Wait until toolhub-demo-slow's build has started `count` times; return the last."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            builds = self.slow_builds()
            if len(builds) >= count:
                return builds[-1]
            time.sleep(0.05)
        raise AssertionError(f"toolhub-demo-slow was not built {count} time(s) in {timeout} s")


def write_project(directory: Path, config: dict) -> Path:
    """A project built by the backend above; `config` goes to its toolhub_fixture.json."""
    directory.mkdir(parents=True)
    (directory / "pyproject.toml").write_text(_PYPROJECT)
    (directory / "_toolhub_backend.py").write_text(_BACKEND_SOURCE)
    full = {"requires": [], "files": {}, "scripts": {}, **config}
    (directory / "toolhub_fixture.json").write_text(json.dumps(full, indent=2))
    return directory


def source_wheelhouse() -> Path:
    return Path(os.environ.get("TOOLHUB_WHEELHOUSE") or DEFAULT_WHEELHOUSE)


def build_demo_index(directory: Path) -> DemoIndex:
    """Make the demo distributions and copy the runtime's wheels into directory/wheelhouse."""
    source = source_wheelhouse()
    wheels = sorted(source.glob("*.whl"))
    names = {wheel.name.split("-")[0].lower() for wheel in wheels}
    if not {"pydantic", "pydantic_core", "humanize"} <= names:
        pytest.fail(
            f"{source} lacks pydantic, pydantic-core or humanize wheels; run `make wheelhouse` "
            "(or set TOOLHUB_WHEELHOUSE to a directory that has them)"
        )
    wheelhouse = directory / "wheelhouse"
    wheelhouse.mkdir(parents=True)
    for wheel in wheels:
        shutil.copy2(wheel, wheelhouse)

    index = DemoIndex(
        wheelhouse=wheelhouse, gate=wheelhouse / "toolhub-demo-slow.gate", build_record=directory / "slow.jsonl"
    )
    reports = reports_to(index.build_record, wheelhouse)
    projects = directory / "projects"
    wheel_projects = [
        write_project(
            projects / "a",
            {
                "name": "toolhub-demo-a",
                "version": "1.0",
                "requires": ["toolhub-demo-b>=1"],
                "files": {
                    "toolhub_demo_a/__init__.py": (
                        "from toolhub_demo_b import VALUE\n\n\n"
                        "def greet():\n    return 'a sees ' + VALUE\n\n\n"
                        "def main():\n    print(greet())\n"
                    )
                },
                "scripts": {"toolhub-demo-a": "toolhub_demo_a:main"},
            },
        ),
        *(
            write_project(
                projects / f"b{major}",
                {
                    "name": "toolhub-demo-b",
                    "version": f"{major}.0",
                    "files": {"toolhub_demo_b/__init__.py": f"VALUE = 'b{major}'\n"},
                },
            )
            for major in (1, 2)
        ),
    ]
    sdist_projects = [
        write_project(
            projects / "broken",
            {"name": "toolhub-demo-broken", "version": "1.0", "fail_build": True},
        ),
        write_project(
            projects / "nometa",
            {"name": "toolhub-demo-nometa", "version": "1.0", "fail_metadata": True},
        ),
        write_project(
            projects / "slow",
            {
                "name": "toolhub-demo-slow",
                "version": "1.0",
                "files": {"toolhub_demo_slow.py": "VALUE = 'slow'\n"},
                "gate": str(index.gate),
                "socket": reports.name,
                "report_hooks": ["build_wheel"],
            },
        ),
    ]
    # One project per call: pip refuses two versions of toolhub-demo-b in one command.
    for project in wheel_projects:
        build_wheel(project, wheelhouse)
    for project in sdist_projects:
        build_sdist(project, wheelhouse)
    readable_by_others(wheelhouse)
    return index


@pytest.fixture(scope="session")
def demo_index(tmp_path_factory: pytest.TempPathFactory) -> DemoIndex:
    return build_demo_index(tmp_path_factory.mktemp("demo-index"))


@pytest.fixture
def slow_gate(demo_index: DemoIndex) -> Iterator[DemoIndex]:
    """Close the gate for toolhub-demo-slow during one test and forget earlier builds."""
    demo_index.build_record.unlink(missing_ok=True)
    demo_index.gate.touch()
    try:
        yield demo_index
    finally:
        demo_index.gate.unlink(missing_ok=True)
        demo_index.build_record.unlink(missing_ok=True)
