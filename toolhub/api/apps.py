from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "toolhub.api"
    label = "api"
