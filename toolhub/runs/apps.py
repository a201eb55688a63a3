from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "toolhub.runs"
    label = "runs"
