"""HTTP/1.1 message framing for the egress proxy: parsing a request head, finding where a body
ends, and the proxy's own error answers. Strict on purpose: anything ambiguous (stray CR or LF,
NUL, both Content-Length and Transfer-Encoding) is refused rather than interpreted, so the proxy
and the server can never disagree about where one message ends."""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


_DIGITS = re.compile(r"[0-9]+")


# Headers that describe one hop rather than the message. Transfer-Encoding is hop-by-hop too, but
# bodies are relayed byte for byte, so the framing header has to travel with them.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade", "host"})


class BadRequest(Exception):
    """A request the proxy cannot parse or will not interpret (HTTP 400)."""


@dataclass
class Head:
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]


def split_head(raw: bytes) -> list[str]:
    """Split a message head (ending in a blank line) into lines, refusing stray CR, LF and NUL.

    A bare LF inside a value would be read as a line break by some servers, letting a client
    add headers (or a second request) that this proxy never saw.
    """
    lines = raw.decode("latin-1").removesuffix("\r\n\r\n").split("\r\n")
    if any(re.search(r"[\r\n\x00]", line) for line in lines):
        raise BadRequest("the message head contains a stray CR, LF or NUL")
    return lines


def parse_head(raw: bytes) -> Head:
    lines = split_head(raw)
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]):
        raise BadRequest("the request line is not 'METHOD target HTTP/1.1'")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise BadRequest(f"unsupported HTTP version {version[:20]!r}")
    return Head(method, target, version, parse_header_lines(lines[1:]))


def parse_header_lines(lines: list[str]) -> list[tuple[str, str]]:
    headers: list[tuple[str, str]] = []
    for line in lines:
        # Folded continuation lines and names with spaces are how request smuggling starts.
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.fullmatch(name):
            raise BadRequest("a header line is malformed")
        headers.append((name, value.strip(" \t")))
    return headers


def header_values(headers: list[tuple[str, str]], name: str) -> list[str]:
    return [value for key, value in headers if key.lower() == name]


def strip_hop_by_hop(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    named = {token.strip().lower() for value in header_values(headers, "connection") for token in value.split(",")}
    return [
        (key, value)
        for key, value in headers
        if key.lower() not in _HOP_BY_HOP
        and key.lower() not in named - {"transfer-encoding", "content-length"}
        and not key.lower().startswith("proxy-")
    ]


def parse_port(text: str) -> int:
    if not _DIGITS.fullmatch(text) or not 0 < int(text) < 65536:
        raise BadRequest(f"invalid port {text[:10]!r}")
    return int(text)


def split_authority(authority: str) -> tuple[str, int]:
    """Split the `host:port` of a CONNECT request; IPv6 literals come in brackets."""
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0 or authority[end + 1 : end + 2] != ":":
            raise BadRequest("CONNECT needs 'host:port'")
        return authority[1:end], parse_port(authority[end + 2 :])
    host, sep, port = authority.rpartition(":")
    if not sep or not host or ":" in host:
        raise BadRequest("CONNECT needs 'host:port'")
    return host, parse_port(port)


def body_framing(headers: list[tuple[str, str]]) -> tuple[str, int]:
    """Return ("none"|"length"|"chunked", length) for a request body, refusing ambiguity."""
    encodings = header_values(headers, "transfer-encoding")
    lengths = header_values(headers, "content-length")
    if encodings and lengths:
        raise BadRequest("a request must not have both Transfer-Encoding and Content-Length")
    if encodings:
        codings = [c.strip().lower() for value in encodings for c in value.split(",")]
        if codings[-1] != "chunked":
            raise BadRequest("a request body with Transfer-Encoding must end with 'chunked'")
        return "chunked", 0
    if lengths:
        if len(set(lengths)) != 1 or not _DIGITS.fullmatch(lengths[0]):
            raise BadRequest("Content-Length is invalid")
        return "length", int(lengths[0])
    return "none", 0


def error_response(status: int, message: str) -> bytes:
    """An error answer whose reason phrase is the message itself.

    Clients report a refused CONNECT by its status line alone ("Tunnel connection failed: 403
    ToolHub egress refused: ..."), so the reason has to be there and not only in the body.
    """
    phrase = re.sub(r"[^\x20-\x7e]", "?", message)[:300]
    body = (message + "\n").encode("utf-8", "replace")
    head = (
        f"HTTP/1.1 {status} {phrase}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def response_framing(headers: list[tuple[str, str]]) -> tuple[str, int]:
    """Return ("chunked"|"length"|"eof", length) for a response body (RFC 9112, 6.3)."""
    encodings = header_values(headers, "transfer-encoding")
    lengths = header_values(headers, "content-length")
    if encodings and lengths:
        raise ConnectionError("the response has both Transfer-Encoding and Content-Length")
    if encodings:
        codings = [c.strip().lower() for value in encodings for c in value.split(",")]
        return ("chunked", 0) if codings[-1] == "chunked" else ("eof", 0)
    if lengths:
        if len(set(lengths)) != 1 or not _DIGITS.fullmatch(lengths[0]):
            raise ConnectionError("the response has an invalid Content-Length")
        return "length", int(lengths[0])
    return "eof", 0
