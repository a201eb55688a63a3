"""The lifecycle of a toolkit's revision: the only code that writes `Revision.status` or
makes a revision its toolkit's current one.

    uploaded ─submit─> awaiting_approval ─(packages approved)─> building ─> ready
                  │          │                                   │  (lock, environment,
                  │          └─(a package rejected)─> rejected    │   then introspection)
                  └─(nothing to approve)─────────> building       ├─> failed
                                                                  └─> awaiting_review ─(approved)─> ready
                                                                            └─(rejected)─> rejected

Tool tests (docs/tool-tests.md): when the toolkit has saved tests, introspection is followed by
a third step of `building`, "Running its N tests" (queue `sandbox`, a ToolTestRun with
gate=True); passing goes on as above, failing holds the revision in `awaiting_review` with the
failed cases named, where an admin may still approve it with a reason (recorded on the run).

`awaiting_review`: introspected (which hands the code no Valves and no network), but uploaded
by someone who is not an admin to a toolkit that holds secret Valves an admin set or an
egress grant. It cannot become current until an admin approves it (`review_decide`); the
current revision keeps serving meanwhile, and a rejection keeps it. Runs check the same rule
again when they hand out Valves and the grant (Revision.entrusted).

`building` has two steps that `status_detail` tells apart: the build (queue `builds`: lock and
environment) and introspection (queue `sandbox`: the toolkit loaded in the sandbox, its specs
and valve schemas read). A revision becomes current when it is ready and newer than the
current one, or at once when the current one is not ready: a failed build of a new revision
never takes down the revision that was ready before it. Rollback makes any revision current.

Views, the API, commands and the worker's steps (toolhub.toolkits.building) call these
functions; tasks are queued with `transaction.on_commit`, so a worker never sees a revision
in a state that was not committed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError

from toolhub import broker, dbretry, heartbeat
from toolhub.heartbeat import Beat
from toolhub.messages import Message, joined, message
from toolhub.packages import index_checks
from toolhub.packages import services as packages
from toolhub.packages.models import Approval, Package, PackageRequest
from toolhub.toolkits.models import (
    Review,
    Revision,
    Status,
    Toolkit,
    ToolTest,
    ToolTestRun,
    ToolTestStatus,
    status_fields,
)
from toolhub.toolkits.valves import admin_secrets_set

# Where a revision can be submitted again from (the Retry button).
RETRYABLE = (Status.FAILED, Status.REJECTED, Status.AWAITING_APPROVAL)

# The worker's steps, by the names toolhub.toolkits.tasks registers them under. Queued by
# name: the tasks call this module, so it must not import them.
BUILD_TASK = "toolhub.toolkits.tasks.build_revision"
INTROSPECT_TASK = "toolhub.toolkits.tasks.introspect_revision"
# Registered by toolhub.runs.tasks: running a tool needs the invocation engine.
TEST_TASK = "toolhub.runs.tasks.revision_tests"


logger = logging.getLogger(__name__)

# Status details (toolhub.messages), stored with their English text.
QUEUE_FAILED = message("build.queue_failed")
INTERRUPTED = message("build.interrupted")
OVERDUE = message("build.overdue")
# Why a gate run of an earlier attempt ended (ToolTestRun.error_message).
TESTS_REPLACED = message("tests.replaced")



class QueueUnavailable(Exception):
    """A change was committed but its task could not be queued: the request answers 503,
    and the revision is failed so that Retry works at once (it never sits "Queued")."""


def enqueue(task_name: str, revision_id: int) -> None:
    """Queue a step for a revision once the current transaction commits."""

    def send() -> None:
        try:
            broker.send(task_name, revision_id)
        except (BrokerError, OSError) as exc:
            logger.error("could not queue %s for revision %s: %s", task_name, revision_id, exc)
            Revision.objects.filter(pk=revision_id, status=Status.BUILDING).update(
                status=Status.FAILED, **status_fields(QUEUE_FAILED), status_changed_at=timezone.now()
            )
            raise QueueUnavailable(QUEUE_FAILED.english()) from exc

    transaction.on_commit(send)


def queue_step(task_name: str, revision_id: int) -> None:
    """The revision's next step waits for a worker: recorded for the reaper, then queued."""
    Revision.objects.filter(pk=revision_id).update(
        task_name=task_name, task_sent_at=timezone.now(), task_sends=1, heartbeat_at=None
    )
    enqueue(task_name, revision_id)


