"""ToolHub: manage, approve, configure and test-run the Python tools LLM applications call."""

from .celery import app as celery_app

__all__ = ["celery_app"]
