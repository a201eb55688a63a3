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
  re-raised as an `OSError` subclass with the same errno and a message that names egress. Code
  that catches `OSError` keeps working; nothing waits for a timeout.

Child processes inherit the proxy variables but not the Python-level patches.

This module uses only the standard library and imports nothing from the rest of the runtime.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib.machinery
import os
import socket
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

DEFAULT_SOCKET_PATH = "/run/egress.sock"
# Squid's port, by convention; the sandbox's loopback is its own, so nothing else is on it.
DEFAULT_PORT = 3128
LISTEN_HOST = "127.0.0.1"
# Each connection costs two threads; the host proxy refuses more than this at once anyway.
MAX_CONNECTIONS = 100
_CHUNK = 64 * 1024

_UNREACHABLE = (errno.ENETUNREACH, errno.EHOSTUNREACH)
_GRANTED_HINT = (
    "network egress from a ToolHub sandbox only goes through ToolHub's HTTP/HTTPS proxy "
    "(HTTP_PROXY/HTTPS_PROXY); direct connections are not possible"
)
_DENIED_HINT = "this toolkit has no network egress; an admin can grant it on the toolkit's page"


class EgressUnavailableError(OSError):
    """A direct connection or name lookup that cannot work inside the sandbox."""


def _not_reachable_response(reason: str) -> bytes:
    body = f"ToolHub egress failed: the egress proxy is not reachable ({reason})\n".encode()
    return (
        b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


class EgressForwarder:
    """Listens on 127.0.0.1 inside the sandbox and pipes each connection to the proxy socket."""

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
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()

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
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept_loop, name="egress-forwarder", daemon=True).start()
        return self

    def stop(self) -> None:
        self._closed.set()
        if self._listener is not None:
            # shutdown() wakes the thread blocked in accept(); close() alone does not on Linux.
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
        with self._lock:
            for sock in list(self._open):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                if self._closed.is_set():
                    return
                continue
            if not self._slots.acquire(blocking=False):
                client.close()
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                upstream.connect(self.socket_path)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    client.sendall(_not_reachable_response(exc.strerror or str(exc)))
                return
            with self._lock:
                self._open.update((client, upstream))
            sending = threading.Thread(target=_pump, args=(client, upstream), daemon=True)
            sending.start()
            _pump(upstream, client)
            # The proxy closes a connection once the server is done; nothing can follow, so the
            # other direction is ended too instead of waiting for an idle client to hang up.
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)
            sending.join()
        finally:
            with self._lock:
                self._open.discard(client)
                self._open.discard(upstream)
            client.close()
            upstream.close()
            self._slots.release()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(_CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def proxy_environment(proxy_url: str) -> dict[str, str]:
    """The variables that make ordinary HTTP clients use the forwarder."""
    loopback = "localhost,127.0.0.1,::1"
    env: dict[str, str] = {}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = proxy_url
    env["NO_PROXY"] = env["no_proxy"] = loopback
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
            if exc.errno in _UNREACHABLE and self.family in (socket.AF_INET, socket.AF_INET6):
                raise EgressUnavailableError(
                    exc.errno, f"cannot connect to {_show(address)}: {_installed_hint[0]}"
                ) from exc
            raise

    @functools.wraps(original_getaddrinfo)
    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original_getaddrinfo(host, *args, **kwargs)
        except socket.gaierror as exc:
            raise socket.gaierror(exc.errno, f"{exc.strerror} (looking up {host!r}: {_installed_hint[0]})") from exc

    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.getaddrinfo = getaddrinfo


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
