"""The password login page, with failed-login throttling (toolhub.accounts.throttle)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpResponse
from django.template.response import TemplateResponse
from django.utils.translation import ngettext

from toolhub.accounts import throttle


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
        return context
