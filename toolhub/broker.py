"""Publishing Celery tasks so that a broker outage is noticed at once: the caller answers 503
(or the reaper tries again on its next pass) instead of waiting on kombu's own retries."""

from __future__ import annotations

from celery import current_app


def send(task_name: str, *args: object) -> None:
    """Publish a task by name (routed by settings.CELERY_TASK_ROUTES). Raises kombu's
    OperationalError (or OSError) when the broker cannot be reached.

    Left to itself, kombu retries a new broker connection for about six seconds before it
    gives up, and an API caller waits all that time for its 503. One quick retry is enough to
    ride out a broker that just restarted."""
    # kombu's pool hands out Connections (its stubs say Producer).
    with current_app.pool.acquire(block=True) as connection:
        connection.ensure_connection(  # type: ignore[attr-defined]
            max_retries=1, interval_start=0, interval_step=0.2, interval_max=0.2
        )
        current_app.send_task(task_name, args=list(args), retry=False, connection=connection)  # type: ignore[arg-type]
