"""The worker's steps of a revision's lifecycle: build its environment (lock, then virtualenv)
and inspect its tools in the sandbox. Each step reports through toolhub.toolkits.lifecycle,
which owns the revision's status; toolhub.toolkits.tasks only hands ids to these functions."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from toolhub.messages import as_written, message
from toolhub.packages import envbuild as envlib
from toolhub.packages import services as packages
from toolhub.packages.environments import (
    environment_ensure,
    environment_packages,
    lock_compile,
    lock_prefix,
    runtime_lock,
)
from toolhub.sandbox import launcher as sandboxlib
from toolhub.toolkits import lifecycle, sandboxing
from toolhub.toolkits.introspection_checks import IntrospectionRefused, check_introspection
from toolhub.toolkits.models import Revision, Status

logger = logging.getLogger(__name__)

Log = Callable[[str], None]


class BuildLog:
    """Collects build output and writes it to the revision at most a few times a second,
    so the Environment tab can show it while the build runs."""

    def __init__(self, revision: Revision, interval: float = 0.5) -> None:
        self.revision_id = revision.pk
        self.lines: list[str] = [revision.build_log] if revision.build_log else []
        self.interval = interval
        self._flushed = 0.0

    def __call__(self, line: str) -> None:
        self.lines.append(line.rstrip("\n"))
        # A command line ("$ uv pip install ...") starts a step that may stay silent for
        # minutes, so it is written at once: the tab then shows what the build is doing.
        if line.startswith("$ ") or time.monotonic() - self._flushed > self.interval:
            self.flush()

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def flush(self) -> None:
        self._flushed = time.monotonic()
        Revision.objects.filter(pk=self.revision_id).update(build_log=self.text[-200_000:])


def revision_environment(revision: Revision, log: Log | None = None, *, total_seconds: float | None = None) -> Path:
    """Build (or reuse) the environment for a revision's stored lock on this host."""
    return environment_ensure(lock=revision.lock, log=log, total_seconds=total_seconds)


def lock_for(revision: Revision, log: Log) -> str:
    constraints = packages.approved_constraints()
    # Identical requirements under identical constraints lock identically: reuse the lock
    # of an earlier revision rather than resolving again (pip-compile takes seconds).
    if revision.lock and revision.environment_key:
        return revision.lock
    extra = environment_packages()
    texts = _build_requirements(revision, log)
    if not texts and not constraints and not extra:
        # Nothing beyond the runtime's own needs: its committed lock is the answer.
        log("No requirements: using the runtime's own lock")
        return runtime_lock()
    # Only a lock resolved for this interpreter's Python release can be reused.
    twin = (
        Revision.objects.filter(requirements=revision.requirements, status=Status.READY, lock__startswith=lock_prefix())
        .exclude(lock="")
        .exclude(pk=revision.pk)
        .order_by("-pk")
        .first()
    )
    # A lock holds TOOLHUB_ENVIRONMENT_PACKAGES too, which may have changed since the twin's;
    # and what it holds of the optional packages depends on when it was built.
    optional = any(r.get("optional") for r in revision.requirements)
    if twin is not None and not constraints and not extra and not optional:
        log(f"Reusing the lock of {twin.toolkit_id}#{twin.number} (same requirements)")
        return twin.lock
    return lock_compile(requirements=texts, constraints=constraints, log=log)


def _build_requirements(revision: Revision, log: Log) -> list[str]:
    """The requirements a build installs: all but the optional packages no admin approved
    (the toolkit imports those under `try`/`except ImportError` and loads without them)."""
    optional = [r["name"] for r in revision.requirements if r.get("optional")]
    approved = set(optional) - packages.unapproved_names(optional)
    left_out = sorted(set(optional) - approved)
    if left_out:
        log("Optional packages not approved, left out: " + ", ".join(left_out))
    return [r["text"] for r in revision.requirements if not r.get("optional") or r["name"] in approved]


def build(revision_id: int) -> None:
    """Lock a revision's requirements and build (or reuse) its environment; introspection
    follows on the sandbox queue."""
    if not lifecycle.build_claim(revision_id=revision_id):
        return
    with lifecycle.step_heartbeat(revision_id):
        _build(revision_id)


