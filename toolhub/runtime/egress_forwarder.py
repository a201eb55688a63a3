"""Network egress as seen from inside the sandbox: a loopback proxy address and clear errors.

The sandbox has its own network namespace with only a loopback interface (bwrap's
`--unshare-net` brings `lo` up; a connect to any other address fails at once with ENETUNREACH).
When an admin granted the toolkit egress, the host's filtering proxy listens on a UNIX socket
that is bind-mounted into the sandbox (by default at `/run/egress.sock`). Most HTTP clients only
know TCP proxies, so `EgressForwarder` listens on 127.0.0.1 inside the sandbox and pipes each
connection to that socket, and `enable_egress` points the usual proxy variables at it.

All filtering happens on the host; nothing here is trusted, it only makes unmodified toolkits
work and makes failures readable:

- `requests`, `httpx`, `urllib` and `pip`-style clients read `HTTP_PROXY`/`HTTPS_PROXY`.
- `aiohttp.ClientSession` ignores those variables unless `trust_env=True`, so an import hook
  patches `ClientSession.__init__` to always pass `trust_env=True` when aiohttp is imported (or
  at once, if it already was). An explicit `trust_env=False` is overridden too: the proxy is the
  only way out of the sandbox, so honouring it could only break the toolkit.
- Clients that open sockets themselves (database drivers, raw `socket`, `urllib3.PoolManager`)
  cannot use the proxy. `install_clear_network_errors` wraps `socket.socket.connect` and
  `socket.getaddrinfo` so that the immediate ENETUNREACH/EHOSTUNREACH or resolver failure is
  re-raised as an `OSError` subclass with the same errno and a message that names egress. A
  refused connection to a loopback address gets the same treatment, because a toolkit that
  dials 127.0.0.1:6379 means the host's Redis, which the sandbox's own loopback does not
  have. Code that catches `OSError` keeps working; nothing waits for a timeout.
- Loopback is not exempt from the proxy variables (no NO_PROXY), so HTTP to 127.0.0.1 or
  `localhost` is refused by the proxy with a reason, like any other address it does not allow.

Child processes inherit the proxy variables but not the Python-level patches.

Run as a script (`python egress_forwarder.py SOCKET -- COMMAND...`) it starts the forwarder
for that socket and runs the command with the proxy variables set (and no NO_PROXY); package
builds use it (`toolhub.sandbox.build`).

This module uses only the standard library and imports nothing from the rest of the runtime.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import importlib.machinery
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

DEFAULT_SOCKET_PATH = "/run/egress.sock"
# Squid's port, by convention; the sandbox's loopback is its own, so nothing else is on it.
DEFAULT_PORT = 3128
LISTEN_HOST = "127.0.0.1"
# Connections open at once. Each one holds three descriptors in the sandbox process (the
# client's end, the accepted socket and the UNIX socket to the proxy) and RLIMIT_NOFILE is a
# few hundred, so past this a connection is answered with 503 rather than left to starve.
MAX_CONNECTIONS = 64
_CHUNK = 64 * 1024

_UNREACHABLE = (errno.ENETUNREACH, errno.EHOSTUNREACH)
_GRANTED_HINT = (
    "network egress from a ToolHub sandbox only goes through ToolHub's HTTP/HTTPS proxy "
    "(HTTP_PROXY/HTTPS_PROXY); direct connections are not possible"
)
_DENIED_HINT = "this toolkit has no network egress; an admin can grant it on the toolkit's page"
_LOOPBACK_HINT = (
    "the sandbox has a loopback interface of its own, so services on the ToolHub host "
    "(databases, caches) are not reachable from it"
)


class EgressUnavailableError(OSError):
    """A direct connection or name lookup that cannot work inside the sandbox."""


def _error_response(status: int, message: str) -> bytes:
    """An error answer whose reason phrase is the message itself, as the host proxy does:
    many clients show only the status line ("HTTP Error 503: ...")."""
    phrase = "".join(c if " " <= c <= "~" else "?" for c in message)[:300]
    body = f"{message}\n".encode()
    return (
        f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n".encode()
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


def _not_reachable_response(reason: str) -> bytes:
    return _error_response(502, f"ToolHub egress failed: the egress proxy is not reachable ({reason})")


class EgressForwarder:
    """Listens on 127.0.0.1 inside the sandbox and pipes each connection to the proxy socket.

    All connections are served by one event loop in one background thread. A thread per
    connection would count against the sandbox's process limit (RLIMIT_NPROC counts threads),
    and once a thread could not be started, connections would wait unanswered until the
    client's timeout; here the number of threads does not grow with the connections.
    """

    def __init__(
        self,
        *,
        socket_path: str = DEFAULT_SOCKET_PATH,
        host: str = LISTEN_HOST,
        port: int = DEFAULT_PORT,
    ) -> None:
        self.socket_path = socket_path
        self._address = (host, port)
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # Connections refused for the cap on open ones (a build step's tool may not say why).
        self.refused_for_cap = 0

    @property
    def port(self) -> int:
        if self._listener is None:
            raise RuntimeError("the forwarder is not started")
        return int(self._listener.getsockname()[1])

    @property
    def proxy_url(self) -> str:
        return f"http://{self._address[0]}:{self.port}"

    def start(self) -> EgressForwarder:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(self._address)
        listener.listen(128)
        self._listener = listener
        started = threading.Event()
        failures: list[BaseException] = []

        def run() -> None:
            try:
                asyncio.run(self._main(started))
            # Whatever stopped the loop from starting is raised in the thread that called start().
            except BaseException as exc:  # noqa: BLE001
                failures.append(exc)
            finally:
                started.set()

        self._thread = threading.Thread(target=run, name="egress-forwarder", daemon=True)
        self._thread.start()
        started.wait()
        if failures:
            listener.close()
            raise failures[0]
        return self

    def stop(self) -> None:
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is not None and thread.is_alive() and loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stopping.set)
            thread.join(10)
        if self._listener is not None:
            self._listener.close()

    async def _main(self, started: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        assert self._listener is not None
        server = await asyncio.start_server(self._serve, sock=self._listener, limit=_CHUNK)
        started.set()
        try:
            await self._stopping.wait()
        finally:
            server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        upstream_writer: asyncio.StreamWriter | None = None
        sending: asyncio.Future[None] | None = None
        try:
            if len(self._tasks) > MAX_CONNECTIONS:
                self.refused_for_cap += 1
                message = f"ToolHub egress refused: more than {MAX_CONNECTIONS} connections open at once"
                client_writer.write(_error_response(503, message))
                await client_writer.drain()
                return
            try:
                upstream_reader, upstream_writer = await asyncio.open_unix_connection(self.socket_path, limit=_CHUNK)
            except OSError as exc:
                client_writer.write(_not_reachable_response(exc.strerror or str(exc)))
                await client_writer.drain()
                return
            sending = asyncio.ensure_future(_pipe(client_reader, upstream_writer))
            # The proxy closes a connection once the server is done; nothing can follow, so the
            # connection ends then, instead of waiting for an idle client to hang up.
            await _pipe(upstream_reader, client_writer)
        # stop() cancels open connections; a connection that ends either way is simply closed.
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            if sending is not None:
                sending.cancel()
                await asyncio.gather(sending, return_exceptions=True)
            for writer in (upstream_writer, client_writer):
                if writer is not None:
                    writer.close()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy until the source ends, then pass the end on (so request-then-read protocols finish)."""
    with contextlib.suppress(OSError):
        while data := await source.read(_CHUNK):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()


