"""Warming at worker start: each worker process starts, ahead of need, a warm sandbox for each
environment and egress policy that recent invocations ran with (the TOOLHUB_SANDBOX_WARM_START
most used over the last TOOLHUB_SANDBOX_WARM_HISTORY_SECONDS), so the first calls after a
(re)start do not pay for one. Only environments this host has built already. The policy is read
from the toolkit's grant as it is now (``sandboxing.egress_policy``, as a run would): a grant
revoked, held or changed since, or a revision no admin entrusted, warms the sandbox the next run
will get, never one for the old grant. toolhub.celery calls it in every new pool process."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db.models import Count
from django.utils import timezone

from toolhub.packages.environments import environment_existing
from toolhub.runs.models import Invocation
from toolhub.sandbox.egress import EgressPolicy
from toolhub.sandbox.limits import SandboxUnavailable
from toolhub.toolkits import sandboxing
from toolhub.toolkits.models import Revision

logger = logging.getLogger(__name__)


def warm_from_history() -> int:
    """Warm this process's pool from the recent invocations; returns for how many environments
    and policies a sandbox is warm now."""
    pool = sandboxing.warm_pool()
    wanted = settings.TOOLHUB_SANDBOX_WARM_START
    if pool is None or wanted <= 0:
        return 0
    since = timezone.now() - timedelta(seconds=settings.TOOLHUB_SANDBOX_WARM_HISTORY_SECONDS)
    busiest = list(
        Invocation.objects.filter(created_at__gte=since)
        .values_list("revision")
        .annotate(calls=Count("id"))
        .order_by("-calls")[: 10 * wanted]
    )
    # The lock, and what decides the egress policy (the toolkit's grant, who uploaded the
    # revision and its review), not the sources.
    revisions = (
        Revision.objects.select_related("toolkit", "uploaded_by")
        .only("lock", "review", "toolkit", "uploaded_by")
        .in_bulk([revision for revision, _calls in busiest])
    )
    wanted_sandboxes: list[tuple[Path, EgressPolicy | None]] = []
    for revision_id, _calls in busiest:
        revision = revisions.get(revision_id)
        found = environment_existing(lock=revision.lock) if revision is not None else None
        if found is None or revision is None:
            continue
        entry = (found, sandboxing.egress_policy(revision.toolkit, revision))
        if entry not in wanted_sandboxes:
            wanted_sandboxes.append(entry)
    warmed = 0
    for env_dir, egress in wanted_sandboxes[:wanted]:
        try:
            pool.warm(
                interpreter_env=env_dir, runtime_dir=sandboxing.runtime_dir(), limits=sandboxing.limits(), egress=egress
            )
        except SandboxUnavailable as exc:
            # The memory budget is full, or the host cannot sandbox (the start-up check says so).
            logger.warning("stopped warming sandboxes from the recent history: %s", exc)
            break
        warmed += 1
    return warmed
