from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from celery import shared_task
from django.conf import settings
from django.db import transaction

from toolhub.lib import environments as envlib
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
    revision = Revision.objects.filter(pk=revision_id).first()
    if revision is None or revision.status != Status.BUILDING:
        return
    log = BuildLog(revision)
    try:
        lock = _lock_for(revision, log)
        if settings.TOOLHUB_APPROVE_TRANSITIVE:
            pinned = envlib.lock_package_names(lock)
            names = {name: "" for name in pinned}
            unapproved = set(names) - set(
                Package.objects.filter(name__in=names, status=Approval.APPROVED).values_list("name", flat=True)
            )
            if unapproved:
                log("Transitive packages need approval: " + ", ".join(sorted(unapproved)))
                log.flush()
                Revision.objects.filter(pk=revision.pk).update(lock=lock)
                revision.refresh_from_db()
                revision_submit(revision=revision, extra_names=names)
                return
        revision.lock = lock
        Revision.objects.filter(pk=revision.pk).update(lock=lock, status_detail="Building the environment")
        env_dir = ensure_revision_environment(revision, log)
    except envlib.BuildFailed as exc:
        log(f"Build failed: {exc.reason}")
        log.flush()
        _fail(revision_id, exc.reason)
        return
    except Exception as exc:  # noqa: BLE001 - a build must never stay `building`
        logger.exception("build of revision %s crashed", revision_id)
        log(f"Build failed: {type(exc).__name__}")
        log.flush()
        _fail(revision_id, f"internal error during build ({type(exc).__name__}); see the worker log")
        return
    log(f"Environment ready: {env_dir.name}")
    log.flush()
    Revision.objects.filter(pk=revision.pk).update(
        environment_key=env_dir.name, status_detail="Inspecting the tools in the sandbox"
    )
    from toolhub.runs.tasks import introspect_revision

    transaction.on_commit(lambda: introspect_revision.delay(revision_id))


def _lock_for(revision: Revision, log) -> str:
    constraints = approved_constraints()
    # Identical requirements under identical constraints lock identically: reuse the lock
    # of an earlier revision rather than resolving again (pip-compile takes seconds).
    if revision.lock and revision.environment_key:
        return revision.lock
    if not revision.requirements and not constraints:
        # Nothing beyond the runtime's own needs: its committed lock is the answer.
        log("No requirements: using the runtime's own lock")
        return RUNTIME_LOCK.read_text()
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
        )


def _fail(revision_id: int, reason: str) -> None:
    revision = Revision.objects.get(pk=revision_id)
    revision.set_status(Status.FAILED, reason)
    revision.save(update_fields=["status", "status_detail", "status_changed_at"])


@shared_task
def retry_build(revision_id: int) -> None:
    revision = Revision.objects.get(pk=revision_id)
    revision_submit(revision=revision)
