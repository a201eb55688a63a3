from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "toolhub.agents"
    label = "agents"
