"""The usage rollup's task, on the `maintenance` queue every TOOLHUB_USAGE_FOLD_EVERY_SECONDS."""

from __future__ import annotations

from celery import shared_task

from toolhub.usage import services


@shared_task
def fold_usage() -> dict:
    fold = services.usage_fold()
    return {"start": fold.start.isoformat(), "stop": fold.stop.isoformat(), "rows": fold.rows, "caught_up": fold.caught_up}
