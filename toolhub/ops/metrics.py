"""Prometheus metrics, read from the database when they are scraped.

ToolHub runs as several processes (web servers, workers, perhaps on several hosts), and the
database is the one place that sees all their work: counting its rows at scrape time is correct
whichever process is scraped, needs no shared metrics directory, and survives restarts. A
scrape costs four queries (pinned by the tests) however much data there is, plus one broker
round trip for the queues' lengths and a look at this host's warm sandboxes' budget files.

Counts that only grow (finished invocations and agent runs) are counters; the rest (work in
progress, revisions by state, queue lengths, warm sandboxes) are gauges."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from toolhub.agents.models import AgentRun, AgentRunStatus
from toolhub.ops.health import WORK_QUEUES, broker_connection
from toolhub.runs.models import FINISHED, Invocation, RunStatus
from toolhub.toolkits.models import Revision
from toolhub.toolkits.sandboxing import warm_budget

logger = logging.getLogger(__name__)

# Seconds: from a warm echo (milliseconds) to the sandbox's wall-clock limit and beyond.
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
AGENT_FINISHED = {AgentRunStatus.SUCCEEDED, AgentRunStatus.FAILED}


def _invocation_metrics() -> Iterator[Metric]:
    calls = CounterMetricFamily(
        "toolhub_invocations", "Finished tool invocations by toolkit, tool, surface and outcome.",
        labels=["toolkit", "tool", "surface", "outcome"],
    )
    active = GaugeMetricFamily(
        "toolhub_invocations_in_progress", "Invocations queued, running or awaiting input.", labels=["status"]
    )
    in_progress = dict.fromkeys((s for s in RunStatus.values if s not in FINISHED), 0)
    rows = (
        Invocation.objects.order_by().values("toolkit__slug", "tool", "surface", "status")
        .annotate(n=Count("pk")).order_by("-n")[: settings.TOOLHUB_METRICS_MAX_SERIES]
    )
    for row in rows:
        if row["status"] in FINISHED:
            calls.add_metric([row["toolkit__slug"], row["tool"], row["surface"], row["status"]], row["n"])
        else:
            in_progress[row["status"]] = in_progress.get(row["status"], 0) + row["n"]
    for status, count in in_progress.items():
        active.add_metric([status], count)
    yield calls
    yield active


def _duration_metrics() -> Iterator[Metric]:
    """One histogram per surface of the finished invocations' run time (started to finished),
    every bucket counted by the database in one pass."""
    duration = ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())
    buckets = {f"le_{i}": Count("pk", filter=Q(duration__lte=timedelta(seconds=b))) for i, b in enumerate(DURATION_BUCKETS)}
    rows = (
        Invocation.objects.order_by().filter(status__in=FINISHED, started_at__isnull=False, finished_at__isnull=False)
        .annotate(duration=duration).values("surface").annotate(total=Count("pk"), seconds=Sum("duration"), **buckets)
    )
    histogram = HistogramMetricFamily(
        "toolhub_invocation_duration_seconds", "Run time of finished invocations (started to finished).", labels=["surface"]
    )
    row: dict[str, Any]
    for row in rows:  # type: ignore[assignment]  # a TypedDict without the bucket keys
        cumulative = [(str(b), row[f"le_{i}"]) for i, b in enumerate(DURATION_BUCKETS)]
        cumulative.append(("+Inf", row["total"]))
        seconds = row["seconds"].total_seconds() if row["seconds"] else 0.0
        histogram.add_metric([row["surface"]], cumulative, seconds)
    yield histogram


def _revision_metrics() -> Iterator[Metric]:
    gauge = GaugeMetricFamily(
        "toolhub_revisions", "Toolkit revisions by state (builds in progress are 'building').", labels=["status"]
    )
    for row in Revision.objects.order_by().values("status").annotate(n=Count("pk")):
        gauge.add_metric([row["status"]], row["n"])
    yield gauge


def _agent_run_metrics() -> Iterator[Metric]:
    finished = CounterMetricFamily("toolhub_agent_runs", "Finished agent runs by outcome.", labels=["outcome"])
    active = GaugeMetricFamily("toolhub_agent_runs_in_progress", "Agent runs queued or running.", labels=["status"])
    counts = dict.fromkeys(AgentRunStatus.values, 0)
    for row in AgentRun.objects.order_by().values("status").annotate(n=Count("pk")):
        counts[row["status"]] = row["n"]
    for status, count in counts.items():
        (finished if status in AGENT_FINISHED else active).add_metric([status], count)
    yield finished
    yield active


def _queue_metrics() -> Iterator[Metric]:
    """Messages waiting on each work queue, as the broker counts them; `toolhub_broker_up` is 0
    (and the lengths are left out) when the broker cannot be reached."""
    up = GaugeMetricFamily("toolhub_broker_up", "1 when the broker answered this scrape.")
    lengths = GaugeMetricFamily("toolhub_queue_messages", "Messages waiting on a work queue.", labels=["queue"])
    try:
        with broker_connection() as conn:
            channel = conn.default_channel
            for queue in WORK_QUEUES:
                # kombu's virtual transports (Redis, the filesystem) count a queue with
                # `_size`; a passive declare fails for a queue nobody has used yet.
                lengths.add_metric([queue], channel._size(queue))
    except Exception as exc:  # noqa: BLE001 - kombu raises its own, redis-py's and OSError
        logger.warning("metrics: the broker did not answer: %s", type(exc).__name__)
        up.add_metric([], 0)
        yield up
        return
    up.add_metric([], 1)
    yield up
    yield lengths


def _warm_metrics() -> Iterator[Metric]:
    """This host's warm sandboxes (all its workers'), from the shared memory budget's files;
    nothing when warm sandboxes are off or this process may not read the budget."""
    budget = warm_budget()
    if budget is None:
        return
    try:
        count, used = budget.usage()
    except OSError:
        return
    sandboxes = GaugeMetricFamily("toolhub_warm_sandboxes", "Warm sandboxes alive on this host.")
    sandboxes.add_metric([], count)
    memory = GaugeMetricFamily("toolhub_warm_sandbox_memory_bytes", "Memory the warm sandboxes of this host hold.")
    memory.add_metric([], used)
    yield sandboxes
    yield memory


class DatabaseCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield from _invocation_metrics()
        yield from _duration_metrics()
        yield from _revision_metrics()
        yield from _agent_run_metrics()
        yield from _queue_metrics()
        yield from _warm_metrics()


def registry() -> CollectorRegistry:
    """A registry of its own per scrape: nothing is kept in the process between scrapes."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    return registry
