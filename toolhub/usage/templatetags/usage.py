"""The usage figures in templates: `{% toolkit_usage %}` (a toolkit's Overview block) and the
filters that print a rate and a duration."""

from __future__ import annotations

from django import template
from django.utils import formats
from django.utils.translation import gettext as _

from toolhub.accounts.roles import can_manage_toolkit, is_admin
from toolhub.runs.models import Surface
from toolhub.usage import charts, selectors

register = template.Library()


@register.filter
def rate(value: float | None) -> str:
    """An error rate as a percentage, "–" when there were no calls."""
    if value is None:
        return "–"
    return _("%(percent)s %%") % {"percent": formats.number_format(value * 100, 1)}


@register.filter
def ms(value: int | None) -> str:
    if value is None:
        return "–"
    return _("%(ms)s ms") % {"ms": formats.number_format(value, 0, force_grouping=True)}


@register.filter
def surface_label(value: str) -> str:
    return str(dict(Surface.choices).get(value, value))


@register.inclusion_tag("usage/_toolkit_usage.html", takes_context=True)
def toolkit_usage(context, toolkit) -> dict:
    """The Overview's usage block: everyone who sees the toolkit sees its tools' figures over
    the last 7 days and the revisions that served them; its owner and admins also see its
    last errors (the message, never the arguments). Who made a call is shown to admins only,
    and only an admin or the caller gets a link to it."""
    user = context["request"].user
    usage = selectors.toolkit_usage(toolkit_id=toolkit.pk)
    manager = can_manage_toolkit(user, toolkit)
    errors = list(selectors.toolkit_last_errors(toolkit_id=toolkit.pk)) if manager else []
    chart = charts.row_chart(
        [charts.Bar(name, figures.calls, figures.errors) for name, figures in usage.tools],
        chart_id="toolkit-usage", title=_("Calls per tool over the last 7 days, errors hatched"),
    ) if usage.tools else None
    return {
        "usage": usage, "chart": chart, "manager": manager, "errors": errors, "admin": is_admin(user),
        "viewer_id": user.pk, "toolkit": toolkit,
    }
