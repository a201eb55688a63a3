from __future__ import annotations

from oauth2_provider.oauth2_validators import OAuth2Validator


class ClaimsValidator(OAuth2Validator):
    """The claims an organisation's provider sends: the email, whether it is verified, and the
    person's groups (this provider's own Django groups)."""

    # Every claim whatever the scopes (the groups claim belongs to none of the standard ones).
    oidc_claim_scope = None

    def get_additional_claims(self, request):
        user = request.user
        return {
            "email": user.email,
            "email_verified": True,
            "preferred_username": user.username,
            "groups": sorted(g.name for g in user.groups.all()),
        }
