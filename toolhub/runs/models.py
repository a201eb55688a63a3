from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from toolhub.messages import Message, shown, stored_fields
from toolhub.toolkits.fields import OrderedJSONField

# The start of the error a cancelled run ends with (runs.services.invocation_cancel).
CANCELLED_PREFIX = "Cancelled by "


def error_fields(error: Message | None) -> dict[str, object]:
    """Why a run failed as its two fields, for save(), update() or queue.finish(): the message
    (toolhub.messages) and its English rendering, the API's text, so that they always agree."""
    return stored_fields(error, text="error", data="error_message")


def error_shown(stored: dict, english: str) -> str:
    """Why a run failed in the active language: its stored message rendered, or the English
    text when no message was stored with it."""
    return shown(stored, english, gettext)


class RunStatus(models.TextChoices):
    QUEUED = "queued", _("Queued")
    RUNNING = "running", _("Running")
    AWAITING_INPUT = "awaiting_input", _("Awaiting input")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    TIMED_OUT = "timed_out", _("Timed out")


class Surface(models.TextChoices):
    """Where an invocation came from."""

    API = "api", _("API")
    MCP = "mcp", _("MCP")
    OPENAPI = "openapi", _("OpenAPI tool server")
    PAGE = "page", _("Test run")
    AGENT = "agent", _("Agent run")
    # A saved tool test's call (toolhub.runs.tool_tests), run by its test run's own worker.
    TEST = "test", _("Tool test")


FINISHED = {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.TIMED_OUT}
# The states in which an invocation holds a worker.
BUSY = (RunStatus.RUNNING, RunStatus.AWAITING_INPUT)


class Invocation(models.Model):
    # The foreign keys of toolkit, user and client are looked up through the composite indexes
    # that start with them (Meta.indexes), not indexes of their own: every insert and every
    # non-HOT update (a run's claim and its end) writes each index of the table, and these
    # three were the composite ones' leading columns again.
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    toolkit = models.ForeignKey(
        "toolkits.Toolkit", on_delete=models.CASCADE, related_name="invocations", db_index=False
    )
    revision = models.ForeignKey("toolkits.Revision", on_delete=models.CASCADE, related_name="invocations")
    tool = models.CharField(max_length=200)
    arguments = OrderedJSONField(default=dict)
    # Advanced inputs of a test run (Open WebUI's __messages__ and __files__).
    messages = models.JSONField(default=list, blank=True)
    files = models.JSONField(default=list, blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="invocations", db_index=False
    )
    # The client credential that called for the user (an LLM app), if any, and the surface.
    client = models.ForeignKey(
        "accounts.ClientCredential", null=True, blank=True, on_delete=models.SET_NULL, related_name="invocations",
        db_index=False,
    )
    surface = models.CharField(max_length=10, choices=Surface.choices, default=Surface.API)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    result = OrderedJSONField(null=True, blank=True)
    result_type = models.CharField(max_length=10, blank=True)
    # Why it failed: a message (toolhub.messages) pages show in the reader's language, and its
    # English text (the API's); written together by error_fields().
    error = models.TextField(blank=True)
    error_message = models.JSONField(default=dict, blank=True)
    # Shown only to the toolkit's owner and admins.
    traceback = models.TextField(blank=True)
    limit = models.CharField(max_length=20, blank=True)
    cpu_ms = models.PositiveIntegerField(null=True, blank=True)
    max_rss_kb = models.PositiveIntegerField(null=True, blank=True)
    # The pending __event_call__ (if any) and the answer given to it.
    pending_call = OrderedJSONField(null=True, blank=True)
    call_answer = models.JSONField(null=True, blank=True)
    egress = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # When its task was last sent to the broker, and how many times: the reaper sends it again
    # when no worker took it (the message may have been lost with the broker).
    sent_at = models.DateTimeField(default=timezone.now)
    sends = models.PositiveSmallIntegerField(default=1)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["toolkit", "tool", "-created_at"]), models.Index(fields=["status"]),
            # The rate limits of the tool servers count recent calls per client and per user.
            models.Index(fields=["client", "created_at"]), models.Index(fields=["user", "surface", "created_at"]),
            # The fair queue looks up when each waiting user was last served (engine.fairest_queued).
            models.Index(fields=["user", "started_at"]),
            # Pages of the history, "My runs" and GET /api/v1/invocations, newest first
            # (selectors.invocations_page): read in index order from the cursor on, at any depth.
            models.Index(fields=["created_at", "id"], name="invocation_created_id"),
            models.Index(fields=["user", "created_at", "id"], name="invocation_user_created_id"),
            # The usage rollup folds what finished since its watermark, and a toolkit's
            # Overview lists its latest errors (toolhub.usage). Partial: an insert (finished_at
            # is empty) writes neither, and a success never enters the second.
            models.Index(fields=["finished_at"], name="invocation_finished", condition=models.Q(finished_at__isnull=False)),
            models.Index(
                fields=["toolkit", "-finished_at"], name="invocation_failed",
                condition=models.Q(status__in=["failed", "timed_out"]),
            ),
        ]

    def get_absolute_url(self) -> str:
        return reverse("invocation_detail", args=[self.id])

    def error_shown(self) -> str:
        return error_shown(self.error_message, self.error)

    @property
    def shown_status(self) -> str:
        """The status a page shows: a run someone cancelled ended as failed (the API's
        contract), but is shown as "cancelled", not as a failure of the tool."""
        if self.status == RunStatus.FAILED and (self.error or "").startswith(CANCELLED_PREFIX):
            return "cancelled"
        return self.status

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED

    @property
    def duration_ms(self) -> int | None:
        if self.started_at and self.finished_at:
            return int((self.finished_at - self.started_at).total_seconds() * 1000)
        return None


class Event(models.Model):
    invocation = models.ForeignKey(Invocation, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=40)
    data = OrderedJSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["seq"]
        constraints = [models.UniqueConstraint(fields=["invocation", "seq"], name="event_seq_unique")]
