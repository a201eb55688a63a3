from django.apps import AppConfig


class UsageConfig(AppConfig):
    name = "toolhub.usage"
    label = "usage"
