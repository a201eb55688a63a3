"""Run the test suite in three pytest processes side by side (`make test`):

- `host`: the tests of the sandbox and of egress (tests/sandbox, tests/egress), the others that
  use the shared sandbox user or the egress test network, those of host-wide commands (the
  sweep of a crashed worker's leftovers, Redis's CLIENT KILL), and, so that the two host-wide
  parts take about as long, the browser tests, the API's fuzzing and the live serving tests;
- `workers`: the other tests that use what the whole host shares (sandboxes as uids of the pool,
  Celery workers, injected faults; see HOST in tests/conftest.py), one after another;
- `rest`: everything else.

Each part has its own test database, Redis database, data directory and range of the sandbox
uid pool (toolhub/settings_test.py). The outputs are printed one after the other when all have
ended; the exit status is the worst.

    python scripts/run_tests.py [pytest arguments]

With `-m` or a test path among the arguments, or TEST_PARTS=1, it is one plain pytest run."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The markers of the tests that share the host (tests/conftest.py's _HOST_WIDE, which a test
# keeps equal to this).
HOST = ("sandbox", "worker", "fault", "host")
HOST_EXPRESSION = " or ".join(HOST)


# The host-wide tests of the `host` part; the `workers` part runs the other host-wide tests.
# Most must be here: the shared sandbox user, the egress test network (in tests/egress and
# tests/browser/test_egress_browser.py), host-wide commands. The rest of tests/browser, the
# API's fuzzing and the live serving tests balance the parts (in CI: host 229 s and workers
# 776 s without them; 499 s and 591 s with the first two).
HOST_PART_TESTS = (
    "tests/sandbox",
    "tests/egress",
    "tests/browser",
    "tests/test_hardening.py",
    "tests/test_environments.py",
    "tests/test_crash_cleanup.py",
    "tests/test_run_notify.py",
    "tests/test_openapi_fuzz.py",
    "tests/test_serving_live.py",
)


def parts() -> dict[str, list[str]]:
    """Each part's pytest selection."""
    return {
        "host": ["-m", HOST_EXPRESSION, *HOST_PART_TESTS],
        "workers": ["-m", HOST_EXPRESSION, *(f"--ignore={path}" for path in HOST_PART_TESTS)],
        "rest": ["-m", f"not ({HOST_EXPRESSION})"],
    }


def main(arguments: list[str]) -> int:
    pytest = [sys.executable, "-m", "pytest"]
    paths = [word for word in arguments if not word.startswith("-") and (REPO / word.split("::")[0]).exists()]
    if "-m" in arguments or paths or os.environ.get("TEST_PARTS", "3") == "1":
        return subprocess.call([*pytest, *arguments], cwd=REPO)
    selections = parts()
    started = time.monotonic()
    running = {}
    for name, selection in selections.items():
        log = tempfile.TemporaryFile()
        process = subprocess.Popen(
            [*pytest, *selection, *arguments], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
            env=dict(os.environ, TOOLHUB_TEST_PART=name),
        )
        running[name] = (process, log)
    worst = 0
    for name, (process, log) in running.items():
        code = process.wait()
        log.seek(0)
        print(f"\n===== tests: {name} ({' '.join(selections[name])}) exited {code} =====", flush=True)
        sys.stdout.buffer.write(log.read())
        sys.stdout.flush()
        # 5: no test collected (a selection that leaves a part empty).
        worst = max(worst, 0 if code == 5 else code)
    print(f"\n===== tests: all parts ended in {time.monotonic() - started:.0f} s, exit {worst} =====")
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
