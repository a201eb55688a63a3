"""A warm sandbox's call brings its toolkit's source on stdin, right after the request line
(``"source_bytes": N``), and the call's own process writes it (toolhub/runtime/runner.py): the
fork server never holds a toolkit's source, and a call is one message to it fewer. The runtime
is run here as a plain subprocess, as in tests/test_runtime.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.test_runtime import MAIN

# Valid Python that is not UTF-8: the bytes must arrive exactly as they were uploaded.
LATIN1 = "# -*- coding: latin-1 -*-\nclass Tools:\n    def go(self) -> str:\n        return 'caf\xe9'\n".encode("latin-1")


def _run(request: dict, stdin_tail: bytes) -> dict:
    done = subprocess.run(
        [sys.executable, "-I", str(MAIN)],
        input=json.dumps(request).encode() + b"\n" + stdin_tail,
        capture_output=True,
        timeout=30,
        check=False,
    )
    lines = done.stdout.splitlines()
    assert lines, done.stderr.decode()
    return json.loads(lines[-1])


def _invoke(path: Path, **extra) -> dict:
    return {"op": "invoke", "source_path": str(path), "tool": "go", "arguments": {}, **extra}


def test_the_source_after_the_request_is_written_byte_for_byte_and_run(tmp_path: Path) -> None:
    path = tmp_path / "toolkit.py"
    final = _run(_invoke(path, source_bytes=len(LATIN1)), LATIN1)
    assert final == {"kind": "result", "result": "café", "result_type": "text"}
    assert path.read_bytes() == LATIN1
    assert path.stat().st_mode & 0o222 == 0  # read-only


def test_an_existing_file_is_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "toolkit.py"
    path.write_bytes(b"earlier = True\n")
    final = _run(_invoke(path, source_bytes=len(LATIN1)), LATIN1)
    assert final["kind"] == "error" and "FileExistsError" in final["error"], final
    assert path.read_bytes() == b"earlier = True\n"


def test_a_source_cut_short_fails_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "toolkit.py"
    final = _run(_invoke(path, source_bytes=100), LATIN1[:10])
    assert final["kind"] == "error" and "stdin ended after 10 of the 100 bytes" in final["error"], final
    assert not path.exists()


def test_the_announced_size_must_be_a_bounded_count(tmp_path: Path) -> None:
    path = tmp_path / "toolkit.py"
    for size in (-1, "12", True, 1.5, 9 << 20):
        final = _run(_invoke(path, source_bytes=size), b"")
        assert final["kind"] == "error" and "source_bytes is not a size" in final["error"], (size, final)
    assert not path.exists()


def test_an_unknown_op_writes_no_source(tmp_path: Path) -> None:
    path = tmp_path / "toolkit.py"
    final = _run({"op": "floor", "source_path": str(path), "source_bytes": len(LATIN1)}, LATIN1)
    assert final["kind"] == "error" and "unknown op 'floor'" in final["error"], final
    assert not path.exists()