def _build(revision_id: int) -> None:
    revision = Revision.objects.get(pk=revision_id)
    log = BuildLog(revision)
    # One budget for the whole build (lock and environment), as TOOLHUB_BUILD_TIMEOUT says.
    deadline = time.monotonic() + settings.TOOLHUB_BUILD_TIMEOUT
    try:
        lock = lock_for(revision, log)
        if settings.TOOLHUB_APPROVE_TRANSITIVE:
            pins = envlib.lock_pins(lock)
            unapproved = packages.unapproved_names(pins)
            if unapproved:
                log("Transitive packages need approval: " + ", ".join(sorted(unapproved)))
                log.flush()
                lifecycle.build_needs_approval(revision=revision, lock=lock, pins=pins)
                return
        revision.lock = lock
        lifecycle.build_progress(revision_id=revision_id, detail=message("build.environment"), lock=lock)
        env_dir = revision_environment(revision, log, total_seconds=max(1.0, deadline - time.monotonic()))
    except envlib.SourceBuildRefused as exc:
        log(f"Build failed: {exc.reason}")
        log.flush()
        lifecycle.build_needs_source(revision_id=revision_id, name=exc.name, reason=exc.message)
        return
    except sandboxlib.SandboxUnavailable as exc:
        # No build sandbox on this host (bubblewrap or the build user missing): say so.
        log(f"Build failed: {exc}")
        log.flush()
        lifecycle.fail(revision_id=revision_id, reason=as_written(f"the build sandbox is unavailable: {exc}"))
        return
    except envlib.BuildFailed as exc:
        reason = exc.message
        if time.monotonic() >= deadline:
            # The environment step only had what the lock left of the budget; name the
            # setting's whole budget rather than that remainder.
            reason = message("build.timed_out", seconds=float(settings.TOOLHUB_BUILD_TIMEOUT))
        log(f"Build failed: {reason.english()}")
        log.flush()
        lifecycle.fail(revision_id=revision_id, reason=reason)
        return
    except Exception as exc:  # noqa: BLE001 - a build must never stay `building`
        logger.exception("build of revision %s crashed", revision_id)
        log(f"Build failed: {type(exc).__name__}")
        log.flush()
        lifecycle.fail(revision_id=revision_id, reason=message("build.internal_error", error=type(exc).__name__))
        return
    log(f"Environment ready: {env_dir.name}")
    log.flush()
    lifecycle.built(revision_id=revision_id, environment_key=env_dir.name)


def introspect(revision_id: int) -> None:
    """Load the toolkit in the sandbox and read its tool specs and valve schemas."""
    if not lifecycle.introspect_claim(revision_id=revision_id):
        return
    with lifecycle.step_heartbeat(revision_id):
        _introspect(Revision.objects.get(pk=revision_id))


def _introspect(revision: Revision) -> None:
    revision_id = revision.pk
    try:
        env_dir = revision_environment(revision)
        outcome = sandboxing.run(
            revision=revision, env_dir=env_dir, request={"op": "introspect", "source_path": "/opt/toolkit/toolkit.py"},
            on_message=lambda message: None,
        )
        final = outcome.final or {}
    except (envlib.BuildFailed, sandboxlib.SandboxUnavailable) as exc:
        reason = exc.message if isinstance(exc, envlib.BuildFailed) else as_written(str(exc))
        lifecycle.fail(revision_id=revision_id, reason=reason, traceback="")
        return
    except Exception as exc:  # noqa: BLE001 - a revision must never stay `building`
        logger.exception("introspection of revision %s crashed in the worker", revision_id)
        reason = message("introspection.internal_error", error=type(exc).__name__)
        lifecycle.fail(revision_id=revision_id, reason=reason, traceback="")
        return
    if final.get("kind") != "introspection":
        # The toolkit's own error as it wrote it, else why the sandbox ended it.
        error = (as_written(str(final["error"])) if final.get("error") else None) or sandboxing.outcome_reason(outcome)
        lifecycle.fail(revision_id=revision_id, reason=message("introspection.load_failed", error=error or message("sandbox.not_loaded")),
                       traceback=final.get("traceback", outcome.stderr_tail) or "")
        return
    try:
        check_introspection(final, kind=revision.kind, tool_names=list(revision.tool_names))
    except IntrospectionRefused as exc:
        lifecycle.fail(revision_id=revision_id, reason=message("introspection.refused", error=str(exc)), traceback="")
        return
    lifecycle.ready(
        revision=revision,
        tools=final.get("tools") or [],
        valves_schema=final.get("valves_schema"),
        user_valves_schema=final.get("user_valves_schema"),
        plugin_metadata=final.get("ragflow"),
    )
