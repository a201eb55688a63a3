"""A real OpenID Connect provider for the sign-in tests: django-oauth-toolkit in a Django project
of its own, run in a second process on loopback by tests/oidc_provider/serve.py. Its database
(SQLite) and signing key live in OIDC_PROVIDER_DIR, a temporary folder of the test."""

from __future__ import annotations

import os
from pathlib import Path

DIR = Path(os.environ["OIDC_PROVIDER_DIR"])
PORT = int(os.environ["OIDC_PROVIDER_PORT"])

SECRET_KEY = (DIR / "secret").read_text()
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.oidc_provider.urls"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(DIR / "provider.sqlite3")}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
LOGIN_URL = "/login/"
TEMPLATES: list = []
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_ISS_ENDPOINT": f"http://127.0.0.1:{PORT}/o",
    "OIDC_RSA_PRIVATE_KEY": (DIR / "key.pem").read_text(),
    "SCOPES": {"openid": "OpenID Connect", "email": "Email", "profile": "Profile"},
    "OAUTH2_VALIDATOR_CLASS": "tests.oidc_provider.validator.ClaimsValidator",
    "PKCE_REQUIRED": True,
}
