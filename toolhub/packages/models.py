from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class Approval(models.TextChoices):
    PENDING = "pending", _("Pending")
    APPROVED = "approved", _("Approved")
    REJECTED = "rejected", _("Rejected")


class IndexState(models.TextChoices):
    """What the package index said about a name (toolhub.packages.index_client)."""

    UNCHECKED = "unchecked", _("Not checked")
    CHECKING = "checking", _("Checking")
    FOUND = "found", _("On the index")
    MISSING = "missing", _("Not on the index")
    ERROR = "error", _("Index not readable")


class Package(models.Model):
    """One Python package name (PEP 503-normalised) and the admin's decision on it."""

    name = models.CharField(max_length=200, unique=True)
    status = models.CharField(max_length=16, choices=Approval.choices, default=Approval.PENDING)
    constraint = models.CharField(max_length=200, blank=True)
    # An admin allowed this package to be built from its source distribution (its build code
    # then runs, in the build sandbox). Counts only while the package is approved.
    source_build = models.BooleanField(default=False)
    reason = models.TextField(blank=True)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # What the configured index says about the name, fetched by a task
    # (toolhub.packages.tasks.check_package_index): `index_info` is IndexInfo.as_dict().
    index_state = models.CharField(max_length=16, choices=IndexState.choices, default=IndexState.UNCHECKED)
    index_info = models.JSONField(default=dict, blank=True)
    index_requested_at = models.DateTimeField(null=True, blank=True)
    index_checked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class PackageRequest(models.Model):
    """A revision asking for a package, with the specifier it wrote. `transitive` marks
    names found only in the lock (when the transitive-approval setting is on)."""

    package = models.ForeignKey(Package, on_delete=models.CASCADE, related_name="requests")
    revision = models.ForeignKey("toolkits.Revision", on_delete=models.CASCADE, related_name="package_requests")
    specifier = models.CharField(max_length=200, blank=True)
    transitive = models.BooleanField(default=False)
    # Set when the name was inferred from an import the toolkit does not declare.
    import_name = models.CharField(max_length=200, blank=True)
    import_line = models.PositiveIntegerField(null=True, blank=True)
    # The import is guarded by `try`/`except ImportError`: the toolkit loads without the
    # package, so the request holds nothing back; approved, it goes into the next build.
    optional = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["package", "revision"], name="package_request_unique"),
        ]


class ImportMapping(models.Model):
    """An admin's answer to "which distribution provides `import <module>`?", remembered for
    every toolkit: it wins over the maintained table (toolhub/packages/import_names.py)."""

    module = models.CharField(max_length=200, unique=True)
    distribution = models.CharField(max_length=200)
    set_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    set_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["module"]

    def __str__(self) -> str:
        return f"{self.module} -> {self.distribution}"


class Decision(models.Model):
    package = models.ForeignKey(Package, on_delete=models.CASCADE, related_name="decisions")
    status = models.CharField(max_length=16, choices=Approval.choices)
    constraint = models.CharField(max_length=200, blank=True)
    source_build = models.BooleanField(default=False)
    reason = models.TextField(blank=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    decided_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-decided_at"]
