"""What a call of a toolkit with an egress grant costs cold and warm.

    .venv/bin/python bench/egress.py [--runs N]

Rows, each over N runs after two warm-up runs (p50 and p95), all through
`toolhub.toolkits.sandboxing.run` as the worker calls it, with the policy a grant of any public
host gives (`sandboxing.egress_policy`):

- echo, cold: a new bubblewrap sandbox and a new egress proxy (thread, socket, directory) for
  each call; the tool returns its argument and sends nothing.
- echo, warm: the same call on a warm sandbox of that policy, whose proxy lives as long as it
  (the proxy ends each call: that call's report, counters from nothing).
- one request, cold and warm: the tool sends one HTTP request through the proxy with urllib (the
  runtime's forwarder in the sandbox, the socket, the proxy), to 127.0.0.1, which the proxy
  refuses: the whole way through the proxy and back without reaching any server (a real
  upstream costs the same cold or warm).
- echo, warm, no grant: the plain warm call, for reference.

Everything is scratch, as in bench/invoke.py (whose setup this reuses): a fresh data directory,
database and environment. Needs root, bubblewrap and the sandbox users, like the worker.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.invoke import Scratch, _measure, _percentile, sandbox_request  # noqa: E402
from bench.invoke import ready_toolkit as ready_echo_toolkit  # noqa: E402

TOOLKIT = '''"""
title: Bench Egress
author: ToolHub bench
description: A trivial tool and one that sends a request, for a toolkit with an egress grant.
version: 1.0.0
"""

import urllib.error
import urllib.request


class Tools:
    def echo(self, text: str) -> str:
        """
        Return the text unchanged.
        :param text: Any text
        """
        return text

    def request(self) -> int:
        """Send one request through the egress proxy; the status it answered."""
        try:
            with urllib.request.urlopen("http://127.0.0.1:9/", timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code
'''


def ready_toolkit():
    """Upload, build and grant the toolkit in this process."""
    from toolhub.toolkits.models import Toolkit
    from toolhub.toolkits.services import toolkit_set_egress

    user, toolkit = ready_echo_toolkit(TOOLKIT, "bench_egress")
    toolkit_set_egress(toolkit=toolkit, granted=True, hosts=[], by=user)
    return Toolkit.objects.select_related("current_revision").get(pk=toolkit.pk)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each row (default 20)")
    args = parser.parse_args()

    scratch = Scratch()
    try:
        import django

        django.setup()
        from django.conf import settings
        from django.core.management import call_command

        from toolhub.toolkits import sandboxing
        from toolhub.toolkits.building import revision_environment

        call_command("migrate", verbosity=0)
        toolkit = ready_toolkit()
        revision = toolkit.current_revision
        env_dir = revision_environment(revision)
        policy = sandboxing.egress_policy(toolkit, revision)
        assert policy is not None
        settings.TOOLHUB_SANDBOX_WARM = 1
        settings.TOOLHUB_SANDBOX_WARM_MAX_CALLS = 10_000
        settings.TOOLHUB_SANDBOX_WARM_MAX_AGE = 3600.0

        def call(tool: str, expected: object, *, warm: bool, egress=policy) -> None:
            request = sandbox_request(tool, {"text": "hello"} if tool == "echo" else {}, "bench_egress")
            outcome = sandboxing.run(
                revision=revision, env_dir=env_dir, request=request, on_message=lambda message: None,
                egress=egress, warm=warm,
            )
            if (outcome.final or {}).get("result") != expected or (egress is not None and outcome.egress is None):
                raise SystemExit(f"the call failed: {outcome}")

        rows = [
            ("echo, cold (sandbox + proxy per call)", _measure(lambda: call("echo", "hello", warm=False), args.runs)),
            ("echo, warm (sandbox and proxy reused)", _measure(lambda: call("echo", "hello", warm=True), args.runs)),
            ("one refused request, cold", _measure(lambda: call("request", "403", warm=False), args.runs)),
            ("one refused request, warm", _measure(lambda: call("request", "403", warm=True), args.runs)),
            ("echo, warm, no grant (reference)", _measure(lambda: call("echo", "hello", warm=True, egress=None), args.runs)),
        ]
        pool = sandboxing.warm_pool()
        assert pool is not None
        started = pool.started
        pool.close()

        print()
        print(f"{'what':<42} {'runs':>5} {'p50 ms':>10} {'p95 ms':>10}")
        print("-" * 70)
        for name, times in rows:
            print(f"{name:<42} {len(times):>5} {statistics.median(times) * 1000:>10.4g} {_percentile(times, 0.95) * 1000:>10.4g}")
        print("-" * 70)
        medians = [statistics.median(times) for _name, times in rows]
        print(f"cold ÷ warm, echo: {medians[0] / medians[1]:.1f}; one request: {medians[2] / medians[3]:.1f}")
        print(f"warm sandboxes started: {started} (one per policy: the grant's and none)")
    finally:
        scratch.remove(False)


if __name__ == "__main__":
    main()
