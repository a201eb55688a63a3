from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "toolhub.accounts"
    label = "accounts"
