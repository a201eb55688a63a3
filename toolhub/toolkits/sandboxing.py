"""Django-side glue for toolhub.sandbox: running a revision's code in the sandbox on this host
(where sources and the runtime live, the limits from settings, the egress policy from the
toolkit's grant). Used by introspection here and by the invocation engine (toolhub.runs.engine)."""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings

from toolhub.messages import Message, message
from toolhub.packages.environments import build_sandbox
from toolhub.sandbox import launcher as sandboxlib
from toolhub.sandbox import scratch
from toolhub.sandbox.egress import EgressPolicy
from toolhub.sandbox.egress.endpoint import SANDBOX_SOCKET, start_endpoint
from toolhub.sandbox.uids import UidPool
from toolhub.sandbox.warm_budget import MemoryBudget, WarmBudgetExceeded
from toolhub.sandbox.warm_pool import WarmPool
from toolhub.toolkits.models import Revision, Toolkit

logger = logging.getLogger(__name__)

RUNTIME_SRC = Path(__file__).resolve().parent.parent / "runtime"


def limits() -> sandboxlib.Limits:
    return sandboxlib.Limits(
        cpu_seconds=settings.TOOLHUB_SANDBOX_CPU_SECONDS,
        wall_seconds=settings.TOOLHUB_SANDBOX_WALL_SECONDS,
        memory_bytes=settings.TOOLHUB_SANDBOX_MEMORY_MB << 20,
        output_bytes=settings.TOOLHUB_SANDBOX_OUTPUT_MB << 20,
    )


def source_file(revision: Revision) -> Path:
    """The revision's source as a file for the launcher, which reads it and hands the bytes
    to the sandbox in a memfd. Named by its hash and written atomically, so it is written
    once per source and a half-written file is never read."""
    directory = Path(settings.DATA_DIR) / "sources"
    directory.mkdir(parents=True, exist_ok=True, mode=0o755)
    path = directory / f"{revision.sha256}.py"
    if not path.is_file():
        tmp = directory / f".{revision.sha256}.{os.getpid()}.tmp"
        tmp.write_text(revision.source, encoding="utf-8")
        os.replace(tmp, path)
    return path


def uid_pool() -> UidPool | None:
    """The host's pool of sandbox uids, or None when TOOLHUB_SANDBOX_UIDS is 0."""
    if settings.TOOLHUB_SANDBOX_UIDS <= 0:
        return None
    return UidPool(
        size=settings.TOOLHUB_SANDBOX_UIDS,
        first=settings.TOOLHUB_SANDBOX_UID_FIRST,
        lock_dir=Path(settings.TOOLHUB_SANDBOX_UID_LOCK_DIR),
    )


_runtime_copies: dict[Path, Path] = {}


def runtime_dir() -> Path:
    """The runtime's copy in the data directory. Hashing the runtime's files costs a few
    milliseconds a call, and they are this process's own code, which does not change while it
    runs: the copy's path is remembered per data directory (and made again if it went)."""
    data_dir = Path(settings.DATA_DIR)
    known = _runtime_copies.get(data_dir)
    if known is None or not known.is_dir():
        known = _runtime_copies[data_dir] = sandboxlib.ensure_runtime_copy(runtime_src=RUNTIME_SRC, data_dir=data_dir)
    return known


def warm_budget() -> MemoryBudget | None:
    """The host's memory budget for warm sandboxes, or None when TOOLHUB_SANDBOX_WARM_MEMORY_MB is 0."""
    if settings.TOOLHUB_SANDBOX_WARM_MEMORY_MB <= 0:
        return None
    return MemoryBudget(
        limit_bytes=settings.TOOLHUB_SANDBOX_WARM_MEMORY_MB << 20, directory=Path(settings.TOOLHUB_SANDBOX_WARM_BUDGET_DIR)
    )


_warm: tuple[int, WarmPool] | None = None


def warm_pool() -> WarmPool | None:
    """This worker process's warm sandboxes, or None when TOOLHUB_SANDBOX_WARM is 0.

    One pool per process (made again after a fork): a warm sandbox dies with the thread that
    started it, and serves the process that holds it alone.
    """
    global _warm
    if settings.TOOLHUB_SANDBOX_WARM <= 0:
        return None
    if _warm is None or _warm[0] != os.getpid():
        pool = WarmPool(
            size=settings.TOOLHUB_SANDBOX_WARM,
            idle_timeout=settings.TOOLHUB_SANDBOX_WARM_IDLE_SECONDS,
            max_calls=settings.TOOLHUB_SANDBOX_WARM_MAX_CALLS,
            max_age=settings.TOOLHUB_SANDBOX_WARM_MAX_AGE,
            max_idle=settings.TOOLHUB_SANDBOX_WARM_MAX_IDLE,
            bwrap=settings.TOOLHUB_BWRAP,
            sandbox_user=settings.TOOLHUB_SANDBOX_USER,
            uid_pool=uid_pool(),
            budget=warm_budget(),
        )
        pool.start_reaper()
        _warm = (os.getpid(), pool)
    return _warm[1]


