"""The rules of network egress, as pure functions: allowlist patterns, addresses, the policy.

Shared by the egress proxy (`toolhub.sandbox.egress.proxy`), which applies them to every connection, and
by the code that records an admin's grant, which validates the allowlist before saving it.

Allowlist patterns (`host_matches_allowlist`): `api.example.org` matches that name only;
`*.example.org` matches every name below example.org, at any depth, but not example.org itself
(list both when both are wanted); matching ignores case and one trailing dot; an IP address
matches only the same address listed literally. `None` instead of a list allows any public host.

Addresses (`address_refusal_reason`): only public internet addresses pass. Refused are loopback,
private (RFC 1918, unique local), carrier-grade NAT, link-local (169.254.0.0/16, which holds the
cloud metadata service, and fe80::/10), multicast, reserved, unspecified, documentation and
benchmarking ranges, and IPv6 addresses that embed a refused IPv4 address (IPv4-mapped, NAT64,
6to4, Teredo). The fixed table below decides first, so the result does not depend on the
running Python's `ipaddress`, whose idea of "private" changed between 3.11 patch releases.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from toolhub.messages import Message, message

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_DIGITS = re.compile(r"[0-9]+")

# Ranges refused whatever the running Python's `ipaddress` thinks of them (see above).
_BLOCKED_NETWORKS: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...] = tuple(
    (ipaddress.ip_network(net), reason)
    for net, reason in (
        ("0.0.0.0/8", 'an unspecified ("this network") address'),
        ("10.0.0.0/8", "a private address"),
        ("100.64.0.0/10", "a carrier-grade NAT (shared) address"),
        ("127.0.0.0/8", "a loopback address"),
        ("169.254.0.0/16", "a link-local address (this includes cloud metadata services)"),
        ("172.16.0.0/12", "a private address"),
        ("192.0.0.0/24", "an IETF protocol assignment address"),
        ("192.0.2.0/24", "a documentation address"),
        ("192.168.0.0/16", "a private address"),
        ("198.18.0.0/15", "a benchmarking address"),
        ("198.51.100.0/24", "a documentation address"),
        ("203.0.113.0/24", "a documentation address"),
        ("224.0.0.0/4", "a multicast address"),
        ("240.0.0.0/4", "a reserved address"),
        ("::/128", "an unspecified address"),
        ("::1/128", "a loopback address"),
        ("::/96", "an IPv4-compatible (reserved) address"),
        ("64:ff9b:1::/48", "a local-use NAT64 address"),
        ("100::/64", "a discard-only address"),
        ("2001:db8::/32", "a documentation address"),
        ("fc00::/7", "a private (unique local) address"),
        ("fe80::/10", "a link-local address"),
        ("fec0::/10", "a site-local address"),
        ("ff00::/8", "a multicast address"),
    )
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


# Host names and patterns


def normalize_host(host: str) -> str:
    """Lower-case a host name and drop one trailing dot (`API.Example.org.` -> `api.example.org`)."""
    host = host.strip().lower()
    return host.removesuffix(".")


def _canonical(host: str) -> str:
    """A host name normalized, or an IP address (with or without brackets) in standard form."""
    name = normalize_host(host)
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    with contextlib.suppress(ValueError):
        name = str(ipaddress.ip_address(name))
    return name


class HostPatternRefused(ValueError):
    """An allowlist entry that is not a valid pattern; `message` says why (toolhub.messages)."""

    def __init__(self, why: Message) -> None:
        super().__init__(why.english())
        self.message = why


def validate_host_pattern(pattern: str) -> str:
    """Return the normalized allowlist pattern, or raise HostPatternRefused saying what is wrong.

    A pattern is a host name (`api.example.org`), a wildcard (`*.example.org`) whose `*` stands
    for one or more whole labels, or an IP address written exactly as clients will send it.
    """
    if not isinstance(pattern, str):
        raise TypeError("an allowlist entry must be a string")
    normalized = normalize_host(pattern)
    if normalized.startswith("[") and normalized.endswith("]"):
        normalized = normalized[1:-1]
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(normalized))
    base = normalized.removeprefix("*.")
    if not base or "*" in base:
        raise HostPatternRefused(message("host.not_pattern", pattern=repr(pattern)))
    if host_name_refusal_reason(base) is not None:
        raise HostPatternRefused(message("host.invalid", pattern=repr(pattern)))
    if normalized.startswith("*.") and "." not in base:
        raise HostPatternRefused(message("host.whole_tld", pattern=repr(pattern)))
    return normalized


def host_matches_allowlist(host: str, allow_hosts: Iterable[str] | None) -> bool:
    """Tell whether `host` is allowed by the patterns; `None` allows every (public) host.

    Matching ignores case and one trailing dot. `api.example.org` matches only that name.
    `*.example.org` matches any name below example.org at any depth (`a.example.org`,
    `a.b.example.org`) but NOT `example.org` itself: list both when both are needed. An IP
    literal matches only the same address listed literally.
    """
    if allow_hosts is None:
        return True
    name = _canonical(host)
    for pattern in map(_canonical, allow_hosts):
        if pattern.startswith("*."):
            if name.endswith(pattern[1:]) and len(name) > len(pattern) - 1:
                return True
        elif name == pattern:
            return True
    return False


# Addresses


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[tuple[ipaddress.IPv4Address, str]]:
    """IPv4 addresses that an IPv6 address stands for, with the name of the mapping."""
    found: list[tuple[ipaddress.IPv4Address, str]] = []
    if address.ipv4_mapped is not None:
        found.append((address.ipv4_mapped, "IPv4-mapped"))
    if address in _NAT64:
        found.append((ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), "NAT64"))
    if address.sixtofour is not None:
        found.append((address.sixtofour, "6to4"))
    if address.teredo is not None:
        server, client = address.teredo
        found.append((server, "Teredo server"))
        found.append((client, "Teredo client"))
    return found


def address_refusal_reason(address: str | IPAddress) -> str | None:
    """Return why the proxy must not connect to `address`, or None for a public address.

    The reason reads as the end of a sentence such as "10.0.0.5 is a private address".
    """
    try:
        ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    except ValueError:
        return "not an IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            return "a scoped (interface-bound) address"
        for inner, mapping in _embedded_ipv4(ip):
            inner_reason = address_refusal_reason(inner)
            if inner_reason is not None:
                return f"the {mapping} form of {inner}, {inner_reason}"
        if ip.ipv4_mapped is not None or ip in _NAT64:
            # The IPv4 checks above decided: a mapped address is dialled as IPv4, and a NAT64
            # gateway translates to exactly the embedded address. (Python counts the NAT64
            # prefix as reserved, which would cut off IPv6-only hosts behind DNS64.)
            return None
    for network, reason in _BLOCKED_NETWORKS:
        if ip.version == network.version and ip in network:
            return reason
    properties = (
        ("is_loopback", "a loopback address"),
        ("is_link_local", "a link-local address"),
        ("is_multicast", "a multicast address"),
        ("is_unspecified", "an unspecified address"),
        ("is_reserved", "a reserved address"),
        ("is_private", "a private address"),
        ("is_site_local", "a site-local address"),
    )
    for name, reason in properties:
        if getattr(ip, name, False):
            return reason
    if not ip.is_global:
        return "not a public internet address"
    return None


IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_FIB_ENTRY = re.compile(r"[|+]-- ([0-9.]+)(?: ([0-9]+))?")
_FIB_LOCAL = re.compile(r"/([0-9]+) host LOCAL")


def host_local_networks(
    fib_trie: str | None = None, if_inet6: str | None = None
) -> list[IPNetwork]:
    """Every address (as networks) that this host's own network stack answers for: the kernel's
    local routes from ``/proc/net/fib_trie`` (IPv4: each interface address, and local ranges
    such as ``127.0.0.0/8``) and the addresses in ``/proc/net/if_inet6``. Read anew on each
    call, because interfaces come and go; the texts can be passed in for tests."""
    networks: list[IPNetwork] = []
    if fib_trie is None:
        with contextlib.suppress(OSError):
            fib_trie = Path("/proc/net/fib_trie").read_text()
    if if_inet6 is None:
        with contextlib.suppress(OSError):
            if_inet6 = Path("/proc/net/if_inet6").read_text()
    last: str | None = None
    for line in (fib_trie or "").splitlines():
        entry = _FIB_ENTRY.search(line)
        if entry:
            last = entry.group(1)
            continue
        local = _FIB_LOCAL.search(line)
        if local and last is not None:
            with contextlib.suppress(ValueError):
                networks.append(ipaddress.ip_network(f"{last}/{local.group(1)}", strict=False))
    for line in (if_inet6 or "").splitlines():
        fields = line.split()
        if fields and len(fields[0]) == 32:
            with contextlib.suppress(ValueError):
                networks.append(ipaddress.ip_network(ipaddress.IPv6Address(int(fields[0], 16))))
    return list(dict.fromkeys(networks))


def host_address_refusal_reason(address: str | IPAddress, networks: Iterable[IPNetwork]) -> str | None:
    """Why ``address`` is refused as one of this host's own (see `host_local_networks`), or None.
    An IPv6 address that embeds one of them counts too."""
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    candidates: list[IPAddress] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        candidates += [inner for inner, _mapping in _embedded_ipv4(ip)]
    for candidate in candidates:
        for network in networks:
            if candidate.version == network.version and candidate in network:
                return "an address of the worker host itself"
    return None


def dial_address(ip: IPAddress) -> str:
    """The address to dial: an IPv4-mapped IPv6 address is dialled as the IPv4 it maps."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def host_name_refusal_reason(name: str) -> str | None:
    """Return why a (normalized, non-IP) host name is refused before any lookup, or None.

    Besides malformed names this catches numeric names in non-standard forms (`127.1`,
    `0x7f000001`, `2130706433`) that the C resolver would quietly read as an IPv4 address.
    """
    if len(name) > 253 or not _HOST_NAME.fullmatch(name):
        return f"{name[:80]!r} is not a valid host name"
    if _DIGITS.fullmatch(name.rsplit(".", 1)[-1]):
        return f"{name} looks like an IP address written in a non-standard form"
    try:
        socket.inet_aton(name)
    except OSError:
        return None
    return f"{name} looks like an IP address written in a non-standard form"


@dataclass(frozen=True)
class EgressPolicy:
    """What one invocation of a toolkit may reach; built from the toolkit's grant and settings.

    `allow_hosts=None` allows every public host; a list allows only matching names (see
    `host_matches_allowlist`). Patterns are validated and normalized here, so a bad one fails
    when the grant is saved or the worker starts, not in the middle of a run.
    """

    allow_hosts: list[str] | None
    max_bytes: int
    max_connections: int

    def __post_init__(self) -> None:
        if self.allow_hosts is not None:
            if isinstance(self.allow_hosts, str):
                raise ValueError("allow_hosts must be a list of patterns, not one string")
            patterns = [validate_host_pattern(p) for p in self.allow_hosts]
            object.__setattr__(self, "allow_hosts", list(dict.fromkeys(patterns)))
        for name in ("max_bytes", "max_connections"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")


__all__ = [
    "EgressPolicy",
    "HostPatternRefused",
    "address_refusal_reason",
    "dial_address",
    "host_matches_allowlist",
    "host_name_refusal_reason",
    "normalize_host",
    "validate_host_pattern",
]