def _set(revision: Revision, status: str, detail: Message | None = None, *fields: str) -> None:
    revision.set_status(status, detail)
    revision.save(update_fields=["status", "status_detail", "status_message", "status_changed_at", *fields])


# ------------------------------------------------------------------------------------------
# From upload to `building`


def submit(*, revision: Revision, extra_names: dict[str, str] | None = None) -> None:
    """Record which packages a revision asks for and move it to `awaiting_approval`,
    `rejected` or `building` (then queue its build once the transaction commits).
    `extra_names` are transitive names found in its lock (name -> pinned specifier)."""
    wanted = {r["name"]: r["specifier"] for r in revision.requirements}
    inferred = {r["name"]: (r["inferred"]["module"], r["inferred"]["line"]) for r in revision.requirements if r.get("inferred")}
    optional = [r["name"] for r in revision.requirements if r.get("optional")]
    with transaction.atomic():
        packages.requests_record(
            revision_id=revision.pk, wanted=wanted, transitive=extra_names or {}, inferred=inferred, optional=optional
        )
        evaluate(revision=revision)
        # So that the approval queue already knows what the index says when an admin opens it.
        index_checks.queue_checks_for([*wanted, *(extra_names or {})])


def evaluate(*, revision: Revision) -> None:
    """Move a revision on from what admins decided about its packages."""
    if revision.review == Review.REJECTED:
        # Rejected in review: final for this revision (its author uploads a new one).
        return
    rejected, pending = packages.request_decisions(revision_id=revision.pk)
    if rejected:
        detail = joined([
            message("package.rejected_because", name=n, reason=reason) if reason else message("package.rejected", name=n)
            for n, reason in rejected
        ])
        _set(revision, Status.REJECTED, detail)
    elif pending:
        _set(revision, Status.AWAITING_APPROVAL, message("approval.waiting", names=", ".join(pending)))
    else:
        revision.build_log = ""
        _set(revision, Status.BUILDING, message("build.queued"), "build_log")
        queue_step(BUILD_TASK, revision.pk)


def retry(*, revision_id: int) -> Revision | None:
    """Submit a failed, rejected or waiting revision again from scratch (a new lock). Returns
    None when the revision is in no state to retry; locked and checked again, so a double
    click queues one build, not two."""
    with transaction.atomic():
        revision = Revision.objects.select_for_update().filter(pk=revision_id).first()
        # A revision rejected in review stays rejected: its author uploads a new one.
        if revision is None or revision.status not in RETRYABLE or revision.review == Review.REJECTED:
            return None
        revision.lock = ""
        revision.environment_key = ""
        revision.traceback = ""
        revision.save(update_fields=["lock", "environment_key", "traceback"])
        submit(revision=revision)
    return revision


# ------------------------------------------------------------------------------------------
# Package decisions


def packages_decide(
    *, names: Iterable[str], status: str, user: User, constraint: str = "", reason: str = "", source_build: bool = False
) -> list[Package]:
    """Record one decision for each name, then move every revision that waited on them.
    All or nothing: a bulk decision is one transaction."""
    with transaction.atomic():
        # Packages first, in name order, then revisions in id order: two decisions that
        # overlap lock rows in the same order and so cannot deadlock.
        decided = packages.decisions_record(
            names=names, status=status, user=user, constraint=constraint, reason=reason, source_build=source_build
        )
        waiting = (
            Revision.objects.select_for_update()
            .filter(
                pk__in=PackageRequest.objects.filter(package__in=decided).values("revision_id"),
                status__in=[Status.AWAITING_APPROVAL, Status.REJECTED],
            )
            .order_by("pk")
        )
        for revision in waiting:
            evaluate(revision=revision)
    return decided


