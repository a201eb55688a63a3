"""What the configured package index says about the names in the approval queue: looked up
by a task (toolhub.packages.tasks), stored on the package row, never fetched while a page
waits. The index is the one builds use (TOOLHUB_INDEX_URL, else PyPI, then
TOOLHUB_EXTRA_INDEX_URLS); with TOOLHUB_NO_INDEX builds read wheelhouses only, and nothing is
looked up."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError
from packaging.utils import canonicalize_name

from toolhub import broker
from toolhub.packages import index_client
from toolhub.packages.models import IndexState, Package

CHECK_TASK = "toolhub.packages.tasks.check_package_index"
PYPI = "https://pypi.org/simple/"
# A check no worker finished in this time is asked for again (and no longer polled for).
CHECK_STALE = timedelta(minutes=2)
# An index that could not be read is asked again sooner than one that answered.
ERROR_MAX_AGE = timedelta(minutes=10)

logger = logging.getLogger(__name__)


def enabled() -> bool:
    return not settings.TOOLHUB_NO_INDEX


def indexes() -> list[str]:
    return [settings.TOOLHUB_INDEX_URL or PYPI, *settings.TOOLHUB_EXTRA_INDEX_URLS]


def local_places() -> list[str]:
    """The wheelhouses and file:// indexes builds read, which may be read at upload time too
    (toolhub.packages.top_level): the network is never asked while a page waits."""
    places = [*settings.TOOLHUB_FIND_LINKS]
    if settings.TOOLHUB_INDEX_URL:
        places.append(settings.TOOLHUB_INDEX_URL)
    places.extend(settings.TOOLHUB_EXTRA_INDEX_URLS)
    return places


def target_python() -> tuple[int, int]:
    """The Python environments are built for, from the interpreter's name (python3.11)."""
    found = re.search(r"python(\d)\.(\d+)", settings.TOOLHUB_INTERPRETER)
    return (int(found[1]), int(found[2])) if found else sys.version_info[:2]


def check(*, name: str) -> index_client.IndexInfo:
    """Look the name up now and store the answer on its row (the task's body)."""
    info = index_client.lookup(
        name, indexes=indexes(), python=target_python(),
        timeout=settings.TOOLHUB_INDEX_CHECK_TIMEOUT, cert=settings.TOOLHUB_INDEX_CERT or None,
    )
    Package.objects.filter(name=name).update(
        index_state=info.state, index_info=info.as_dict(), index_checked_at=timezone.now()
    )
    return info


def is_stale(package: Package) -> bool:
    """Whether the package's index information is missing, or old enough to ask again."""
    now = timezone.now()
    if package.index_state == IndexState.UNCHECKED:
        return True
    if package.index_state == IndexState.CHECKING:
        return package.index_requested_at is None or now - package.index_requested_at > CHECK_STALE
    max_age = ERROR_MAX_AGE if package.index_state == IndexState.ERROR else timedelta(seconds=settings.TOOLHUB_INDEX_CHECK_MAX_AGE)
    return package.index_checked_at is None or now - package.index_checked_at > max_age


def still_checking(package: Package) -> bool:
    """A check is queued and a worker may still answer it (the page polls meanwhile)."""
    return package.index_state == IndexState.CHECKING and not is_stale(package)


def queue_checks(packages: Iterable[Package]) -> None:
    """Queue a lookup for each package whose information is missing or old; one update for
    all of them, and the rows passed in show them as being checked."""
    if not enabled():
        return
    now = timezone.now()
    wanted = [package for package in packages if is_stale(package)]
    if not wanted:
        return
    names = [package.name for package in wanted]
    Package.objects.filter(name__in=names).update(index_state=IndexState.CHECKING, index_requested_at=now)
    for package in wanted:
        package.index_state, package.index_requested_at = IndexState.CHECKING, now
    transaction.on_commit(lambda: _send(names))


def queue_checks_for(names: Iterable[str]) -> None:
    """queue_checks for names (as a revision asks for them)."""
    if enabled():
        queue_checks(Package.objects.filter(name__in=[canonicalize_name(n) for n in names]).only(
            "name", "index_state", "index_requested_at", "index_checked_at"
        ))


def _send(names: list[str]) -> None:
    """Send a check for each name; at the first refusal of the broker the names not sent go
    back to unchecked (a page asks for them again), and nothing waits on kombu's retries."""
    for sent, name in enumerate(names):
        try:
            broker.send(CHECK_TASK, name)
        except (BrokerError, OSError) as exc:
            unsent = names[sent:]
            logger.error("could not queue index checks for %s: %s", ", ".join(unsent), exc)
            Package.objects.filter(name__in=unsent, index_state=IndexState.CHECKING).update(
                index_state=IndexState.UNCHECKED
            )
            return
