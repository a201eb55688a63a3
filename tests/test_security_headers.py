"""Response headers: a strict Content-Security-Policy on every response, the usual
production headers behind TOOLHUB_HTTPS, and no template that needs inline script."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.urls import reverse

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/accounts/login/", "/no/such/page/", "/api/v1/toolkits"])
def test_every_response_carries_the_policy(client, path):
    response = client.get(path)
    policy = response.headers["Content-Security-Policy"]
    assert "script-src 'self';" in policy and "'unsafe-inline'" not in policy.split("script-src", 1)[1].split(";")[0]
    assert "'unsafe-eval'" not in policy
    assert "frame-ancestors 'none'" in policy and "object-src 'none'" in policy
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "same-origin"
    assert response.headers["X-Frame-Options"] == "DENY"


def test_no_template_has_inline_script_or_handlers():
    inline_script = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)
    handler = re.compile(r"\son[a-z]+\s*=", re.IGNORECASE)
    for template in (REPO / "templates").rglob("*.html"):
        text = template.read_text()
        assert not inline_script.search(text), template
        assert not handler.search(text), template
        assert "javascript:" not in text.lower(), template
        # htmx filters ("[...]" in hx-trigger) and hx-on run code through eval.
        assert not re.search(r'hx-trigger="[^"]*\[', text), template
        assert "hx-on" not in text, template


def test_htmx_may_not_evaluate_code():
    base = (REPO / "templates" / "base.html").read_text()
    assert '"allowEval": false' in base and '"allowScriptTags": false' in base


def test_production_headers_are_behind_the_https_setting(client, carol, settings, monkeypatch):
    import subprocess
    import sys

    script = (
        "import django, os; django.setup(); from django.conf import settings as s; "
        "print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS)"
    )
    import os

    env = dict(os.environ, DJANGO_SETTINGS_MODULE="toolhub.settings_test")
    on = subprocess.run([sys.executable, "-c", script], env=dict(env, TOOLHUB_HTTPS="1"), capture_output=True, text=True, cwd=REPO, check=True)
    off = subprocess.run([sys.executable, "-c", script], env=dict(env, TOOLHUB_HTTPS="0"), capture_output=True, text=True, cwd=REPO, check=True)
    assert on.stdout.split() == ["True", "True", "True", "31536000"]
    assert off.stdout.split()[:3] == ["False", "False", "False"]


def test_the_policy_can_be_switched_off(client, settings):
    settings.TOOLHUB_CSP = False
    assert "Content-Security-Policy" not in client.get(reverse("login")).headers
