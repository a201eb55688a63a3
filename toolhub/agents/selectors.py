"""Reads of agent runs, shared by the pages and the API."""

from __future__ import annotations

import uuid

from django.db.models import QuerySet
from django.http import Http404

from toolhub.accounts.roles import is_admin
from toolhub.agents.models import AgentRun


def get_agent_run_for_user(*, user, run_id) -> AgentRun:
    """The one way pages and endpoints fetch an agent run: its user and admins see it,
    nobody else learns it exists."""
    try:
        pk = run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id))
    except ValueError:
        raise Http404 from None
    run = AgentRun.objects.select_related("strategy", "user").filter(pk=pk).first()
    if run is None or not user.is_authenticated or not (is_admin(user) or run.user_id == user.pk):
        raise Http404
    return run


def agent_run_list(*, user) -> QuerySet[AgentRun]:
    runs = AgentRun.objects.select_related("strategy", "user").defer("log", "traceback", "query")
    return runs if is_admin(user) else runs.filter(user=user)
