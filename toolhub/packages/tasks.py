from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from pathlib import Path

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from toolhub.packages import envbuild as envlib
from toolhub.packages.environments import BuildLog, ensure_revision_environment, index_settings, timeouts
from toolhub.packages.models import Approval, Package
from toolhub.packages.services import approved_constraints, revision_submit
from toolhub.toolkits.models import Revision, Status

logger = logging.getLogger(__name__)

RUNTIME_LOCK = Path(__file__).resolve().parent.parent / "runtime" / "requirements.txt"


@shared_task(acks_late=True)
def build_revision(revision_id: int) -> None:
    """Lock a revision's requirements, build (or reuse) its environment, then hand it to
    the sandbox queue for introspection."""
    # The reaper measures a build from its last change of state; a build that waited long in
    # the queue starts its clock now, not when it was queued.
    claimed = Revision.objects.filter(pk=revision_id, status=Status.BUILDING).update(
        status_changed_at=timezone.now(), status_detail="Locking the requirements"
    )
    if not claimed:
        return
    revision = Revision.objects.get(pk=revision_id)
    log = BuildLog(revision)
    # One budget for the whole build (lock and environment), as TOOLHUB_BUILD_TIMEOUT says.
    deadline = time.monotonic() + settings.TOOLHUB_BUILD_TIMEOUT
    try:
        lock = _lock_for(revision, log)
        if settings.TOOLHUB_APPROVE_TRANSITIVE:
            pins = _pins(lock)
            unapproved = set(pins) - set(
                Package.objects.filter(name__in=pins, status=Approval.APPROVED).values_list("name", flat=True)
            )
            if unapproved:
                log("Transitive packages need approval: " + ", ".join(sorted(unapproved)))
                log.flush()
                Revision.objects.filter(pk=revision.pk).update(lock=lock)
                revision.refresh_from_db()
                revision_submit(revision=revision, extra_names=pins)
                return
        revision.lock = lock
        Revision.objects.filter(pk=revision.pk).update(lock=lock, status_detail="Building the environment")
        env_dir = ensure_revision_environment(
            revision, log, total_seconds=max(1.0, deadline - time.monotonic())
        )
    except envlib.BuildFailed as exc:
        reason = exc.reason
        if time.monotonic() >= deadline:
            # The environment step only had what the lock left of the budget; name the
            # setting's whole budget rather than that remainder.
            reason = f"build timed out after {settings.TOOLHUB_BUILD_TIMEOUT:g} s"
        log(f"Build failed: {reason}")
        log.flush()
        _fail(revision_id, reason)
        return
    except Exception as exc:  # noqa: BLE001 - a build must never stay `building`
        logger.exception("build of revision %s crashed", revision_id)
        log(f"Build failed: {type(exc).__name__}")
        log.flush()
        _fail(revision_id, f"internal error during build ({type(exc).__name__}); see the worker log")
        return
    log(f"Environment ready: {env_dir.name}")
    log.flush()
    # A fresh clock for introspection too: it may wait behind invocations on the sandbox queue.
    Revision.objects.filter(pk=revision.pk).update(
        environment_key=env_dir.name,
        status_detail="Inspecting the tools in the sandbox",
        status_changed_at=timezone.now(),
    )
    from toolhub.runs.tasks import introspect_revision

    transaction.on_commit(lambda: introspect_revision.delay(revision_id))


def _pins(lock: str) -> dict[str, str]:
    """The names a lock pins, each with its specifier (`==1.2.3`, shown in the queue)."""
    pins: dict[str, str] = {}
    for line in lock.splitlines():
        # Hash and comment lines are indented or start with "#"; options start with "-".
        if not line or line[0] in " \t#-":
            continue
        with contextlib.suppress(InvalidRequirement):
            requirement = Requirement(line.rstrip().removesuffix("\\").strip())
            pins[canonicalize_name(requirement.name)] = str(requirement.specifier)
    return pins


def _runtime_lock() -> str:
    # The committed lock carries the index options of the machine that compiled it. A stored
    # lock must mean the same thing on every host (its hash names the environment), so only
    # its pins and hashes are kept; the index comes from this host's settings.
    lines = RUNTIME_LOCK.read_text().splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("-"))


def _lock_for(revision: Revision, log) -> str:
    constraints = approved_constraints()
    # Identical requirements under identical constraints lock identically: reuse the lock
    # of an earlier revision rather than resolving again (pip-compile takes seconds).
    if revision.lock and revision.environment_key:
        return revision.lock
    if not revision.requirements and not constraints:
        # Nothing beyond the runtime's own needs: its committed lock is the answer.
        log("No requirements: using the runtime's own lock")
        return _runtime_lock()
    twin = (
        Revision.objects.filter(requirements=revision.requirements, status=Status.READY)
        .exclude(lock="")
        .exclude(pk=revision.pk)
        .order_by("-pk")
        .first()
    )
    if twin is not None and not constraints:
        log(f"Reusing the lock of {twin.toolkit_id}#{twin.number} (same requirements)")
        return twin.lock
    with tempfile.TemporaryDirectory(prefix="toolhub-lock-") as workdir:
        return envlib.compile_lock(
            requirements=revision.requirement_texts,
            constraints=constraints,
            index=index_settings(),
            log=log,
            timeouts=timeouts(),
            workdir=Path(workdir),
            cache_dir=Path(settings.DATA_DIR) / "cache" / "pip",
        )


def _fail(revision_id: int, reason: str) -> None:
    revision = Revision.objects.get(pk=revision_id)
    revision.set_status(Status.FAILED, reason)
    revision.save(update_fields=["status", "status_detail", "status_changed_at"])
