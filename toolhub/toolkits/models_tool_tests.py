"""Saved tool tests and their runs (docs/tool-tests.md). Imported by toolhub.toolkits.models, so
that Django finds them in the toolkits app; the foreign keys name their models as strings, as
this module is imported while models.py is still being read.

A test is one call of one tool of a toolkit with checks on what it returns. A run calls every
test of a toolkit against one revision in the sandbox (toolhub.runs.tool_tests), each call an
invocation of its own (Surface.TEST), and records each case's outcome. A *gate* run is the step
of the lifecycle between introspection and `ready` (toolhub.toolkits.lifecycle, "Tool tests")."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from toolhub.messages import Message, shown, stored_fields
from toolhub.toolkits.fields import OrderedJSONField


class ToolTest(models.Model):
    toolkit = models.ForeignKey("toolkits.Toolkit", on_delete=models.CASCADE, related_name="tool_tests")
    name = models.CharField(max_length=100)
    tool = models.CharField(max_length=200)
    arguments = OrderedJSONField(default=dict)
    # [{"kind": "equals"|"contains"|"regex"|"json_path"|"fails_with", "value": ..., "path": "$.a"}]
    # (toolhub.toolkits.tool_checks validates and evaluates them).
    checks = OrderedJSONField(default=list)
    # UserValves to run with instead of the invoker's own (optional): encrypted like a ValveSet,
    # never shown back to anyone (pages and the API list only their names).
    user_valves_ciphertext = models.TextField(blank=True)
    user_valve_names = models.JSONField(default=list, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["toolkit", "name"], name="tool_test_name_unique")]

    def __str__(self) -> str:
        return f"{self.toolkit_id}:{self.name}"


class ToolTestStatus(models.TextChoices):
    QUEUED = "queued", _("Queued")
    RUNNING = "running", _("Running")
    PASSED = "passed", _("Passed")
    FAILED = "failed", _("Failed")
    # Failed, and an admin approved the revision anyway (with a reason).
    OVERRIDDEN = "overridden", _("Overridden")


TEST_RUN_ACTIVE = (ToolTestStatus.QUEUED, ToolTestStatus.RUNNING)


class ToolTestRun(models.Model):
    toolkit = models.ForeignKey("toolkits.Toolkit", on_delete=models.CASCADE, related_name="test_runs")
    revision = models.ForeignKey("toolkits.Revision", on_delete=models.CASCADE, related_name="test_runs")
    # Run by the lifecycle: the revision waits for it before it may become current.
    gate = models.BooleanField(default=False)
    status = models.CharField(max_length=12, choices=ToolTestStatus.choices, default=ToolTestStatus.QUEUED)
    total = models.PositiveSmallIntegerField(default=0)
    failed = models.PositiveSmallIntegerField(default=0)
    # Why the run itself could not finish (its worker stopped, no worker took it): a message
    # (toolhub.messages) and its English text, written together by error_fields().
    error = models.TextField(blank=True)
    error_message = models.JSONField(default=dict, blank=True)
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    overridden_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    overridden_at = models.DateTimeField(null=True, blank=True)
    override_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["toolkit", "-created_at"]), models.Index(fields=["revision", "-created_at"])]

    @property
    def is_active(self) -> bool:
        return self.status in TEST_RUN_ACTIVE

    @staticmethod
    def error_fields(error: Message | None) -> dict[str, object]:
        return stored_fields(error, text="error", data="error_message")

    def error_shown(self) -> str:
        return shown(self.error_message, self.error, gettext)


class ToolTestResult(models.Model):
    """One case of a run. The test's name and tool are copied: a test may be deleted later."""

    run = models.ForeignKey(ToolTestRun, on_delete=models.CASCADE, related_name="results")
    test = models.ForeignKey(ToolTest, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    position = models.PositiveSmallIntegerField(default=0)
    name = models.CharField(max_length=100)
    tool = models.CharField(max_length=200)
    passed = models.BooleanField(default=False)
    # Which check failed and how (nothing when it passed): a message (toolhub.messages) and its
    # English text, written together by set_message().
    message = models.TextField(blank=True)
    message_data = models.JSONField(default=dict, blank=True)
    # The text forms compared by the failing check (bounded), for the diff.
    expected = models.TextField(blank=True)
    actual = models.TextField(blank=True)
    invocation = models.ForeignKey("runs.Invocation", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["position", "id"]

    def set_message(self, message: Message | None) -> None:
        for name, value in stored_fields(message, text="message", data="message_data").items():
            setattr(self, name, value)

    def message_shown(self) -> str:
        return shown(self.message_data, self.message, gettext)
