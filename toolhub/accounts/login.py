"""The login page: the password form, with failed-login throttling (toolhub.accounts.throttle), and
the button of the identity provider when there is one (toolhub.accounts.oidc)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.template.response import TemplateResponse
from django.utils.translation import ngettext

from toolhub.accounts import oidc, throttle


class ThrottledAuthenticationForm(AuthenticationForm):
    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username") or ""
        ip = throttle.client_ip(self.request)
        wait = throttle.locked_for(username=username, ip=ip)
        if wait:
            minutes = max(1, (wait + 59) // 60)
            raise forms.ValidationError(
                ngettext(
                    "Too many failed logins. Try again in %(minutes)d minute.",
                    "Too many failed logins. Try again in %(minutes)d minutes.",
                    minutes,
                )
                % {"minutes": minutes},
                code="throttled",
            )
        try:
            cleaned = super().clean()
        except forms.ValidationError:
            if username:
                throttle.record_failure(username=username, ip=ip)
            raise
        throttle.clear(username=username)
        return cleaned


class LoginView(auth_views.LoginView):
    form_class = ThrottledAuthenticationForm

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not oidc.local_passwords():
            # Passwords are switched off: only the identity provider signs people in.
            return HttpResponseNotAllowed(["GET"])
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        response = super().form_invalid(form)
        throttled = any(error.code == "throttled" for error in form.errors.as_data().get("__all__", []))
        if throttled and isinstance(response, TemplateResponse) and response.context_data is not None:
            response.status_code = 429
            response.context_data["throttled"] = True
        return response

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.setdefault("throttled", False)
        context["oidc_enabled"] = oidc.enabled()
        context["oidc_provider"] = settings.TOOLHUB_OIDC_PROVIDER_NAME
        context["local_passwords"] = oidc.local_passwords()
        return context
