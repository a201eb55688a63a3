"""A real package index for the tests: PEP 691 JSON project pages and PEP 658 metadata files
written into a temporary directory and served by http.server on a test port, the way a
static private mirror serves them. A few project names misbehave on purpose (slow, huge,
HTML only, broken JSON) for the hostile-index tests."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.live_fixtures import free_port

SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"

HUMANIZE_METADATA = (
    "Metadata-Version: 2.4\nName: humanize\nVersion: 4.9.0\nSummary: Python humanize utilities\n"
    "License-Expression: MIT\nRequires-Python: >=3.8\n"
    "Requires-Dist: colorama>=0.4\nRequires-Dist: tzdata; python_version < '3.9'\n"
    "Requires-Dist: pytest; extra == 'tests'\nProvides-Extra: tests\n\nThe long description.\n"
)


@dataclass
class LocalIndex:
    root: Path
    url: str
    # The Authorization headers the index received, by path.
    seen_auth: dict[str, str] = field(default_factory=dict)

    def project(self, name: str, files: list[dict], *, metadata: dict[str, str] | None = None) -> None:
        """Write a project page; `metadata` maps a file name to its core metadata text
        (written next to it as <file>.metadata and announced with its sha256)."""
        directory = self.root / "simple" / name
        directory.mkdir(parents=True, exist_ok=True)
        entries = []
        for entry in files:
            entry = {"url": f"../../files/{entry['filename']}", "hashes": {"sha256": "0" * 64}, **entry}
            text = (metadata or {}).get(entry["filename"])
            if text is not None:
                files_dir = self.root / "files"
                files_dir.mkdir(exist_ok=True)
                (files_dir / f"{entry['filename']}.metadata").write_text(text)
                entry["core-metadata"] = {"sha256": hashlib.sha256(text.encode()).hexdigest()}
            entries.append(entry)
        page = {"meta": {"api-version": "1.1"}, "name": name, "files": entries}
        (directory / "index.json").write_text(json.dumps(page))

    def raw(self, name: str, body: bytes, *, content_type: str = SIMPLE_JSON) -> None:
        """A project page answered exactly as given."""
        directory = self.root / "simple" / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "raw").write_bytes(body)
        (directory / "content-type").write_text(content_type)


def _handler(index: LocalIndex):
    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(index.root), **kwargs)

        def log_message(self, format, *args):  # noqa: A002 - the base class's name
            pass

        def do_GET(self):  # noqa: N802 - http.server's name
            if "Authorization" in self.headers:
                index.seen_auth[self.path] = self.headers["Authorization"]
            directory = index.root / self.path.strip("/")
            if self.path.endswith("/slow/"):
                time.sleep(3)
            if self.path.endswith("/huge/"):
                self.send_response(200)
                self.send_header("Content-Type", SIMPLE_JSON)
                self.end_headers()
                try:
                    for _ in range(40):
                        self.wfile.write(b" " * 1024 * 1024)
                except OSError:
                    pass
                return
            if self.path.endswith("/broken/"):
                self.send_error(500)
                return
            if (directory / "raw").is_file():
                self._send((directory / "raw").read_bytes(), (directory / "content-type").read_text())
            elif (directory / "index.json").is_file():
                self._send((directory / "index.json").read_bytes(), SIMPLE_JSON)
            elif self.path.endswith(".metadata") and directory.is_file():
                self._send(directory.read_bytes(), "application/octet-stream")
            else:
                self.send_error(404)

        def _send(self, body: bytes, content_type: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


def standard_projects(index: LocalIndex) -> None:
    """humanize (a pure-Python wheel with metadata, an older release, a yanked newer one and
    a pre-release) and foo-bar (an sdist only, no metadata file)."""
    index.project("humanize", [
        {"filename": "humanize-4.8.0-py3-none-any.whl", "upload-time": "2023-08-01T10:00:00.000000Z"},
        {"filename": "humanize-4.9.0.tar.gz", "upload-time": "2023-11-02T09:30:00.000000Z"},
        {"filename": "humanize-4.9.0-py3-none-any.whl", "upload-time": "2023-11-02T09:29:00.000000Z"},
        {"filename": "humanize-4.10.0-py3-none-any.whl", "upload-time": "2024-05-01T00:00:00Z", "yanked": "broken"},
        {"filename": "humanize-5.0.0rc1-py3-none-any.whl", "upload-time": "2024-06-01T00:00:00Z"},
    ], metadata={"humanize-4.9.0-py3-none-any.whl": HUMANIZE_METADATA})
    index.project("foo-bar", [{"filename": "foo_bar-1.2.0.tar.gz", "upload-time": "2019-03-04T05:06:07Z"}])


@pytest.fixture
def local_index(tmp_path: Path, settings, monkeypatch) -> Iterator[LocalIndex]:
    """A served index, configured as the one builds and the approval queue use (for this
    process, and for worker processes started after it)."""
    root = tmp_path / "index"
    (root / "simple").mkdir(parents=True)
    port = free_port()
    index = LocalIndex(root=root, url=f"http://127.0.0.1:{port}/simple/")
    standard_projects(index)
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(index))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.TOOLHUB_INDEX_URL = index.url
    settings.TOOLHUB_NO_INDEX = False
    settings.TOOLHUB_EXTRA_INDEX_URLS = []
    monkeypatch.setenv("TOOLHUB_INDEX_URL", index.url)
    monkeypatch.setenv("TOOLHUB_NO_INDEX", "0")
    try:
        yield index
    finally:
        server.shutdown()
        server.server_close()
