"""The line-delimited JSON channel between the sandbox runtime and its host.

Standard library only: the runtime must still be able to report an error when the
toolkit's environment is so broken that pydantic itself does not import.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import os
import re
import select
import sys
import threading
import time
import traceback
from typing import Any, BinaryIO

# A one-line error that an API caller or an LLM reads; the traceback carries the rest.
MAX_ERROR_CHARS = 2000
# How long a process that wrote its final line waits for the host to close its stdin.
FINISH_WAIT_SECONDS = 1.0


class ProtocolError(Exception):
    """The host sent something the runtime does not understand."""


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class Channel:
    """Reads the request and call results, writes events, calls and the final line."""

    def __init__(self, reader: BinaryIO, writer: BinaryIO) -> None:
        self._reader = reader
        self._writer = writer
        self._write_lock = threading.Lock()
        self._finished = False
        self._call_ids = itertools.count(1)
        self._pending: dict[int, concurrent.futures.Future[dict[str, Any]]] = {}
        self._pending_lock = threading.Lock()
        self._reader_thread: threading.Thread | None = None
        self._closed_reason: str | None = None

    @classmethod
    def from_stdio(cls) -> Channel:
        """Keep the real stdin and stdout for the protocol; give the toolkit harmless ones.

        A toolkit that prints, or a C library that writes to fd 1, must not be able to
        corrupt the protocol, and one that calls input() must not swallow a call result.
        So fds 0 and 1 are duplicated for the channel (the copies are not inherited by
        subprocesses), fd 0 becomes /dev/null and fd 1 becomes stderr.
        """
        protocol_in = os.dup(0)
        protocol_out = os.dup(1)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        return cls(os.fdopen(protocol_in, "rb"), os.fdopen(protocol_out, "wb"))

    def read_request(self) -> dict[str, Any]:
        line = self._reader.readline()
        if not line:
            raise ProtocolError("no request on stdin")
        request = _parse_line(line)
        if not isinstance(request, dict):
            raise ProtocolError("the request must be a JSON object")
        return request

    def read_exactly(self, size: int) -> bytes:
        """The next `size` bytes on stdin (what follows the request line: a warm sandbox's
        call brings its toolkit's source so)."""
        data = self._reader.read(size)
        if len(data) != size:
            raise ProtocolError(f"stdin ended after {len(data)} of the {size} bytes announced")
        return data

    def send(self, message: dict[str, Any]) -> None:
        """Write one message; silently dropped once the final line has been written."""
        # default=repr is the last guard; callers already made values JSON-compatible.
        text = json.dumps(message, ensure_ascii=False, default=repr)
        # A lone surrogate in a result or event cannot be encoded as UTF-8: it is replaced,
        # so the message still goes out (the host replaces them as well, whatever it reads).
        data = _LONE_SURROGATE.sub("\ufffd", text).encode() + b"\n"
        with self._write_lock:
            if self._finished:
                return
            self._writer.write(data)
            self._writer.flush()

    def finish(self, message: dict[str, Any]) -> None:
        """Write the final line and end the process once the host has it.

        The host closes the process's stdin as soon as it has read the final line, after it
        has measured the process (its peak memory is in its /proc status only while it
        lives); so the process waits for that, at most FINISH_WAIT_SECONDS. Exited at once, it
        was mostly gone by then, and a warm call waited for the fork server's report instead.

        os._exit() rather than a normal exit: threads the toolkit left running would
        otherwise keep the process (and the sandbox) alive, and its atexit handlers could
        still write to the terminal after the answer is complete.
        """
        self.send(message)
        with self._write_lock:
            self._finished = True
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a toolkit may have replaced the stream.
                pass
        try:
            self._wait_for_close(FINISH_WAIT_SECONDS)
        except BaseException:  # noqa: BLE001 - whatever the toolkit changed, the process ends.
            pass
        os._exit(0)

    def _wait_for_close(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        if self._reader_thread is not None:
            # It reads stdin for call results until the host closes it.
            self._reader_thread.join(seconds)
            return
        fd = self._reader.fileno()
        while (remaining := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable or not os.read(fd, 65536):
                return

    def start_call(self, event: dict[str, Any]) -> tuple[int, concurrent.futures.Future]:
        """Send a `call` line and return a future resolved by the matching call_result."""
        call_id = next(self._call_ids)
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        with self._pending_lock:
            if self._closed_reason is not None:
                future.set_result({"error": self._closed_reason})
                return call_id, future
            self._pending[call_id] = future
            if self._reader_thread is None:
                # Started only now: until the first call, nothing but the request is read.
                self._reader_thread = threading.Thread(
                    target=self._read_results, name="toolhub-call-results", daemon=True
                )
                self._reader_thread.start()
        self.send({"kind": "call", "call_id": call_id, "event": event})
        return call_id, future

    def forget_call(self, call_id: int) -> None:
        """Stop waiting for a call; a late answer to it will be ignored."""
        with self._pending_lock:
            self._pending.pop(call_id, None)

    def _read_results(self) -> None:
        for line in iter(self._reader.readline, b""):
            try:
                message = _parse_line(line)
                call_id = message["call_id"]
                if message.get("kind") != "call_result":
                    raise ProtocolError(f"expected a call_result, got {message.get('kind')!r}")
            except (ProtocolError, KeyError, TypeError) as exc:
                print(f"toolhub runtime: ignoring a bad line from the host: {exc}", file=sys.stderr)
                continue
            with self._pending_lock:
                future = self._pending.pop(call_id, None)
            if future is not None:
                future.set_result(message)
        # The host closed our stdin: nobody will answer, so every waiting call fails now.
        with self._pending_lock:
            self._closed_reason = "the host closed the connection"
            waiting, self._pending = self._pending, {}
        for future in waiting.values():
            future.set_result({"error": self._closed_reason})


def _parse_line(line: bytes) -> Any:
    try:
        return json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"not a JSON line: {exc}") from exc


def error_message(exc: BaseException) -> dict[str, Any]:
    """The final `error` line: a one-line summary plus the full traceback."""
    text = " ".join(str(exc).split())
    summary = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    if len(summary) > MAX_ERROR_CHARS:
        summary = summary[: MAX_ERROR_CHARS - 1] + "…"
    return {
        "kind": "error",
        "error": summary,
        "traceback": "".join(traceback.format_exception(exc)),
    }
