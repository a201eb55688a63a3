from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from toolhub.accounts.roles import is_admin
from toolhub.messages import Message, shown, stored_fields
from toolhub.toolkits.fields import OrderedJSONField
from toolhub.toolkits.source_checks import OPEN_WEBUI_PACKAGE, ImportSite, import_sites_in


class Status(models.TextChoices):
    UPLOADED = "uploaded", _("Uploaded")
    AWAITING_APPROVAL = "awaiting_approval", _("Awaiting approval")
    BUILDING = "building", _("Building")
    READY = "ready", _("Ready")
    FAILED = "failed", _("Failed")
    REJECTED = "rejected", _("Rejected")
    # Built and inspected, but it would receive an admin's secret Valves or egress grant:
    # an admin must approve it before it can become current (toolhub.toolkits.lifecycle).
    AWAITING_REVIEW = "awaiting_review", _("Awaiting review")


class Review(models.TextChoices):
    """An admin's decision on a revision that awaited review."""

    APPROVED = "approved", _("Approved")
    REJECTED = "rejected", _("Rejected")


class Use(models.TextChoices):
    """Who may use a toolkit (and see it in lists). Its owner and admins always may."""

    EVERYONE = "everyone", _("Everyone")
    GROUPS = "groups", _("Selected groups and people")
    ADMINS = "admins", _("Admins only")


class Toolkit(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="toolkits")
    # The revision invocations use. A newer revision takes its place only once it is
    # ready, so a failed build never takes down a working toolkit.
    current_revision = models.ForeignKey(
        "Revision", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Denormalised from the current revision for searching and listing without joins.
    title = models.CharField(max_length=200)
    author = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # Network egress, granted by an admin.
    egress_granted = models.BooleanField(default=False)
    egress_hosts = models.JSONField(default=list, blank=True)
    egress_granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    egress_granted_at = models.DateTimeField(null=True, blank=True)
    # Hosts that a current revision uploaded by someone who is not an admin mentions and the
    # revision before it did not: while any are listed, the grant is held (runs get no
    # network) until an admin confirms it again (toolkit_set_egress clears the list).
    egress_held_hosts = models.JSONField(default=list, blank=True)
    # Access, set by the owner or an admin (toolhub.toolkits.access is the one reader).
    use = models.CharField(max_length=10, choices=Use.choices, default=Use.EVERYONE)
    use_groups = models.ManyToManyField("auth.Group", blank=True, related_name="usable_toolkits")
    use_users = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="usable_toolkits")

    class Meta:
        ordering = ["title", "slug"]

    def __str__(self) -> str:
        return self.slug

    def get_absolute_url(self) -> str:
        return reverse("toolkit_detail", args=[self.slug])

    @property
    def status(self) -> str:
        revision = self.current_revision
        return revision.status if revision is not None else Status.UPLOADED

    def latest_revision(self) -> Revision | None:
        return self.revisions.order_by("-number").first()

    def entrust_current_revision(self, by, *, number: int | None = None) -> None:
        """An admin who sets the toolkit's Valves or grants it egress does so for the code
        that is current: that revision counts as approved by them (Revision.entrusted). With
        `number`, only if the current revision is still that one (the one the admin saw)."""
        # The current revision as stored now, not as this instance last read it.
        current = Toolkit.objects.filter(pk=self.pk).values("current_revision_id")
        revisions = Revision.objects.filter(pk__in=current)
        if number is not None:
            revisions = revisions.filter(number=number)
        revisions.exclude(review=Review.APPROVED).update(
            review=Review.APPROVED, reviewed_by=by, reviewed_at=timezone.now()
        )


# Modules whose import means the toolkit talks to the network (the static check at upload
# warns when such a toolkit has no egress grant).
NETWORK_MODULES = frozenset({
    "aiohttp", "boto3", "botocore", "ftplib", "grpc", "http", "httpx", "imaplib", "openai", "anthropic",
    "paramiko", "poplib", "pycurl", "requests", "smtplib", "socket", "telnetlib", "urllib", "urllib3",
    "websocket", "websockets", "xmlrpc",
})


def status_fields(detail: Message | None) -> dict[str, object]:
    """A revision's status detail as its two fields, for save() or update(): the message and
    its English rendering, so that they always agree."""
    return stored_fields(detail, text="status_detail", data="status_message")