def import_remap(*, module: str, distribution: str, user: User) -> int:
    """An admin says `import <module>` comes from `distribution`: remembered for every later
    upload, and each waiting or rejected revision that inferred another name for that import
    asks for the new one instead (and is evaluated again). Returns how many did."""
    with transaction.atomic():
        name = packages.mapping_record(module=module, distribution=distribution, user=user)
        asked = PackageRequest.objects.filter(import_name=module).exclude(package__name=name)
        old_names = set(asked.values_list("package__name", flat=True))
        waiting = (
            Revision.objects.select_for_update()
            .filter(pk__in=asked.values("revision_id"), status__in=[Status.AWAITING_APPROVAL, Status.REJECTED])
            .order_by("pk")
        )
        changed = 0
        for revision in waiting:
            requirements, seen = [], set()
            for requirement in revision.requirements:
                if (requirement.get("inferred") or {}).get("module") == module:
                    requirement = {**requirement, "name": name, "text": name}
                if requirement["name"] not in seen:
                    seen.add(requirement["name"])
                    requirements.append(requirement)
            revision.requirements = requirements
            revision.save(update_fields=["requirements"])
            PackageRequest.objects.filter(revision=revision, import_name=module).delete()
            submit(revision=revision)
            changed += 1
        packages.forget_unrequested(old_names)
    return changed


def packages_approve(
    *, names: Iterable[str], user: User, constraint: str = "", unknown_confirmed: Iterable[str] = (),
    source_build: bool = False,
) -> list[Package]:
    """Approve packages (an optional constraint applies to each; `source_build` lets them be
    built from source, running their build code in the build sandbox); checks every input
    before changing anything. Names the index does not know need to be in `unknown_confirmed`."""
    cleaned, constraint = packages.clean_approval(names=names, constraint=constraint, unknown_confirmed=unknown_confirmed)
    return packages_decide(
        names=cleaned, status=Approval.APPROVED, user=user, constraint=constraint, source_build=source_build
    )


def packages_reject(*, names: Iterable[str], user: User, reason: str) -> list[Package]:
    """Reject packages; the reason is shown to the authors of the toolkits that asked."""
    cleaned, reason = packages.clean_rejection(names=names, reason=reason)
    return packages_decide(names=cleaned, status=Approval.REJECTED, user=user, reason=reason)


def package_approve(
    *, name: str, user: User, constraint: str = "", unknown_confirmed: bool = False, source_build: bool = False
) -> Package:
    [package] = packages_approve(
        names=[name], user=user, constraint=constraint, unknown_confirmed=[name] if unknown_confirmed else [],
        source_build=source_build,
    )
    return package


def package_reject(*, name: str, user: User, reason: str) -> Package:
    [package] = packages_reject(names=[name], user=user, reason=reason)
    return package


# ------------------------------------------------------------------------------------------
# The worker's steps (called from toolhub.toolkits.building)


def step_claim(*, revision_id: int, task_name: str, **fields: object) -> bool:
    """A worker takes the revision's queued step; False when it is not queued (a second
    delivery of the task while the first runs, or after it ended). The reaper measures a step
    from its start, so a step that waited long in the queue starts its clock now."""
    now = timezone.now()
    return bool(
        Revision.objects.filter(
            pk=revision_id, status=Status.BUILDING, task_name=task_name, heartbeat_at__isnull=True
        ).update(heartbeat_at=now, status_changed_at=now, **fields)
    )


def build_claim(*, revision_id: int) -> bool:
    return step_claim(revision_id=revision_id, task_name=BUILD_TASK, **status_fields(message("build.locking")))


def introspect_claim(*, revision_id: int) -> bool:
    return step_claim(revision_id=revision_id, task_name=INTROSPECT_TASK)


def step_heartbeat(revision_id: int) -> Beat:
    """The worker's beat while it runs a step of the revision: a build may stay silent for
    minutes (uv compiling a package), and only a worker that stopped stops beating."""

    def tick() -> None:
        dbretry.write(
            lambda: Revision.objects.filter(pk=revision_id, status=Status.BUILDING, heartbeat_at__isnull=False).update(
                heartbeat_at=timezone.now()
            ),
            what=f"the heartbeat of the build of revision {revision_id}",
        )

    return Beat(tick, every=heartbeat.EVERY_SECONDS)


@dbretry.retried("recording a build's progress")
def build_progress(*, revision_id: int, detail: Message, **fields: object) -> None:
    """A step of a running build (its detail, and what the step produced, e.g. the lock)."""
    Revision.objects.filter(pk=revision_id).update(**status_fields(detail), **fields)


def build_needs_approval(*, revision: Revision, lock: str, pins: dict[str, str]) -> None:
    """The lock pins packages that are not approved yet (TOOLHUB_APPROVE_TRANSITIVE): keep
    the lock and wait for the admins."""
    Revision.objects.filter(pk=revision.pk).update(lock=lock)
    revision.refresh_from_db()
    submit(revision=revision, extra_names=pins)


