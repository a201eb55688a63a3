"""Warming at worker start: each worker process starts, ahead of need, a warm sandbox for each
environment that recent invocations ran in (the TOOLHUB_SANDBOX_WARM_START most used over the
last TOOLHUB_SANDBOX_WARM_HISTORY_SECONDS), so the first calls after a (re)start do not pay
for one. Only environments this host has built already; toolkits with an egress grant run cold
and are left out. toolhub.celery calls it in every new pool process."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import Count
from django.utils import timezone

from toolhub.packages.environments import environment_existing
from toolhub.runs.models import Invocation
from toolhub.sandbox.limits import SandboxUnavailable
from toolhub.toolkits import sandboxing
from toolhub.toolkits.models import Revision

logger = logging.getLogger(__name__)


def warm_from_history() -> int:
    """Warm this process's pool from the recent invocations; returns for how many environments a
    sandbox is warm now."""
    pool = sandboxing.warm_pool()
    wanted = settings.TOOLHUB_SANDBOX_WARM_START
    if pool is None or wanted <= 0:
        return 0
    since = timezone.now() - timedelta(seconds=settings.TOOLHUB_SANDBOX_WARM_HISTORY_SECONDS)
    busiest = list(
        Invocation.objects.filter(created_at__gte=since, toolkit__egress_granted=False)
        .values_list("revision")
        .annotate(calls=Count("id"))
        .order_by("-calls")[: 10 * wanted]
    )
    locks = Revision.objects.only("lock").in_bulk([revision for revision, _calls in busiest])
    environments = []
    for revision, _calls in busiest:
        found = environment_existing(lock=locks[revision].lock) if revision in locks else None
        if found is not None and found not in environments:
            environments.append(found)
    warmed = 0
    for env_dir in environments[:wanted]:
        try:
            pool.warm(interpreter_env=env_dir, runtime_dir=sandboxing.runtime_dir(), limits=sandboxing.limits())
        except SandboxUnavailable as exc:
            # The memory budget is full, or the host cannot sandbox (the start-up check says so).
            logger.warning("stopped warming sandboxes from the recent history: %s", exc)
            break
        warmed += 1
    return warmed
