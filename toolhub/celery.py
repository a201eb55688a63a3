"""The Celery application. Workers listen on two queues: `builds` (locks and environments)
and `sandbox` (introspection and tool invocations)."""

import os

from celery import Celery
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolhub.settings")

app = Celery("toolhub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def _check_sandbox(**kwargs) -> None:
    from toolhub.toolkits.sandboxing import startup_check

    startup_check()
