from django.apps import AppConfig


class ServingConfig(AppConfig):
    name = "toolhub.serving"
    label = "serving"
    verbose_name = "Serving tools to LLM apps"
