"""Run the test suite in two pytest processes side by side (`make test`): the tests that use
what the whole host shares (sandboxes, Celery workers, injected faults, Redis-wide commands; see
HOST in tests/conftest.py) one after another in one, everything else in the other. Each part has
its own test database, Redis database and data directory (toolhub/settings_test.py). The two
outputs are printed one after the other when both have ended; the exit status is the worse.

    python scripts/run_tests.py [pytest arguments]

With `-m` among the arguments, or TEST_PARTS=1, it is one plain pytest run."""

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


def main(arguments: list[str]) -> int:
    pytest = [sys.executable, "-m", "pytest"]
    if "-m" in arguments or os.environ.get("TEST_PARTS", "2") == "1":
        return subprocess.call([*pytest, *arguments], cwd=REPO)
    parts = {"host": HOST_EXPRESSION, "rest": f"not ({HOST_EXPRESSION})"}
    started = time.monotonic()
    running = {}
    for name, expression in parts.items():
        log = tempfile.TemporaryFile()
        process = subprocess.Popen(
            [*pytest, "-m", expression, *arguments], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
            env=dict(os.environ, TOOLHUB_TEST_PART=name),
        )
        running[name] = (process, log)
    worst = 0
    for name, (process, log) in running.items():
        code = process.wait()
        log.seek(0)
        print(f"\n===== tests: {name} (-m {parts[name]!r}) exited {code} =====", flush=True)
        sys.stdout.buffer.write(log.read())
        sys.stdout.flush()
        # 5: no test collected (a selection that leaves one part empty).
        worst = max(worst, 0 if code == 5 else code)
    print(f"\n===== tests: both parts ended in {time.monotonic() - started:.0f} s, exit {worst} =====")
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
