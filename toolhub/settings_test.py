"""Settings for the test suite: test defaults first, then the real settings. Variables set
in the environment (CI's DATABASE_URL and REDIS_URL) win over these defaults, and worker
processes the tests start inherit them."""

import os
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("TOOLHUB_TESTING", "1")
# Under /tmp, so the unprivileged sandbox user can traverse it wherever the checkout lives.
os.environ.setdefault("TOOLHUB_DATA_DIR", "/tmp/toolhub-test-data")


# A part of a test run beside others (scripts/run_tests.py sets TOOLHUB_TEST_PART): its number
# picks its Redis database, and the first user of its range of the sandbox uid pool (16 each,
# TOOLHUB_TEST_UID_RANGE;
# `scripts/system-setup test` makes 32), so that its pool leases and survivor checks never meet
# another part's sandboxes.
_PARTS = {"host": 0, "rest": 1, "workers": 2}
TOOLHUB_TEST_UID_RANGE = 16
_UID_FIRST = {"workers": TOOLHUB_TEST_UID_RANGE}


def _own_part(part: str) -> None:
    """A part gets a data directory, a Redis database and a range of sandbox uids of its own
    (and a test database, below), so a Celery worker one of them starts never takes another's
    messages. Applied once: the workers and servers a test starts inherit the environment, and
    these settings, already shifted."""
    if part not in _PARTS or os.environ.get("TOOLHUB_TEST_PART_APPLIED") == part:
        return
    os.environ["TOOLHUB_TEST_PART_APPLIED"] = part
    number = _PARTS[part]
    os.environ["TOOLHUB_DATA_DIR"] = f"{os.environ['TOOLHUB_DATA_DIR'].rstrip('/')}-{part}"
    os.environ["TOOLHUB_SANDBOX_UID_FIRST"] = str(_UID_FIRST.get(part, 0))
    redis_url = os.environ.get("REDIS_URL", "")
    if redis_url:
        base, _, db = redis_url.rpartition("/")
        if not db.isdigit():  # no database in the URL: Redis's 0
            base, db = redis_url.rstrip("/"), "0"
        os.environ["REDIS_URL"] = f"{base}/{(int(db) + 1 + number) % 16}"


_own_part(os.environ.get("TOOLHUB_TEST_PART", ""))
os.environ.setdefault("TOOLHUB_ENV_FILE", "/nonexistent")
os.environ.setdefault("TOOLHUB_ENCRYPTION_KEYS", "k0TA1fW4Wk2s3kX0Zr6Cz9Gm4t1sR8hL2bQ5yE7uN0o=")
os.environ.setdefault("TOOLHUB_FIND_LINKS", str(_REPO / ".data" / "wheelhouse"))
os.environ.setdefault("TOOLHUB_NO_INDEX", "1")
# Calls made in the test process itself stay cold: a warm sandbox would outlive the test that
# started it. Tests of warm workers set it for their worker process.
os.environ.setdefault("TOOLHUB_SANDBOX_WARM", "0")
# The warm sandboxes' memory budget of this test run's own, not the host's (other sessions'
# sandboxes on the same host would otherwise count against it).
os.environ.setdefault("TOOLHUB_SANDBOX_WARM_BUDGET_DIR", os.path.join(os.environ["TOOLHUB_DATA_DIR"], "warm-budget"))
# Playwright's sync API runs an event loop in the test thread; the ORM calls the tests make
# around it are still synchronous.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
os.environ["DJANGO_SETTINGS_MODULE"] = "toolhub.settings_test"

from toolhub.settings import *  # noqa: E402,F403
from toolhub.settings import DATA_DIR  # noqa: E402

os.chmod(DATA_DIR, 0o711)
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
if os.environ.get("TOOLHUB_TEST_PART") in _PARTS:
    _test = DATABASES["default"].setdefault("TEST", {})  # noqa: F405
    if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
        _test.setdefault("NAME", os.path.join(DATA_DIR, "test.sqlite3"))
    else:
        _test.setdefault("NAME", f"test_{DATABASES['default']['NAME']}_{os.environ['TOOLHUB_TEST_PART']}")  # noqa: F405