@contextmanager
def warm_ahead() -> Iterator[None]:
    """While inside: this process's warm pool has the next call's process forked ahead, on an
    idle sandbox of the last call's environment and policy (WarmPool.prepare); on the way out,
    one that no call took is killed. A no-op without warm sandboxes, or with none idle for it."""
    pool = warm_pool() if _warm is not None else None
    if pool is None:
        yield
        return
    pool.prepare()
    try:
        yield
    finally:
        pool.unprepare()


def run(
    *,
    revision: Revision,
    env_dir: Path,
    request: dict,
    on_message: Callable[[dict], dict | None],
    limits_: sandboxlib.Limits | None = None,
    egress: EgressPolicy | None = None,
    warm: bool = False,
    cancel: threading.Event | None = None,
) -> sandboxlib.SandboxOutcome:
    """Run one request in a sandbox. With ``egress`` (see ``egress_policy``), through a proxy
    that applies it, bound in at ``SANDBOX_SOCKET`` and named in the request; its report is the
    outcome's ``egress``. With ``warm`` (tool calls), on a warm sandbox of this process's pool
    for the environment and that policy, when warm sandboxes are enabled."""
    if egress is not None:
        request = {**request, "egress": {"socket_path": SANDBOX_SOCKET}}
    pool = warm_pool() if warm else None
    if pool is not None:
        try:
            return pool.run(
                interpreter_env=env_dir,
                runtime_dir=runtime_dir(),
                source_path=source_file(revision),
                request=request,
                limits=limits_ or limits(),
                on_message=on_message,
                cancel=cancel,
                egress=egress,
            )
        except WarmBudgetExceeded:
            logger.info("no room in the warm sandboxes' memory budget: running cold")
    # A cold sandbox gets a proxy of its own for its one run.
    endpoint = start_endpoint(egress) if egress is not None else None
    try:
        outcome = sandboxlib.run_sandboxed(
            interpreter_env=env_dir,
            runtime_dir=runtime_dir(),
            source_path=source_file(revision),
            request=request,
            limits=limits_ or limits(),
            on_message=on_message,
            sandbox_user=settings.TOOLHUB_SANDBOX_USER,
            bwrap=settings.TOOLHUB_BWRAP,
            extra_binds=endpoint.binds() if endpoint is not None else (),
            uid_pool=uid_pool(),
            # The egress socket and its directory belong to the run's uid alone (0600 in 0700).
            owned_paths=endpoint.owned_paths if endpoint is not None else (),
            cancel=cancel,
        )
    finally:
        if endpoint is not None:
            endpoint.stop()
    if endpoint is not None:
        outcome.egress = endpoint.final_report
    return outcome


def egress_policy(toolkit: Toolkit, revision: Revision) -> EgressPolicy | None:
    """What a run of ``revision`` may reach through the egress proxy: the toolkit's grant with
    the host's caps, or None (no proxy, no network) when the toolkit has no grant, the grant
    is held, or an admin neither uploaded nor approved ``revision``. Read for every run, so a
    changed, held or revoked grant is the next run's policy (and its warm sandbox's key)."""
    if not toolkit.egress_granted or toolkit.egress_held_hosts or not revision.entrusted:
        return None
    return EgressPolicy(
        allow_hosts=list(toolkit.egress_hosts) or None,
        max_bytes=settings.TOOLHUB_EGRESS_MAX_BYTES,
        max_connections=settings.TOOLHUB_EGRESS_MAX_CONNECTIONS,
    )


def startup_check() -> None:
    """Say at worker start, not at the first invocation or build, when this host cannot
    sandbox: bubblewrap, libseccomp, the sandbox user, the build user or the uid pool missing,
    or user namespaces unavailable. Also removes the temporary directories of workers that
    died, and kills what their sandboxes left running (UidPool.sweep)."""
    scratch.sweep_dead("/tmp")
    if tempfile.gettempdir() != "/tmp":
        scratch.sweep_dead()
    try:
        sandboxlib.check_sandbox(sandbox_user=settings.TOOLHUB_SANDBOX_USER, bwrap=settings.TOOLHUB_BWRAP)
        pool = uid_pool()
        if pool is not None:
            pool.check()
            left = pool.sweep()
            if left:
                logger.warning("Killed %s process(es) left running by the sandboxes of a worker that died.", left)
    except sandboxlib.SandboxUnavailable as exc:
        logger.error("This worker cannot run toolkits: %s", exc)
    try:
        build_sandbox().check()
    except sandboxlib.SandboxUnavailable as exc:
        logger.error("This worker cannot build environments: %s", exc)


def outcome_reason(outcome: sandboxlib.SandboxOutcome) -> Message | None:
    """Why a run ended without a final message, in words for a person (None if it did not)."""
    if outcome.status == "timed_out":
        return message("sandbox.timed_out")
    if outcome.status == "limit_exceeded":
        return message("sandbox.limit", limit=str(outcome.limit))
    if outcome.status == "crashed":
        return message("sandbox.crashed", code=str(outcome.exit_code))
    return None
