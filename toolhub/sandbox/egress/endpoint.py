"""The egress proxy as one sandbox sees it: a proxy on a UNIX socket in a directory of its own,
bound into the sandbox at ``SANDBOX_SOCKET``, for as long as that sandbox lives (one run of a
cold sandbox, every call of a warm one).

The directory is 0700 and the socket 0600, and both are handed to the sandbox's uid
(``hand_to``) before the sandbox starts: no other local account can list the directory or
connect. Django-free, like the rest of ``toolhub.sandbox``.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from toolhub.sandbox import scratch
from toolhub.sandbox.egress.proxy import ProxyHandle, run_proxy_in_thread
from toolhub.sandbox.egress.rules import EgressPolicy

SANDBOX_SOCKET = "/run/egress.sock"
# urllib and aiohttp verify HTTPS against the system store.
_CERTIFICATES = Path("/etc/ssl/certs")

# What decides everything the proxy lets through: the allowlist (None: every public host) and
# the byte and connection caps. Sandboxes whose policies have the same key are interchangeable.
PolicyKey = tuple[tuple[str, ...] | None, int, int]


def policy_key(policy: EgressPolicy) -> PolicyKey:
    hosts = None if policy.allow_hosts is None else tuple(policy.allow_hosts)
    return (hosts, policy.max_bytes, policy.max_connections)


@dataclass
class EgressEndpoint:
    """A running proxy and its private directory; ``stop`` removes both."""

    policy: EgressPolicy
    directory: Path
    handle: ProxyHandle
    # The report the proxy had when it stopped (what it counted since the last ended call).
    final_report: dict[str, object] | None = field(default=None)

    @property
    def socket_path(self) -> Path:
        return self.directory / "egress.sock"

    @property
    def owned_paths(self) -> list[Path]:
        """What the sandbox's uid is to own: the directory and the socket."""
        return [self.directory, self.socket_path]

    def binds(self) -> list[tuple[Path, str]]:
        """``(host path, sandbox path)`` pairs to bind read-only into the sandbox."""
        binds = [(self.socket_path, SANDBOX_SOCKET)]
        if _CERTIFICATES.is_dir():
            binds.append((_CERTIFICATES, str(_CERTIFICATES)))
        return binds

    def hand_to(self, uid: int, gid: int) -> None:
        for path in self.owned_paths:
            os.chown(path, uid, gid, follow_symlinks=False)

    def alive(self) -> bool:
        return self.final_report is None and self.handle.alive()

    def stop(self) -> dict[str, object]:
        if self.final_report is None:
            self.final_report = self.handle.stop()
            shutil.rmtree(self.directory, ignore_errors=True)
        return self.final_report


def start_endpoint(policy: EgressPolicy, parent: str | Path = "/tmp") -> EgressEndpoint:
    """Start a proxy for ``policy`` in a new private directory under ``parent`` (short: UNIX
    socket paths are limited to about 107 bytes). Named after this process, so a worker that
    starts removes those of workers that died (``scratch.sweep_dead``)."""
    directory = scratch.make_dir(scratch.EGRESS, parent)
    directory.chmod(0o700)
    try:
        handle = run_proxy_in_thread(policy, directory / "egress.sock", socket_mode=0o600)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return EgressEndpoint(policy=policy, directory=directory, handle=handle)
