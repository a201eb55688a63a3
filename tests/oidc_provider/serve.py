"""Start the test OIDC provider: `python -m tests.oidc_provider.serve` with OIDC_PROVIDER_DIR and
OIDC_PROVIDER_PORT set and OIDC_PROVIDER_SETUP naming a JSON file of the client and the people:
{"client": {"id", "secret", "redirect_uri"}, "people": [{"username", "email", "password", "groups"}]}."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


def _prepare(directory: Path) -> None:
    (directory / "secret").write_text(secrets.token_urlsafe(50))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (directory / "key.pem").write_bytes(pem)


def main() -> None:
    directory = Path(os.environ["OIDC_PROVIDER_DIR"])
    _prepare(directory)
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.oidc_provider.settings"
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.core.management import call_command
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0)
    setup = json.loads(Path(os.environ["OIDC_PROVIDER_SETUP"]).read_text())
    client = setup["client"]
    Application.objects.create(
        name="ToolHub", client_id=client["id"], client_secret=client["secret"], redirect_uris=client["redirect_uri"],
        client_type=Application.CLIENT_CONFIDENTIAL, authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        algorithm=Application.RS256_ALGORITHM, skip_authorization=True,
    )
    for person in setup["people"]:
        user = get_user_model().objects.create_user(person["username"], person["email"], person["password"])
        user.groups.set([Group.objects.get_or_create(name=name)[0] for name in person["groups"]])
    call_command("runserver", f"127.0.0.1:{os.environ['OIDC_PROVIDER_PORT']}", use_reloader=False, use_threading=True)


if __name__ == "__main__":
    main()