def build_needs_source(*, revision_id: int, name: str, reason: Message) -> None:
    """Binary-only found no wheel of `name`: the build fails with the reason, and `name` joins
    the package queue (asked for by this revision, as a dependency), where an admin can allow
    a source build of it; a Retry then builds it."""
    with transaction.atomic():
        if not PackageRequest.objects.filter(revision_id=revision_id, package__name=name).exists():
            packages.requests_record(revision_id=revision_id, wanted={}, transitive={name: ""})
    fail(revision_id=revision_id, reason=reason)


@dbretry.retried("recording a built environment")
def built(*, revision_id: int, environment_key: str) -> None:
    """The environment is ready: inspect the toolkit in the sandbox next. A fresh clock for
    introspection too, as it may wait behind invocations on the sandbox queue."""
    Revision.objects.filter(pk=revision_id).update(
        environment_key=environment_key,
        **status_fields(message("build.inspecting")),
        status_changed_at=timezone.now(),
    )
    queue_step(INTROSPECT_TASK, revision_id)


@dbretry.retried("recording a failed build")
def fail(*, revision_id: int, reason: Message, traceback: str | None = None) -> None:
    """A build or introspection failed; `traceback` (shown to owner and admins) when known."""
    revision = Revision.objects.get(pk=revision_id)
    fields = []
    if traceback is not None:
        revision.traceback = traceback
        fields.append("traceback")
    _set(revision, Status.FAILED, reason, *fields)


@dbretry.retried("recording an introspected revision")
def ready(*, revision: Revision, tools: list, valves_schema: dict | None, user_valves_schema: dict | None,
          plugin_metadata: dict | None) -> None:
    """Introspection succeeded: store what the toolkit defines, and promote the revision."""
    revision.tools = tools
    revision.valves_schema = valves_schema
    revision.user_valves_schema = user_valves_schema
    revision.plugin_metadata = plugin_metadata
    revision.traceback = ""
    # The toolkit's saved tests run against it first; tests_done() goes on from here.
    if tests_begin(revision=revision):
        return
    _proceed(revision)


def _proceed(revision: Revision) -> None:
    """Introspected (and its tests passed): wait for review if it must, else promote it."""
    held_for = review_needed(revision)
    if held_for:
        revision.set_status(Status.AWAITING_REVIEW, message("review.waiting", what=held_for))
        revision.save()
        return
    revision.set_status(Status.READY)
    revision.save()
    promote(revision=revision)


# ------------------------------------------------------------------------------------------
# Tool tests: the step between introspection and `ready` for a toolkit that has saved tests.
# The worker's side is toolhub.runs.tool_tests; it calls tests_claim, tests_progress and
# tests_done. The step is a step like the others: beaten, resent and reaped as they are.


def tests_begin(*, revision: Revision) -> bool:
    """Store what introspection found and queue the toolkit's tests against the revision;
    False (and nothing done) when the toolkit has none."""
    total = ToolTest.objects.filter(toolkit_id=revision.toolkit_id).count()
    if not total:
        return False
    revision.set_status(Status.BUILDING, message("tests.running", n=total))
    revision.save()
    # A run of an earlier attempt (the revision was retried after its worker died) ends here.
    ToolTestRun.objects.filter(revision=revision, gate=True, status__in=[ToolTestStatus.QUEUED, ToolTestStatus.RUNNING]).update(
        status=ToolTestStatus.FAILED, finished_at=timezone.now(), **ToolTestRun.error_fields(TESTS_REPLACED)
    )
    ToolTestRun.objects.create(
        toolkit_id=revision.toolkit_id, revision=revision, gate=True, total=total, started_by_id=revision.uploaded_by_id
    )
    queue_step(TEST_TASK, revision.pk)
    return True


def tests_claim(*, revision_id: int) -> bool:
    return step_claim(revision_id=revision_id, task_name=TEST_TASK)


def tests_progress(*, revision_id: int) -> None:
    """A case finished: each case is bounded by the sandbox's limits, so the step's clock (the
    reaper's OVERDUE) starts again with each."""
    Revision.objects.filter(pk=revision_id, status=Status.BUILDING, task_name=TEST_TASK).update(
        status_changed_at=timezone.now()
    )