def proxy_environment(proxy_url: str) -> dict[str, str]:
    """The variables that make ordinary HTTP clients use the forwarder.

    There is deliberately no NO_PROXY for loopback: the sandbox's loopback holds nothing but
    the forwarder, and a toolkit that asks for `http://127.0.0.1:6379/` or `localhost` means
    the ToolHub host. Through the proxy that request is refused with a reason the toolkit
    sees and the run records, instead of an unexplained "connection refused" that no record
    shows.
    """
    env: dict[str, str] = {}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = proxy_url
    return env


# aiohttp


def _trust_env_always(module: ModuleType) -> None:
    session = getattr(module, "ClientSession", None)
    if session is None or getattr(session, "_toolhub_trust_env", False):
        return
    original = session.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["trust_env"] = True
        original(self, *args, **kwargs)

    session.__init__ = __init__
    session._toolhub_trust_env = True


class _AiohttpTrustEnvFinder:
    """Finds `aiohttp` like the rest of sys.meta_path, then patches it once it has run."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "aiohttp":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original_exec = loader.exec_module

        # Shadowing the method on this one loader instance keeps the loader's type (and
        # everything importlib.resources asks of it) unchanged.
        def exec_module(module: ModuleType) -> None:
            original_exec(module)
            _trust_env_always(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install_aiohttp_trust_env() -> None:
    """Make every `aiohttp.ClientSession` honour the proxy variables."""
    if "aiohttp" in sys.modules:
        _trust_env_always(sys.modules["aiohttp"])
    if not any(isinstance(f, _AiohttpTrustEnvFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AiohttpTrustEnvFinder())


# Clear errors for clients that bypass the proxy

_installed_hint: list[str] = []


def install_clear_network_errors(*, granted: bool) -> None:
    """Make direct connections fail with a message that says how egress works in ToolHub.

    `granted` chooses the hint: use the proxy, or ask an admin for a grant. Calling it again
    only changes the hint.
    """
    hint = _GRANTED_HINT if granted else _DENIED_HINT
    if _installed_hint:
        _installed_hint[0] = hint
        return
    _installed_hint.append(hint)
    original_connect = socket.socket.connect
    original_getaddrinfo = socket.getaddrinfo

    @functools.wraps(original_connect)
    def connect(self: socket.socket, address: Any) -> None:
        try:
            original_connect(self, address)
        except OSError as exc:
            if self.family not in (socket.AF_INET, socket.AF_INET6):
                raise
            if exc.errno in _UNREACHABLE:
                raise EgressUnavailableError(
                    exc.errno, f"cannot connect to {_show(address)}: {_installed_hint[0]}"
                ) from exc
            if exc.errno == errno.ECONNREFUSED and _is_loopback(address):
                raise EgressUnavailableError(
                    exc.errno, f"cannot connect to {_show(address)}: {_LOOPBACK_HINT}; {_installed_hint[0]}"
                ) from exc
            raise

    @functools.wraps(original_getaddrinfo)
    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original_getaddrinfo(host, *args, **kwargs)
        except socket.gaierror as exc:
            raise socket.gaierror(exc.errno, f"{exc.strerror} (looking up {host!r}: {_installed_hint[0]})") from exc

    socket.socket.connect = connect  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = getaddrinfo


def _is_loopback(address: Any) -> bool:
    if not isinstance(address, tuple) or not address:
        return False
    host = str(address[0])
    return host == "localhost" or host == "::1" or host.startswith("127.") or host.startswith("::ffff:127.")


def _show(address: Any) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        host = f"[{address[0]}]" if ":" in str(address[0]) else str(address[0])
        return f"{host}:{address[1]}"
    return repr(address)


# The one call the runtime makes


def enable_egress(*, socket_path: str = DEFAULT_SOCKET_PATH, port: int = DEFAULT_PORT) -> EgressForwarder:
    """Start the forwarder and make HTTP clients in this process (and its children) use it.

    Call it before the toolkit's module is imported, in the process that runs the toolkit.
    """
    forwarder = EgressForwarder(socket_path=socket_path, port=port).start()
    os.environ.update(proxy_environment(forwarder.proxy_url))
    install_aiohttp_trust_env()
    install_clear_network_errors(granted=True)
    return forwarder


def main(args: Sequence[str]) -> int:
    """`SOCKET -- COMMAND...`: run the command behind a forwarder to SOCKET; its exit status."""
    socket_path, separator, *command = args
    if separator != "--" or not command:
        raise SystemExit("usage: egress_forwarder.py SOCKET -- COMMAND...")
    forwarder = EgressForwarder(socket_path=socket_path).start()
    env = {name: value for name, value in os.environ.items() if name.lower() != "no_proxy"}
    try:
        return subprocess.call(command, env=env | proxy_environment(forwarder.proxy_url))
    finally:
        forwarder.stop()
        if forwarder.refused_for_cap:
            # Into the step's output, where the build's failure is explained from.
            print(
                f"ToolHub egress refused {forwarder.refused_for_cap} connections: more than {MAX_CONNECTIONS}"
                " connections open at once",
                file=sys.stderr,
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_SOCKET_PATH",
    "EgressForwarder",
    "EgressUnavailableError",
    "enable_egress",
    "install_aiohttp_trust_env",
    "install_clear_network_errors",
    "proxy_environment",
]
