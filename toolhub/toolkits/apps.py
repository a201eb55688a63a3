from django.apps import AppConfig


class ToolkitsConfig(AppConfig):
    name = "toolhub.toolkits"
    label = "toolkits"

    def ready(self) -> None:
        # Refuse to start with a missing or malformed encryption key: finding out at the
        # first valve save would lose the value being saved.
        from toolhub.toolkits.valves import check_encryption_settings

        check_encryption_settings()
