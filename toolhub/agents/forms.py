from __future__ import annotations

from django import forms
from django.contrib.auth.models import Group
from django.utils.translation import gettext_lazy as _

from toolhub.agents.models import ModelConnection, Use
from toolhub.agents.services import MAX_KEY, MAX_NAME, MAX_URL, ConnectionInput
from toolhub.vault.secret_fields import MASK


class ModelConnectionForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=MAX_NAME)
    base_url = forms.CharField(
        label=_("Base URL"), max_length=MAX_URL,
        help_text=_("The OpenAI-compatible root, ending in /v1: e.g. http://127.0.0.1:11434/v1 for Ollama."),
    )
    api_key = forms.CharField(
        label=_("API key"), required=False, max_length=MAX_KEY,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
    )
    clear_api_key = forms.BooleanField(label=_("Remove the stored key"), required=False)
    models = forms.CharField(
        label=_("Models offered"), required=False, widget=forms.Textarea(attrs={"rows": 4}),
        help_text=_("One model name per line, as the endpoint names it."),
    )
    headers = forms.CharField(
        label=_("Extra headers"), required=False, widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_("One “Name: value” per line. Stored values show as ********; leave them so to keep them."),
    )
    timeout_seconds = forms.FloatField(label=_("Time-out (seconds)"), initial=60.0, min_value=1, max_value=600)
    use = forms.ChoiceField(label=_("Who may use it"), choices=Use.choices, initial=Use.EVERYONE, widget=forms.RadioSelect)
    groups = forms.ModelMultipleChoiceField(
        label=_("Groups"), required=False, queryset=Group.objects.order_by("name"), to_field_name="name",
        widget=forms.CheckboxSelectMultiple,
    )

    def __init__(self, *args, connection: ModelConnection | None = None, **kwargs) -> None:
        self.connection = connection
        if connection is not None and "initial" not in kwargs:
            kwargs["initial"] = {
                "name": connection.name, "base_url": connection.base_url,
                "models": "\n".join(connection.offered_models),
                "headers": "\n".join(f"{name}: {MASK}" for name in connection.header_names),
                "timeout_seconds": connection.timeout_seconds, "use": connection.use,
                "groups": list(connection.groups.all()),
            }
        super().__init__(*args, **kwargs)
        if connection is not None and connection.api_key_set:
            self.fields["api_key"].help_text = _("A key is stored. Leave this empty to keep it.")
        else:
            del self.fields["clear_api_key"]

    def clean_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        for number, line in enumerate(self.cleaned_data["headers"].splitlines(), 1):
            if not line.strip():
                continue
            name, colon, value = line.partition(":")
            if not colon:
                raise forms.ValidationError(_("Line %(n)d is not “Name: value”.") % {"n": number})
            headers[name.strip()] = value.strip()
        return headers

    def to_input(self) -> ConnectionInput:
        data = self.cleaned_data
        api_key: str | None = data["api_key"] or None
        if data.get("clear_api_key"):
            api_key = ""
        return ConnectionInput(
            name=data["name"], base_url=data["base_url"], models=data["models"].splitlines(),
            timeout_seconds=data["timeout_seconds"], use=data["use"],
            groups=[g.name for g in data["groups"]], api_key=api_key, headers=data["headers"],
        )