class Revision(models.Model):
    """One uploaded version of a toolkit's source. The source never changes after upload;
    the lifecycle fields (status, lock, specs) are filled in by the workers."""

    toolkit = models.ForeignKey(Toolkit, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    source = models.TextField()
    sha256 = models.CharField(max_length=64)
    kind = models.CharField(max_length=16, default="openwebui")
    version = models.CharField(max_length=100, blank=True)
    title = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    manifest = OrderedJSONField(default=dict)
    requirements = models.JSONField(default=list)
    tool_names = models.JSONField(default=list)
    has_valves = models.BooleanField(default=False)
    has_user_valves = models.BooleanField(default=False)
    imports = models.JSONField(default=list)
    hosts = models.JSONField(default=list)
    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    status = models.CharField(max_length=32, choices=Status.choices, default=Status.UPLOADED)
    # Why the revision is in its status, as a message (toolhub.messages: a code and its
    # parameters) that pages show in the reader's language, and in English (the API's text).
    # Written together by status_fields().
    status_detail = models.TextField(blank=True)
    status_message = models.JSONField(default=dict, blank=True)
    status_changed_at = models.DateTimeField(default=timezone.now)
    lock = models.TextField(blank=True)
    environment_key = models.CharField(max_length=64, blank=True)
    build_log = models.TextField(blank=True)
    # The worker's step a `building` revision is at (its task's name); when that task was last
    # sent and how many times (the reaper sends one no worker took again); the last beat of the
    # worker that runs the step (None while the task waits in the queue).
    task_name = models.CharField(max_length=100, blank=True)
    task_sent_at = models.DateTimeField(null=True, blank=True)
    task_sends = models.PositiveSmallIntegerField(default=0)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Shown only to the toolkit's owner and admins.
    traceback = models.TextField(blank=True)
    tools = OrderedJSONField(default=list)
    valves_schema = OrderedJSONField(null=True, blank=True)
    user_valves_schema = OrderedJSONField(null=True, blank=True)
    plugin_metadata = OrderedJSONField(null=True, blank=True)
    # An admin's review (toolhub.toolkits.lifecycle.review_decide): who decided, when, and what.
    review = models.CharField(max_length=10, choices=Review.choices, blank=True)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)
    # Brought in by an import (an Open WebUI export, a folder, `manage.py import_toolkits`):
    # the code is not the importing admin's own, so it is trusted only once reviewed.
    imported = models.BooleanField(default=False)

    class Meta:
        ordering = ["-number"]
        constraints = [models.UniqueConstraint(fields=["toolkit", "number"], name="revision_number_unique")]

    def __str__(self) -> str:
        return f"{self.toolkit_id}#{self.number}"

    def set_status(self, status: str, detail: Message | None = None) -> None:
        self.status = status
        for name, value in status_fields(detail).items():
            setattr(self, name, value)
        self.status_changed_at = timezone.now()

    def detail_shown(self) -> str:
        """The status detail in the active language (the English text when no message was
        stored with it)."""
        return shown(self.status_message, self.status_detail, gettext)

    @property
    def entrusted(self) -> bool:
        """May this revision's code receive the secret Valves an admin set and the egress
        grant? Only when an admin wrote it (uploaded it, not imported it) or approved it in
        review (also checked when a run starts)."""
        return self.review == Review.APPROVED or (not self.imported and is_admin(self.uploaded_by))

    @cached_property
    def open_webui_imports(self) -> list[ImportSite]:
        """Imports of Open WebUI's own modules, which ToolHub cannot provide. The source is
        parsed again only for the rare revision whose stored imports name `open_webui`."""
        if OPEN_WEBUI_PACKAGE not in (self.imports or []):
            return []
        return [site for site in import_sites_in(self.source) if site.top == OPEN_WEBUI_PACKAGE]

    @property
    def network_imports(self) -> list[str]:
        return sorted(set(self.imports or []) & NETWORK_MODULES)

    def hosts_new_since(self, other: Revision) -> list[str]:
        """The hosts this revision mentions that `other` does not."""
        return sorted(set(self.hosts or []) - set(other.hosts or []))

    def hosts_changed_since(self) -> tuple[Revision | None, list[str]]:
        """The revision before this one and the hosts this one mentions that it did not."""
        previous = self.toolkit.revisions.filter(number__lt=self.number).order_by("-number").first()
        if previous is None:
            return None, []
        return previous, self.hosts_new_since(previous)

    @property
    def requirement_texts(self) -> list[str]:
        """What the toolkit needs (the optional packages of guarded imports left out)."""
        return [r["text"] for r in self.requirements if not r.get("optional")]


class ValveSet(models.Model):
    """The encrypted valve values of a toolkit: the admin's Valves (user is null) or one
    user's UserValves. Values belong to the toolkit, not a revision, so they survive new
    revisions."""

    toolkit = models.ForeignKey(Toolkit, on_delete=models.CASCADE, related_name="valve_sets")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    ciphertext = models.TextField()
    updated_at = models.DateTimeField(default=timezone.now)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["toolkit", "user"], name="valveset_unique_user"),
            models.UniqueConstraint(
                fields=["toolkit"], condition=models.Q(user__isnull=True), name="valveset_unique_admin"
            ),
        ]


class Translation(models.Model):
    toolkit = models.ForeignKey(Toolkit, on_delete=models.CASCADE, related_name="translations")
    language = models.CharField(max_length=10)
    key = models.CharField(max_length=200)
    text = models.TextField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["toolkit", "language", "key"], name="translation_unique"),
        ]


class HistoryEntry(models.Model):
    """A change to a toolkit's governance (who may use it), kept for its Overview."""

    toolkit = models.ForeignKey(Toolkit, on_delete=models.CASCADE, related_name="history")
    kind = models.CharField(max_length=20)
    data = models.JSONField(default=dict)
    by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-at", "-id"]


# Saved tool tests and their runs live in a module of their own.
from toolhub.toolkits.models_tool_tests import ToolTest, ToolTestResult, ToolTestRun, ToolTestStatus  # noqa: E402,F401
