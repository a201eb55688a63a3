from __future__ import annotations

from urllib.parse import urlsplit

from django import template
from django.utils.html import format_html
from django.utils.translation import gettext as _

from toolhub.toolkits.display import resolve

register = template.Library()


@register.simple_tag(takes_context=True)
def display(context, text, toolkit=None):
    """Resolve a display string (`$t:` keys) for the active language. Admins see a mark on
    keys that have no translation, so they know to add one."""
    resolved = resolve(text, toolkit=toolkit)
    if not resolved.translated:
        user = context.get("user")
        if user is not None and user.is_staff:
            return format_html('<span class="untranslated" title="{}">{}</span>', _("untranslated"), resolved.text)
    return resolved.text


@register.simple_tag
def safe_link(url, label=None, css=""):
    """Only http(s) links become anchors: a `javascript:` URL in hostile frontmatter stays text."""
    url = str(url or "")
    if urlsplit(url).scheme not in ("http", "https"):
        return label or url
    return format_html('<a href="{}" class="{}" rel="noopener noreferrer nofollow" target="_blank">{}</a>', url, css, label or url)
