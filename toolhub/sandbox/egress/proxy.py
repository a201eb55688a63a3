"""The host-side egress proxy: the only way out of a sandbox that was granted network egress.

A sandbox keeps its own network namespace, which has nothing but a loopback interface. When an
admin grants a toolkit egress, the worker starts an `EgressProxy` listening on a UNIX socket that
is bind-mounted into the sandbox: one per invocation for a cold sandbox, one for the life of a
warm sandbox, which serves one invocation at a time and whose report and limits start again with
each (`end_call`). A small forwarder inside the sandbox
(`toolhub/runtime/egress_forwarder.py`) turns it into the TCP address that `HTTP_PROXY` and
`HTTPS_PROXY` name. Everything that leaves therefore passes through this module, which is why
it trusts nothing the sandbox sends.

What the proxy speaks:

- `CONNECT host:port`: after the checks below, bytes are tunnelled as they are, so HTTPS stays
  end-to-end between the toolkit and the server (the proxy never sees plain text or holds keys).
- Absolute-form requests (`GET http://host/path HTTP/1.1`, and other methods with a body framed by
  `Content-Length` or chunked encoding): one request per client connection. Hop-by-hop and
  `Proxy-*` headers are stripped in both directions, `Host` is set from the URL and both sides
  are told `Connection: close`.

What it refuses (HTTP 403 with a body `ToolHub egress refused: <reason>`, the reason also in the
status line, because clients report a refused CONNECT by its status line alone); the rules
themselves are pure functions in `toolhub.sandbox.egress.rules`:

- names outside the toolkit's allowlist (`host_matches_allowlist` gives the pattern rules);
- names that resolve to ANY address that is not a public internet address: loopback, private,
  carrier-grade NAT, link-local (which includes the cloud metadata address 169.254.169.254),
  multicast, reserved, unspecified, documentation ranges, and IPv6 forms that embed such an IPv4
  address (IPv4-mapped, NAT64, 6to4, Teredo) - see `address_refusal_reason`;
- raw IP literals that are not public, and numeric host names in non-standard forms (`127.1`,
  `0x7f000001`) that C resolvers would quietly read as addresses;
- anything past the invocation's byte or connection limit.

The proxy resolves each name once and connects to exactly the address it checked, so a DNS answer
that changes between the check and the connection (DNS rebinding) cannot redirect it. The module
uses the standard library only, so it can run in a Celery worker without Django.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import ipaddress
import logging
import os
import re
import socket
import threading
from collections.abc import Awaitable, Callable, Collection
from typing import Self
from urllib.parse import urlsplit

from toolhub.sandbox.egress.http import (
    BadRequest,
    Head,
    body_framing,
    error_response,
    parse_head,
    parse_header_lines,
    response_framing,
    split_authority,
    split_head,
    strip_hop_by_hop,
)
from toolhub.sandbox.egress.relay import CHUNK, HostRecord, Progress, Upstream, cancel_all, copy_body, until_done
from toolhub.sandbox.egress.rules import (
    EgressPolicy,
    IPNetwork,
    address_refusal_reason,
    dial_address,
    host_address_refusal_reason,
    host_local_networks,
    host_matches_allowlist,
    host_name_refusal_reason,
    normalize_host,
    validate_host_pattern,
)

logger = logging.getLogger(__name__)

Resolver = Callable[[str, int], Awaitable[list[str]]]
Connector = Callable[[str, int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]

# A request head larger than this is refused; real clients send a few hundred bytes.
MAX_HEAD_BYTES = 64 * 1024
# A client that opens the socket and sends nothing must not hold a slot forever.
HEAD_TIMEOUT_SECONDS = 30.0
RESOLVE_TIMEOUT_SECONDS = 10.0
CONNECT_TIMEOUT_SECONDS = 10.0
# Idle client sockets are cheap but not free; a toolkit cannot open more than this at once.
MAX_OPEN_CLIENTS = 100
# The report goes into the database; a toolkit that retries a refused host in a loop must not be
# able to make it grow without bound, so later entries are only counted.
MAX_RECORDED_ATTEMPTS = 100


class _Refused(Exception):
    """A request the policy does not allow; the message is shown to the toolkit author."""


class _Failed(Exception):
    """A request that was allowed but could not be carried out (bad gateway)."""

    def __init__(self, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.status = status


class _ByteLimitReached(Exception):
    pass


class _ClientGone(Exception):
    """The client stopped sending a request body it had announced."""


class _ServerStoppedReading(Exception):
    """The server closed its side while the request body was still being sent."""


# Defaults for the injectable parts


def _bare(host: str) -> str:
    """A host name normalized, without the brackets of an IPv6 literal."""
    name = normalize_host(host)
    return name[1:-1] if name.startswith("[") and name.endswith("]") else name


def _literal(name: str) -> list[str]:
    """The address to dial for an IP literal; nothing for a name."""
    try:
        return [dial_address(ipaddress.ip_address(name))]
    except ValueError:
        return []


async def _system_resolver(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def _open_tcp(ip: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(ip, port, limit=MAX_HEAD_BYTES)


# The proxy


class EgressProxy:
    """A filtering HTTP proxy on a UNIX socket, for one invocation of one toolkit at a time
    (`end_call` ends one and starts counting the next).

    `resolver(host, port) -> list of IP strings` and `connect(ip, port) -> (reader, writer)` can
    be replaced in tests. `test_only_loopback_targets` is the one way to let the proxy reach a
    local test server: exact `(ip, port)` pairs on loopback that a *resolved name* may connect to
    (raw IP literals are never exempt). It exists only on this constructor: `EgressPolicy`,
    `run_proxy_in_thread` and therefore settings and the UI cannot set it.

    `only_targets`, when given, replaces the allowlist and the address checks: exactly these
    `(host, port)` pairs are reachable, whatever addresses they resolve to, and nothing else.
    Package builds use it for the index hosts the admin configured, which may well be a mirror
    on the LAN or on this host (`toolhub.sandbox.build`).
    """

    def __init__(
        self,
        policy: EgressPolicy,
        socket_path: str | os.PathLike[str],
        *,
        resolver: Resolver | None = None,
        connect: Connector | None = None,
        socket_mode: int = 0o666,
        local_networks: Callable[[], list[IPNetwork]] | None = None,
        test_only_loopback_targets: Collection[tuple[str, int]] = (),
        only_targets: Collection[tuple[str, int]] | None = None,
    ) -> None:
        self.policy = policy
        self.socket_path = os.fspath(socket_path)
        self.socket_mode = socket_mode
        self._resolve = resolver or _system_resolver
        self._connect = connect or _open_tcp
        self._local_networks = local_networks or host_local_networks
        self._test_targets = frozenset(
            (str(ipaddress.ip_address(ip)), int(port)) for ip, port in test_only_loopback_targets
        )
        for ip, _port in self._test_targets:
            if not ipaddress.ip_address(ip).is_loopback:
                raise ValueError(f"test_only_loopback_targets may only name loopback, not {ip}")
        self._only_targets = (
            None if only_targets is None else frozenset((_bare(host), int(port)) for host, port in only_targets)
        )
        self._listener: socket.socket | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # Connections accepted whose task has not run yet (a cancelled one never will).
        self._unstarted: dict[asyncio.Task[None], socket.socket] = {}
        self._reset()

    def _reset(self) -> None:
        """Start counting from nothing: the report and the limits are per invocation."""
        self._hosts: dict[tuple[str, int], HostRecord] = {}
        self._refused: list[dict[str, object]] = []
        self._failed: list[dict[str, object]] = []
        self._dropped = 0
        self._connections = 0
        self._bytes_in = 0
        self._bytes_out = 0
        self._limits_reached: list[str] = []

    # Life cycle

    async def start(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
        try:
            listener.bind(self.socket_path)
            # The sandbox runs as another user and must be able to connect; keep the socket in a
            # per-run directory that only lets that user traverse it (see the module docstring).
            os.chmod(self.socket_path, self.socket_mode)
            listener.listen(MAX_OPEN_CLIENTS)
        except BaseException:
            listener.close()
            raise
        self._listener = listener
        asyncio.get_running_loop().add_reader(listener.fileno(), self._accept)

    def _accept(self) -> None:
        """Accept what is waiting, each connection registered in the same step: a call that
        ends (`end_call`) then finds every connection it opened, none half-accepted."""
        for connection in self._pending():
            task = asyncio.ensure_future(self._serve_socket(connection))
            self._tasks.add(task)
            self._unstarted[task] = connection
            task.add_done_callback(self._tasks.discard)

    def _pending(self) -> list[socket.socket]:
        """The connections waiting in the listener's backlog, accepted."""
        accepted: list[socket.socket] = []
        while self._listener is not None and len(accepted) < MAX_OPEN_CLIENTS:
            try:
                connection, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                # Out of descriptors: leave the rest in the backlog and look again in a second
                # (the listener stays readable, so asking at once would spin).
                logger.warning("egress proxy: cannot accept a connection: %s", exc)
                loop = asyncio.get_running_loop()
                loop.remove_reader(self._listener.fileno())
                loop.call_later(1.0, self._listen_again)
                break
            connection.setblocking(False)
            accepted.append(connection)
        return accepted

    def _listen_again(self) -> None:
        if self._listener is not None:
            asyncio.get_running_loop().add_reader(self._listener.fileno(), self._accept)

    async def _serve_socket(self, connection: socket.socket) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._unstarted.pop(task, None)
        try:
            reader, writer = await asyncio.open_unix_connection(sock=connection, limit=MAX_HEAD_BYTES)
        except BaseException:
            connection.close()
            raise
        await self._serve_client(reader, writer)

    async def _close_connections(self) -> None:
        while waiting := self._pending():
            for connection in waiting:
                connection.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for connection in self._unstarted.values():
            connection.close()
        self._unstarted.clear()

    async def end_call(self) -> dict[str, object]:
        """The report of the call that just ended, and nothing counted for the next one.

        For a proxy that serves one sandbox for many calls, one at a time (a warm sandbox):
        the caller says when every process of the call is gone. Whatever the call still has
        open, or left waiting in the backlog, is closed first, so that nothing it started is
        carried out, or counted, during the next call; then the counters and limits start
        again from nothing, as for a new proxy.
        """
        await self._close_connections()
        report = self.report()
        self._reset()
        return report

    async def stop(self) -> None:
        if self._listener is not None:
            asyncio.get_running_loop().remove_reader(self._listener.fileno())
        await self._close_connections()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    def report(self) -> dict[str, object]:
        """What this invocation did, as JSON-ready data for the run record."""
        hosts = [
            {
                "host": r.host,
                "port": r.port,
                "addresses": sorted(r.addresses),
                "connections": r.connections,
                "bytes_in": r.bytes_in,
                "bytes_out": r.bytes_out,
            }
            for r in self._hosts.values()
        ]
        return {
            "hosts": hosts,
            "refused": copy.deepcopy(self._refused),
            "failed": copy.deepcopy(self._failed),
            "dropped_records": self._dropped,
            "connections": self._connections,
            "bytes_in": self._bytes_in,
            "bytes_out": self._bytes_out,
            "limits_reached": list(self._limits_reached),
        }

    # Recording

    def _record_attempt(self, kind: list[dict[str, object]], host: str, port: int, why: str) -> None:
        if len(self._refused) + len(self._failed) >= MAX_RECORDED_ATTEMPTS:
            self._dropped += 1
            return
        kind.append({"host": host, "port": port, "reason": why})

    def _limit_reached(self, name: str) -> None:
        if name not in self._limits_reached:
            self._limits_reached.append(name)

    def _charge(self, upstream: Upstream, direction: str, size: int) -> None:
        """Count bytes against the invocation's budget before they are passed on."""
        if self._bytes_in + self._bytes_out + size > self.policy.max_bytes:
            self._limit_reached("bytes")
            raise _ByteLimitReached
        if direction == "in":
            self._bytes_in += size
            upstream.record.bytes_in += size
        else:
            self._bytes_out += size
            upstream.record.bytes_out += size

    def _byte_limit_message(self) -> str:
        return f"byte limit reached ({self.policy.max_bytes} bytes per invocation)"

    # Checks

    def _check_name(self, host: str) -> str:
        """Refuse hosts the allowlist does not cover; return the name to resolve."""
        name = _bare(host)
        if not host_matches_allowlist(name, self.policy.allow_hosts):
            allowed = ", ".join(self.policy.allow_hosts or [])
            raise _Refused(f"{name} is not in this toolkit's allowlist ({allowed})")
        return name

    async def _checked_addresses(self, name: str, port: int) -> list[str]:
        """Resolve once and return the addresses to dial, refusing if any of them is not public."""
        with contextlib.suppress(ValueError):
            literal = ipaddress.ip_address(name)
            reason = address_refusal_reason(literal) or host_address_refusal_reason(literal, self._local_networks())
            if reason is not None:
                raise _Refused(f"{literal} is {reason}; ToolHub only connects to public addresses")
            return [dial_address(literal)]
        name_reason = host_name_refusal_reason(name)
        if name_reason is not None:
            raise _Refused(name_reason)
        found = await self._resolved(name, port)
        addresses: list[str] = []
        # Read for every connection: the host's own addresses, public ones included, are never
        # a destination (a service bound to 0.0.0.0 on the worker host would answer).
        local = self._local_networks()
        for text in found:
            try:
                ip = ipaddress.ip_address(text)
            except ValueError:
                raise _Refused(f"{name} resolves to something that is not an address") from None
            reason = address_refusal_reason(ip) or host_address_refusal_reason(ip, local)
            if reason is not None and (str(ip), port) not in self._test_targets:
                raise _Refused(f"{name} resolves to {ip}, which is {reason}; ToolHub only connects to public addresses")
            addresses.append(dial_address(ip))
        return list(dict.fromkeys(addresses))

    async def _resolved(self, name: str, port: int) -> list[str]:
        try:
            found = await asyncio.wait_for(self._resolve(name, port), RESOLVE_TIMEOUT_SECONDS)
        except (TimeoutError, OSError) as exc:
            raise _Failed(f"could not resolve {name}: {exc or 'timed out'}") from exc
        if not found:
            raise _Failed(f"could not resolve {name}: no addresses")
        return found

    async def _open_upstream(self, host: str, port: int) -> Upstream:
        """Apply every check, then connect to one of the addresses that were checked."""
        # Once a transfer was cut at the limit, the invocation gets no new connections, even
        # if a few bytes of the budget are left.
        if "bytes" in self._limits_reached or self._bytes_in + self._bytes_out >= self.policy.max_bytes:
            self._limit_reached("bytes")
            raise _Refused(self._byte_limit_message())
        if self._connections >= self.policy.max_connections:
            self._limit_reached("connections")
            raise _Refused(f"connection limit reached ({self.policy.max_connections} per invocation)")
        if self._only_targets is None:
            name = self._check_name(host)
            addresses = await self._checked_addresses(name, port)
        else:
            name = _bare(host)
            if (name, port) not in self._only_targets:
                allowed = ", ".join(sorted(f"{h}:{p}" for h, p in self._only_targets))
                raise _Refused(f"{name}:{port} is not one of the hosts allowed here ({allowed})")
            addresses = _literal(name) or await self._resolved(name, port)
        self._connections += 1
        errors: list[str] = []
        for ip in addresses:
            try:
                reader, writer = await asyncio.wait_for(self._connect(ip, port), CONNECT_TIMEOUT_SECONDS)
            except TimeoutError:
                errors.append(f"{ip}: timed out")
                continue
            except OSError as exc:
                # asyncio's strerror is "Connect call failed (...)"; the errno says why.
                errors.append(f"{ip}: {os.strerror(exc.errno) if exc.errno else exc}")
                continue
            record = self._hosts.get((name, port))
            if record is None:
                record = self._hosts[(name, port)] = HostRecord(host=name, port=port)
            record.addresses.add(ip)
            record.connections += 1
            return Upstream(record, reader, writer)
        status = 504 if all(e.endswith("timed out") for e in errors) else 502
        raise _Failed(f"could not connect to {name}:{port} ({'; '.join(errors)})", status)

    # Serving

    async def _serve_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if len(self._tasks) > MAX_OPEN_CLIENTS:
                self._record_attempt(self._refused, "", 0, f"more than {MAX_OPEN_CLIENTS} open connections")
                writer.write(
                    error_response(
                        503,
                        f"ToolHub egress refused: more than {MAX_OPEN_CLIENTS} open connections",
                    )
                )
                await writer.drain()
                return
            await self._serve_request(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        # stop() cancels open connections. Python 3.11's stream server logs a cancelled
        # handler as an error, so the cancellation ends here as a normal close.
        except asyncio.CancelledError:
            pass
        except Exception:
            logger.exception("egress proxy: unexpected error")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_SECONDS)
        except asyncio.LimitOverrunError:
            writer.write(error_response(431, "ToolHub egress: the request head is too large"))
            return
        except (TimeoutError, asyncio.IncompleteReadError):
            return
        host, port = "", 0
        try:
            head = parse_head(raw)
            if head.method == "CONNECT":
                host, port = split_authority(head.target)
                await self._tunnel(host, port, reader, writer)
            else:
                host, port, request = self._forwardable_request(head)
                await self._forward(host, port, head, request, reader, writer)
        except BadRequest as exc:
            writer.write(error_response(400, f"ToolHub egress: {exc}"))
        except _Refused as exc:
            self._record_attempt(self._refused, host, port, str(exc))
            writer.write(error_response(403, f"ToolHub egress refused: {exc}"))
        except _Failed as exc:
            self._record_attempt(self._failed, host, port, str(exc))
            writer.write(error_response(exc.status, f"ToolHub egress failed: {exc}"))
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    async def _tunnel(self, host: str, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = await self._open_upstream(host, port)
        try:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await self._relay(reader, writer, upstream)
        finally:
            upstream.writer.close()

    async def _relay(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstream: Upstream,
    ) -> None:
        """Pipe bytes both ways until the server is done or the byte budget runs out.

        The client may half-close first (its EOF is passed on and the answer still flows back);
        once the server has finished, the tunnel is closed.
        """
        outgoing = asyncio.ensure_future(self._pipe(reader, upstream.writer, upstream, "out"))
        incoming = asyncio.ensure_future(self._pipe(upstream.reader, writer, upstream, "in"))
        try:
            await until_done(incoming, outgoing)
        except _ByteLimitReached:
            self._record_attempt(
                self._refused,
                upstream.record.host,
                upstream.record.port,
                self._byte_limit_message() + "; the connection was closed",
            )
        except OSError:
            pass
        finally:
            await cancel_all(outgoing, incoming)

    async def _pipe(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        upstream: Upstream,
        direction: str,
    ) -> None:
        while chunk := await source.read(CHUNK):
            self._charge(upstream, direction, len(chunk))
            sink.write(chunk)
            await sink.drain()
        # Pass the end of one direction on, so request-then-read protocols still finish.
        if sink.can_write_eof():
            with contextlib.suppress(OSError):
                sink.write_eof()

    def _forwardable_request(self, head: Head) -> tuple[str, int, bytes]:
        """Check an absolute-form request and build the head that is sent to the server."""
        if not head.target.lower().startswith("http://"):
            if head.target.lower().startswith("https://"):
                raise BadRequest("https:// URLs go through CONNECT (set HTTPS_PROXY)")
            raise BadRequest("this is a proxy: send absolute-form 'http://host/path' or CONNECT")
        try:
            url = urlsplit(head.target)
            port = url.port or 80
        except ValueError as exc:
            raise BadRequest(f"invalid URL: {exc}") from None
        host = url.hostname or ""
        if not host or url.username is not None or url.password is not None or "@" in url.netloc:
            raise BadRequest("the URL needs a host and must not carry credentials")
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        authority = f"[{host}]" if ":" in host else host
        if port != 80:
            authority += f":{port}"
        lines = [f"{head.method} {path} {head.version}", f"Host: {authority}"]
        lines += [f"{key}: {value}" for key, value in strip_hop_by_hop(head.headers)]
        lines.append("Connection: close")
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return host, port, request

    async def _forward(
        self,
        host: str,
        port: int,
        head: Head,
        request: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        framing, length = body_framing(head.headers)
        upstream = await self._open_upstream(host, port)
        progress = Progress(method=head.method)
        body: asyncio.Future[None] | None = None
        response: asyncio.Future[None] | None = None
        try:
            self._charge(upstream, "out", len(request))
            upstream.writer.write(request)
            await upstream.writer.drain()
            # The body and the response run side by side: a server may answer early (413), or
            # send "100 Continue" before a client that asked for it sends the body.
            body = asyncio.ensure_future(self._send_body(reader, upstream, framing, length))
            response = asyncio.ensure_future(self._relay_response(writer, upstream, progress))
            await until_done(response, body)
        except _ByteLimitReached:
            if not progress.sent_head:
                raise _Refused(self._byte_limit_message()) from None
            self._record_attempt(
                self._refused,
                upstream.record.host,
                upstream.record.port,
                self._byte_limit_message() + "; the response was cut off",
            )
        except _ClientGone:
            pass
        except (OSError, BadRequest, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            if not progress.sent_head:
                raise _Failed(f"{upstream.record.host}:{port} did not send a valid HTTP response") from None
        finally:
            await cancel_all(body, response)
            upstream.writer.close()

    async def _send_body(self, reader: asyncio.StreamReader, upstream: Upstream, framing: str, length: int) -> None:
        """Forward exactly the request body, so bytes after it never reach this server."""

        async def send(data: bytes) -> None:
            self._charge(upstream, "out", len(data))
            try:
                upstream.writer.write(data)
                await upstream.writer.drain()
            except ConnectionError:
                raise _ServerStoppedReading from None

        try:
            await copy_body(reader, send, framing, length)
        except _ServerStoppedReading:
            # A server may answer early (413) and stop reading; its answer is still relayed.
            return
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            raise _ClientGone from None

    async def _relay_response(self, writer: asyncio.StreamWriter, upstream: Upstream, progress: Progress) -> None:
        """Send the response on with its hop-by-hop headers replaced by `Connection: close`.

        The body is relayed by its own framing rather than until the server closes, because a
        server may keep the connection open although it was asked to close it.
        """

        async def send(data: bytes) -> None:
            self._charge(upstream, "in", len(data))
            writer.write(data)
            await writer.drain()

        while True:
            raw = await upstream.reader.readuntil(b"\r\n\r\n")
            lines = split_head(raw)
            status = lines[0].split(" ", 2)
            if (
                len(status) < 2
                or status[0] not in ("HTTP/1.0", "HTTP/1.1")
                or not re.fullmatch(r"[1-5][0-9][0-9]", status[1])
            ):
                raise ConnectionError("not an HTTP/1 response")
            received = parse_header_lines(lines[1:])
            headers = strip_hop_by_hop(received)
            # Interim answers (100 Continue, 103 Early Hints) are passed on before the real one.
            interim = status[1].startswith("1") and status[1] != "101"
            out = [lines[0]] + [f"{k}: {v}" for k, v in headers]
            if interim:
                await send(("\r\n".join(out) + "\r\n\r\n").encode("latin-1"))
                continue
            if progress.method == "HEAD" or status[1] in ("204", "304"):
                framing, length = "none", 0
            else:
                framing, length = response_framing(received)
            out.append("Connection: close")
            await send(("\r\n".join(out) + "\r\n\r\n").encode("latin-1"))
            progress.sent_head = True
            break
        if framing == "eof":
            while chunk := await upstream.reader.read(CHUNK):
                await send(chunk)
        else:
            await copy_body(upstream.reader, send, framing, length)


# Running a proxy from synchronous code (a Celery worker)


class ProxyHandle:
    """A proxy running on its own event loop in a background thread."""

    def __init__(self, proxy: EgressProxy) -> None:
        self.proxy = proxy
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="toolhub-egress", daemon=True)

    @property
    def socket_path(self) -> str:
        return self.proxy.socket_path

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        try:
            await self.proxy.start()
        # Whatever failed is handed to the thread that called start(), which raises it.
        except Exception as exc:  # noqa: BLE001
            self._error = exc
            return
        finally:
            self._started.set()
        try:
            await self._stopping.wait()
        finally:
            await self.proxy.stop()

    def start(self) -> ProxyHandle:
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error
        return self

    def stop(self, timeout: float = 10.0) -> dict[str, object]:
        """Stop listening, close every connection, and return the final report."""
        if self._thread.is_alive() and self._loop is not None and self._stopping is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(timeout)
        return self.proxy.report()

    def end_call(self, timeout: float = 10.0) -> dict[str, object]:
        """`EgressProxy.end_call` on the proxy's loop: the ended call's report; the proxy
        goes on listening, with nothing counted, for the next call."""
        if not self._thread.is_alive() or self._loop is None:
            raise RuntimeError("the egress proxy is not running")
        return asyncio.run_coroutine_threadsafe(self.proxy.end_call(), self._loop).result(timeout)

    def report(self) -> dict[str, object]:
        """The report so far; safe to call while the proxy runs."""
        if self._thread.is_alive() and self._loop is not None:

            async def snapshot() -> dict[str, object]:
                return self.proxy.report()

            with contextlib.suppress(RuntimeError):
                return asyncio.run_coroutine_threadsafe(snapshot(), self._loop).result(10)
        return self.proxy.report()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def start_proxy_thread(proxy: EgressProxy) -> ProxyHandle:
    """Run an already configured proxy in a background thread (tests use this one)."""
    return ProxyHandle(proxy).start()


def run_proxy_in_thread(
    policy: EgressPolicy, socket_path: str | os.PathLike[str], *, socket_mode: int = 0o600
) -> ProxyHandle:
    """Start the egress proxy for one invocation; call `.stop()` afterwards to get the report.
    The socket is private (0600) by default: the caller hands it to the run's sandbox uid."""
    return start_proxy_thread(EgressProxy(policy, socket_path, socket_mode=socket_mode))


__all__ = [
    "EgressPolicy",
    "EgressProxy",
    "ProxyHandle",
    "address_refusal_reason",
    "host_matches_allowlist",
    "normalize_host",
    "run_proxy_in_thread",
    "start_proxy_thread",
    "validate_host_pattern",
]
