"""The runtime's last step (toolhub.runtime.channel.Channel.finish): once it has written its
final line, the process waits for the host to close its stdin, so that the host can measure it
whole (its peak memory is in /proc only while it lives), and no longer than it must."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from toolhub.runtime.channel import FINISH_WAIT_SECONDS

REPO = Path(__file__).resolve().parent.parent
TOOLKIT = "class Tools:\n    def echo(self, text: str) -> str:\n        return text\n"


def _start(tmp_path: Path) -> subprocess.Popen:
    path = tmp_path / "toolkit.py"
    path.write_text(TOOLKIT)
    process = subprocess.Popen(
        [sys.executable, "-I", str(REPO / "toolhub/runtime/main.py")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    assert process.stdin is not None
    request = {"op": "invoke", "source_path": str(path), "tool": "echo", "arguments": {"text": "hi"}}
    process.stdin.write(json.dumps(request).encode() + b"\n")
    process.stdin.flush()
    return process


def _final(process: subprocess.Popen) -> dict:
    assert process.stdout is not None
    return json.loads(process.stdout.readline())


def test_the_process_lives_until_the_host_closes_its_stdin(tmp_path):
    process = _start(tmp_path)
    try:
        assert _final(process) == {"kind": "result", "result": "hi", "result_type": "text"}
        time.sleep(0.2)
        assert process.poll() is None
        # Whole: its memory is still in its status.
        assert "VmHWM" in Path(f"/proc/{process.pid}/status").read_text()
        closed = time.monotonic()
        assert process.stdin is not None
        process.stdin.close()
        assert process.wait(5) == 0
        assert time.monotonic() - closed < 0.5
    finally:
        process.kill()
        process.wait()


def test_a_host_that_never_closes_stdin_waits_only_so_long(tmp_path):
    process = _start(tmp_path)
    try:
        _final(process)
        answered = time.monotonic()
        assert process.wait(FINISH_WAIT_SECONDS + 5) == 0
        assert time.monotonic() - answered < FINISH_WAIT_SECONDS + 1
    finally:
        process.kill()
        process.wait()
