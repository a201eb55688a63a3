"""Warnings about a revision that do not stop it from being stored: shown after an upload,
kept on the Overview and returned by the API. Each is a dictionary with a stable `code`."""

from __future__ import annotations

from django.utils.translation import gettext as _

from toolhub.toolkits.models import Revision


def revision_warnings(revision: Revision | None) -> list[dict]:
    if revision is None:
        return []
    warnings = []
    for site in revision.open_webui_imports:
        values = {"line": site.line, "module": site.module}
        message = _(
            "Line %(line)s imports %(module)s, a module of Open WebUI itself. ToolHub runs toolkits outside"
            " Open WebUI and cannot provide Open WebUI's internals, so this import fails here."
        ) % values
        if site.optional:
            message = _(
                "Line %(line)s imports %(module)s, a module of Open WebUI itself, which ToolHub cannot"
                " provide; the import is in a try/except ImportError block, so the toolkit loads without it."
            ) % values
        warnings.append({
            "code": "open_webui_import",
            "revision": revision.number,
            "line": site.line,
            "module": site.module,
            "optional": site.optional,
            "message": message,
        })
    return warnings
