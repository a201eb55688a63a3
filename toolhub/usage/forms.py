"""The Usage page's choices: a range (last 24 hours, 7 days, 30 days, or from one day to
another), a grouping and the buckets."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django import forms
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from toolhub.usage import selectors

GROUP_CHOICES = [
    ("toolkit", _("Toolkit")), ("tool", _("Tool")), ("surface", _("Surface")), ("client", _("Client credential")), ("user", _("User")),
]
PRESETS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}


class UsageForm(forms.Form):
    range = forms.ChoiceField(
        label=_("Range"), required=False, initial="7d",
        choices=[("24h", _("Last 24 hours")), ("7d", _("Last 7 days")), ("30d", _("Last 30 days")), ("custom", _("From – to"))],
    )
    since = forms.DateField(label=_("From (UTC)"), required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(label=_("To (UTC, inclusive)"), required=False, widget=forms.DateInput(attrs={"type": "date"}))
    group = forms.ChoiceField(
        label=_("Group by"), required=False, initial="tool",
        choices=GROUP_CHOICES,
    )
    bucket = forms.ChoiceField(
        label=_("Per"), required=False, initial="",
        choices=[("", _("Automatic")), ("hour", _("Hour")), ("day", _("Day"))],
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        now = timezone.now()
        choice = data.get("range") or "7d"
        if choice == "custom":
            since, until = data.get("since"), data.get("until")
            if not since or not until:
                raise forms.ValidationError(_("Choose both days of the range."))
            start = datetime.combine(since, time.min, tzinfo=UTC)
            end = datetime.combine(until, time.min, tzinfo=UTC) + timedelta(days=1) if until < date.max else datetime.max.replace(tzinfo=UTC)
        else:
            start, end = now - PRESETS[choice], now
        try:
            data["span"] = selectors.usage_range(since=start, until=end, bucket=data.get("bucket") or None, now=now)
        except selectors.RangeInvalid as exc:
            raise forms.ValidationError(_range_message(exc)) from None
        data["group"] = data.get("group") or "tool"
        return data


def _range_message(exc: selectors.RangeInvalid) -> str:
    if exc.field == "bucket":
        return str(_("Hourly figures cover at most 7 days: choose a shorter range or per day."))
    if "years" in exc.message:
        return str(_("Choose days between the years 1 and 9999."))
    if "before" in exc.message:
        return str(_("The range must end after it starts."))
    return str(_("The range may be at most 92 days."))