def tests_done(*, revision_id: int, failed: list[str], total: int) -> None:
    """The gate run ended: go on as after introspection, or hold the revision for an admin,
    naming the cases that failed. Nothing happens to a revision no longer at this step (the
    reaper failed it, or it was retried)."""
    with transaction.atomic():
        revision = Revision.objects.select_for_update().filter(
            pk=revision_id, status=Status.BUILDING, task_name=TEST_TASK
        ).first()
        if revision is None:
            return
        if not failed:
            _proceed(revision)
            return
        names = ", ".join(failed[:5]) + (", …" if len(failed) > 5 else "")
        _set(revision, Status.AWAITING_REVIEW, message("tests.failed", failed=len(failed), total=total, names=names))


def tests_failed(revision: Revision) -> ToolTestRun | None:
    """The revision's last gate run, when it failed (an admin's approval then needs a reason)."""
    run = ToolTestRun.objects.filter(revision=revision, gate=True).order_by("-created_at", "-id").first()
    return run if run is not None and run.status == ToolTestStatus.FAILED else None


# ------------------------------------------------------------------------------------------
# Reviews


def review_needed(revision: Revision) -> Message | None:
    """What an admin entrusted the toolkit with that this revision would receive, when no
    admin uploaded or approved it: then it must wait for review (None when it need not)."""
    if revision.entrusted:
        return None
    toolkit = Toolkit.objects.get(pk=revision.toolkit_id)
    names = ", ".join(admin_secrets_set(toolkit))
    if names:
        return message("review.secrets_and_grant" if toolkit.egress_granted else "review.secrets", names=names)
    return message("review.grant") if toolkit.egress_granted else None


def review_decide(*, revision_id: int, user: User, approve: bool, reason: str = "") -> Revision | None:
    """An admin approves (it becomes ready and current) or rejects (the current revision
    stays) a revision awaiting review. None when it no longer awaits review. Approving one
    whose tests failed needs a reason, recorded on its test run (ToolTestRun, "overridden")."""
    with transaction.atomic():
        revision = Revision.objects.select_for_update().filter(pk=revision_id, status=Status.AWAITING_REVIEW).first()
        if revision is None:
            return None
        failed_run = tests_failed(revision) if approve else None
        if failed_run is not None:
            # Approved although its tests failed: who, when and why stay on the run.
            if not reason:
                raise ValueError("approving a revision whose tests failed needs a reason")
            failed_run.status = ToolTestStatus.OVERRIDDEN
            failed_run.overridden_by = user
            failed_run.overridden_at = timezone.now()
            failed_run.override_reason = reason
            failed_run.save(update_fields=["status", "overridden_by", "overridden_at", "override_reason"])
        revision.review = Review.APPROVED if approve else Review.REJECTED
        revision.reviewed_by = user
        revision.reviewed_at = timezone.now()
        fields = ("review", "reviewed_by", "reviewed_at")
        if approve:
            _set(revision, Status.READY, None, *fields)
            promote(revision=revision)
        else:
            _set(revision, Status.REJECTED, message("review.rejected", admin=user.username, reason=reason), *fields)
    return revision


def reap_stale_builds() -> int:
    """Fail builds whose worker stopped (no beat for heartbeat.DEAD_AFTER_SECONDS), whose step
    no worker took although its task was sent 1 + TOOLHUB_RESEND_MAX times, and steps that
    made no progress for much longer than a build may take; returns how many."""
    now = timezone.now()
    building = Revision.objects.filter(status=Status.BUILDING)
    failed = {"status": Status.FAILED, "status_changed_at": now}
    n = building.filter(heartbeat_at__lt=now - timedelta(seconds=heartbeat.DEAD_AFTER_SECONDS)).update(
        **failed, **status_fields(INTERRUPTED)
    )
    never_taken = building.filter(
        heartbeat_at__isnull=True, task_sends__gt=settings.TOOLHUB_RESEND_MAX,
        task_sent_at__lt=now - timedelta(seconds=settings.TOOLHUB_RESEND_AFTER_SECONDS),
    )
    for task_name in set(never_taken.values_list("task_name", flat=True)):
        queue = settings.CELERY_TASK_ROUTES[task_name]["queue"]
        not_taken = message("build.not_taken", sends=settings.TOOLHUB_RESEND_MAX + 1, queue=queue)
        n += never_taken.filter(task_name=task_name).update(**failed, **status_fields(not_taken))
    # A step that beats but never ends, or one queued before steps were recorded.
    build_limit = timedelta(seconds=settings.TOOLHUB_BUILD_TIMEOUT + 120)
    return n + building.filter(status_changed_at__lt=now - build_limit).update(**failed, **status_fields(OVERDUE))


