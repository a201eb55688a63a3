"""Model connections: the OpenAI-compatible endpoints (Ollama, vLLM, LM Studio, llama.cpp's
server, OpenAI, OpenRouter) that agent runs call from the worker. Admins keep them; the API key
and the extra headers' values are stored encrypted with the valves' vault and never shown back."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from toolhub.accounts.roles import is_admin
from toolhub.runs.models import error_shown
from toolhub.toolkits.fields import OrderedJSONField
from toolhub.toolkits.valves import vault


class Use(models.TextChoices):
    EVERYONE = "everyone", _("Everyone")
    GROUPS = "groups", _("Members of the chosen groups")
    ADMINS = "admins", _("Admins only")


class ModelConnection(models.Model):
    name = models.CharField(max_length=100, unique=True)
    base_url = models.CharField(max_length=500)
    # Fernet tokens (toolhub.vault): the API key as a JSON string, the extra headers as a JSON
    # object. Empty when there is none.
    api_key_ciphertext = models.TextField(blank=True)
    headers_ciphertext = models.TextField(blank=True)
    # The header names in clear, so pages can list them without decrypting anything.
    header_names = models.JSONField(default=list, blank=True)
    # The model names offered to people who start runs ("models" in the API).
    offered_models = models.JSONField(default=list, blank=True)
    timeout_seconds = models.FloatField(default=60.0)
    use = models.CharField(max_length=16, choices=Use.choices, default=Use.EVERYONE)
    groups = models.ManyToManyField(Group, blank=True, related_name="+")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("model_connection_edit", args=[self.pk])

    @property
    def api_key_set(self) -> bool:
        return bool(self.api_key_ciphertext)

    def api_key(self) -> str:
        return vault().decrypt_json(self.api_key_ciphertext) if self.api_key_ciphertext else ""

    def extra_headers(self) -> dict[str, str]:
        return vault().decrypt_json(self.headers_ciphertext) if self.headers_ciphertext else {}

    def set_secrets(self, *, api_key: str, headers: dict[str, Any]) -> None:
        self.api_key_ciphertext = vault().encrypt_json(api_key) if api_key else ""
        self.headers_ciphertext = vault().encrypt_json(headers) if headers else ""
        self.header_names = list(headers)

    def usable_by(self, user, group_ids: set[int] | None = None) -> bool:
        """Whether `user` may run agents on this connection; admins may always use every
        connection. With `use=groups`, prefetch `groups` and pass the user's `group_ids` when
        checking many connections, or pay a query or two each."""
        if not (user.is_authenticated and user.is_active):
            return False
        if is_admin(user) or self.use == Use.EVERYONE:
            return True
        if self.use == Use.GROUPS:
            mine = group_ids if group_ids is not None else set(user.groups.values_list("pk", flat=True))
            return any(group.pk in mine for group in self.groups.all())
        return False


class AgentRunStatus(models.TextChoices):
    QUEUED = "queued", _("Queued")
    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")


AGENT_FINISHED = {AgentRunStatus.SUCCEEDED, AgentRunStatus.FAILED}


class AgentRun(models.Model):
    """One run of an agent strategy: a model on a connection, the tools it was given, a query.
    `log` is the tree as a list of nodes in the order they were first seen; a node that comes
    again (same id) replaces its earlier state in place."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_runs")
    connection = models.ForeignKey(ModelConnection, null=True, on_delete=models.SET_NULL, related_name="runs")
    connection_name = models.CharField(max_length=100)
    model = models.CharField(max_length=200)
    strategy = models.ForeignKey("toolkits.Toolkit", on_delete=models.CASCADE, related_name="agent_runs")
    strategy_revision = models.ForeignKey("toolkits.Revision", on_delete=models.CASCADE, related_name="+")
    # [{"toolkit": slug, "tool": name, "name": what the model calls it}]
    tools = models.JSONField(default=list)
    query = models.TextField()
    max_iterations = models.PositiveSmallIntegerField(default=5)
    status = models.CharField(max_length=20, choices=AgentRunStatus.choices, default=AgentRunStatus.QUEUED)
    answer = models.TextField(null=True, blank=True)
    # Why it failed, as for an invocation (toolhub.runs.models.error_fields).
    error = models.TextField(blank=True)
    error_message = models.JSONField(default=dict, blank=True)
    # Which limit ended the run: max_iterations, time, tokens, tool_calls, tools_per_answer (or empty).
    limit = models.CharField(max_length=20, blank=True)
    log = OrderedJSONField(default=list)
    usage = models.JSONField(default=dict)
    invocations = models.JSONField(default=list)
    # The strategy's traceback: shown to its owner and admins only.
    traceback = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # When its task was last sent to the broker, and how many times: the reaper sends a run
    # still queued again (its message may be lost), as it does invocations'.
    sent_at = models.DateTimeField(default=timezone.now)
    sends = models.PositiveSmallIntegerField(default=1)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["user", "-created_at"]), models.Index(fields=["status"])]

    def get_absolute_url(self) -> str:
        return reverse("agent_run_detail", args=[self.id])

    @property
    def is_finished(self) -> bool:
        return self.status in AGENT_FINISHED

    def error_shown(self) -> str:
        return error_shown(self.error_message, self.error)

    def log_tree(self) -> list[dict[str, Any]]:
        """The nodes nested under their parents (`children`), roots in order."""
        nodes = {node["id"]: {**node, "children": []} for node in self.log}
        roots: list[dict[str, Any]] = []
        for node in nodes.values():
            parent = nodes.get(node.get("parent_id") or "")
            (parent["children"] if parent is not None and parent is not node else roots).append(node)
        return roots
