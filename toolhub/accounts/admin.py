"""Django's own admin pages for users, with ToolHub's one rule about people that a plain form
would let through: no two people share an email, whatever its case (docs/people.md). Everything
else about people is done on the Users and Groups pages."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.forms import UserChangeForm, UserCreationForm

User = get_user_model()


class _UniqueEmail:
    def clean_email(self):
        email = (self.cleaned_data.get("email") or "").strip()  # type: ignore[attr-defined]
        if email:
            taken = User.objects.filter(email__iexact=email)
            if self.instance.pk:  # type: ignore[attr-defined]
                taken = taken.exclude(pk=self.instance.pk)  # type: ignore[attr-defined]
            if taken.exists():
                raise forms.ValidationError("Another person has this email.")
        return email


class PersonChangeForm(_UniqueEmail, UserChangeForm):
    pass


class PersonCreationForm(_UniqueEmail, UserCreationForm):
    class Meta(UserCreationForm.Meta):
        fields = ("username", "email")


class PersonAdmin(UserAdmin):
    form = PersonChangeForm
    add_form = PersonCreationForm
    add_fieldsets = ((None, {"classes": ("wide",), "fields": ("username", "email", "password1", "password2")}),)


admin.site.unregister(User)
admin.site.register(User, PersonAdmin)