def resend_queued_steps() -> int:
    """Send the task of every step still queued TOOLHUB_RESEND_AFTER_SECONDS after its last
    send again: its message may be gone with a broker that restarted without persistence (a
    second delivery is ignored by step_claim). Returns how many were sent."""
    now = timezone.now()
    queued = Revision.objects.filter(
        status=Status.BUILDING, heartbeat_at__isnull=True, task_sends__gte=1, task_sends__lte=settings.TOOLHUB_RESEND_MAX,
        task_sent_at__lt=now - timedelta(seconds=settings.TOOLHUB_RESEND_AFTER_SECONDS),
    )
    sent = 0
    for revision_id, task_name in queued.values_list("pk", "task_name"):
        if not queued.filter(pk=revision_id).update(task_sent_at=now, task_sends=F("task_sends") + 1):
            continue  # taken meanwhile
        try:
            broker.send(task_name, revision_id)
        except (BrokerError, OSError) as exc:
            logger.error("could not send %s for revision %s again (%s); the next pass tries again", task_name, revision_id, exc)
            break
        sent += 1
    return sent


# ------------------------------------------------------------------------------------------
# Which revision is current


def make_current(*, toolkit: Toolkit, revision: Revision) -> None:
    """Point the toolkit at a revision and copy its listing fields. Only these fields are
    written: a full save would write back whatever else this instance read earlier, undoing
    an egress grant made in the meantime."""
    if revision.status == Status.AWAITING_REVIEW:
        raise ValueError(f"revision {revision} awaits an admin's review and cannot become current")
    previous = toolkit.current_revision
    toolkit.current_revision = revision
    toolkit.title = revision.title
    toolkit.author = revision.manifest.get("author", "")
    toolkit.updated_at = timezone.now()
    fields = ["current_revision", "title", "author", "updated_at"]
    # An egress grant covers the code an admin saw: when a non-admin's revision mentions hosts
    # the one before it did not, the grant is held until an admin confirms it again.
    # (An admin who approved it in review saw them.)
    if toolkit.egress_granted and previous is not None and previous.pk != revision.pk and not revision.entrusted:
        new_hosts = revision.hosts_new_since(previous)
        if new_hosts:
            toolkit.egress_held_hosts = sorted(set(toolkit.egress_held_hosts or []) | set(new_hosts))
            fields.append("egress_held_hosts")
    toolkit.save(update_fields=fields)


def uploaded(*, toolkit: Toolkit, revision: Revision) -> None:
    """A new revision was added: it is current at once when the current one is not ready
    (a working revision stays current until its successor is ready) and it needs no review,
    then it is submitted. Call inside the transaction that created the revision, with the
    toolkit row locked."""
    current = toolkit.current_revision
    if current is None or (current.status != Status.READY and not review_needed(revision)):
        make_current(toolkit=toolkit, revision=revision)
    else:
        toolkit.updated_at = timezone.now()
        toolkit.save(update_fields=["updated_at"])
    submit(revision=revision)


def promote(*, revision: Revision) -> None:
    """A revision became ready: the newest ready revision becomes current, unless someone
    rolled back to a later one in the meantime."""
    with transaction.atomic():
        toolkit = Toolkit.objects.select_for_update(of=("self",)).select_related("current_revision").get(pk=revision.toolkit_id)
        current = toolkit.current_revision
        if current is None or current.status != Status.READY or current.number < revision.number:
            make_current(toolkit=toolkit, revision=revision)


def rollback(*, toolkit: Toolkit, revision: Revision) -> None:
    """Make an older (or newer) revision current again; one that has no usable environment
    on record is submitted again."""
    with transaction.atomic():
        make_current(toolkit=toolkit, revision=revision)
        if revision.status in (Status.FAILED, Status.UPLOADED) or (
            revision.status == Status.READY and not revision.environment_key
        ):
            submit(revision=revision)
