from __future__ import annotations

from django import template
from django.contrib.auth.models import AnonymousUser
from django.utils.html import format_html
from django.utils.translation import gettext as _

from toolhub.accounts.roles import is_admin
from toolhub.packages import index_checks
from toolhub.packages import selectors as package_selectors
from toolhub.toolkits import selectors as toolkit_selectors
from toolhub.toolkits.display import Resolved, resolve, tool_display

register = template.Library()


def _shown(context, resolved: Resolved):
    """A resolved display string for the page. Admins see a mark on keys that have no
    translation, so they know to add one; everyone else sees the bare key."""
    if not resolved.translated and is_admin(context.get("user") or AnonymousUser()):
        return format_html(
            '<span class="untranslated" title="{}">{}</span>',
            _("untranslated: add it on the toolkit's Translations tab"),
            resolved.text,
        )
    return resolved.text


@register.simple_tag(takes_context=True)
def display(context, text, toolkit=None):
    """Resolve a display string (`$t:` keys) for the active language:
    `{% display revision.title toolkit %}`."""
    return _shown(context, resolve(text, toolkit=toolkit))


@register.simple_tag(takes_context=True)
def tool_display_name(context, revision, tool_name, toolkit=None):
    """A tool's name as people see it: a RAGFlow plugin's `displayName` resolved, else the
    tool's own name: `{% tool_display_name revision tool.name toolkit %}`."""
    shown = tool_display(revision=revision, toolkit=toolkit or getattr(revision, "toolkit", None)).get(tool_name)
    return _shown(context, shown.name) if shown else tool_name


@register.simple_tag(takes_context=True)
def tool_display_description(context, revision, tool_name, toolkit=None):
    """A tool's description as people see it (a RAGFlow `displayDescription` resolved)."""
    shown = tool_display(revision=revision, toolkit=toolkit or getattr(revision, "toolkit", None)).get(tool_name)
    return _shown(context, shown.description) if shown else ""


@register.filter
def as_json_line(value) -> str:
    """Compact one-line JSON, for arguments in a table (never Python's repr of a dict)."""
    import json

    try:
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    except (TypeError, ValueError):
        return str(value)


@register.filter
def as_json(value) -> str:
    """Pretty JSON for arguments, events and results (escaped by the template as usual)."""
    import json

    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)
    except (TypeError, ValueError):
        return repr(value)


@register.filter
def index_polling(package) -> bool:
    """Whether the queue keeps asking for a package's index information (a check is under way)."""
    return index_checks.still_checking(package)


def _admins_count(context, known: str, count) -> int:
    """A count for the admins' menu (0 for everyone else): the page's own `known` value
    when it counted anyway, else `count()`."""
    if not is_admin(context.get("user") or AnonymousUser()):
        return 0
    value = context.get(known)
    return count() if value is None else value


@register.simple_tag(takes_context=True)
def pending_packages(context) -> int:
    """How many packages wait for an admin's decision (the menu's badge); the queue page
    passes `pending_count`."""
    return _admins_count(context, "pending_count", package_selectors.pending_count)


@register.simple_tag(takes_context=True)
def pending_reviews(context) -> int:
    """How many revisions wait for an admin's review (the menu's second badge); the queues
    pass `review_count`."""
    return _admins_count(context, "review_count", toolkit_selectors.review_count)


@register.filter
def status_detail(revision):
    """A revision's status detail in the page's language: `{{ revision|status_detail }}`."""
    return revision.detail_shown() if revision is not None else ""


@register.simple_tag(takes_context=True)
def page_query(context, number) -> str:
    """`?…page=N`: the request's query string (a search, filters) with another page number."""
    params = context["request"].GET.copy()
    params["page"] = number
    return "?" + params.urlencode()


@register.filter
def run_error(run):
    """Why a run (an invocation or an agent run) failed, in the page's language: `{{ invocation|run_error }}`."""
    return run.error_shown() if run is not None else ""
