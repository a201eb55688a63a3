from django.apps import AppConfig


class PackagesConfig(AppConfig):
    name = "toolhub.packages"
    label = "packages"
