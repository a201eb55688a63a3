"""The Celery application. Workers listen on two queues: `builds` (locks and environments)
and `sandbox` (introspection and tool invocations)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolhub.settings")

app = Celery("toolhub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
