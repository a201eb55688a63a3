"""The usage figures with a large history: the Usage page, a toolkit's Overview and
GET /api/v1/usage timed through one real uvicorn server (toolhub.asgi, as bench/serve.py
starts it) on a scratch PostgreSQL database, first with a small history, then with
1,000,000 invocations (inserted by PostgreSQL itself with generate_series) and the rollup
built from them.

    .venv/bin/python bench/usage.py [--invocations N] [--small N] [--runs R] [--port P]

Rows: each page's median and p95 over R requests (after two warm-up requests) with the small
history and with the large one, and how long the rollup took to build and to fold once more
when caught up. `DATABASE_URL` must be PostgreSQL (the scratch database is created next to
the one it names and dropped at the end). No worker is needed: the rollup is built in this
process by the same service the scheduled task calls."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

import invoke as base  # noqa: E402 - bench/invoke.py: scratch setup.
import serve  # noqa: E402 - bench/serve.py: the uvicorn server.

TOOLKITS = 20
USERS = 50
CLIENTS = 5
DAYS = 30

# Rows made by PostgreSQL: a toolkit, tool, user, client and surface per row from the row's
# number, a time in the last DAYS days, 5 % failed and 1 % timed out, durations skewed short.
SEED_SQL = """
INSERT INTO runs_invocation (
    id, toolkit_id, revision_id, tool, arguments, messages, files, user_id, client_id, surface, status,
    result, result_type, error, traceback, "limit", created_at, started_at, finished_at, sent_at, sends
)
SELECT gen_random_uuid(), (%(toolkits)s::bigint[])[1 + g %% %(k)s], (%(revisions)s::bigint[])[1 + g %% %(k)s],
       (ARRAY['search', 'fetch', 'summarise'])[1 + (g / 7) %% 3], '{}'::jsonb, '[]'::jsonb, '[]'::jsonb,
       (%(users)s::bigint[])[1 + (g / 3) %% %(u)s],
       CASE WHEN g %% 4 = 0 THEN NULL ELSE (%(clients)s::bigint[])[1 + g %% %(c)s] END,
       (ARRAY['api', 'mcp', 'openapi', 'agent', 'page'])[1 + (g / 11) %% 5],
       CASE WHEN g %% 20 = 0 THEN 'failed' WHEN g %% 97 = 0 THEN 'timed_out' ELSE 'succeeded' END,
       NULL, '', CASE WHEN g %% 20 = 0 THEN 'ValueError: no such record' ELSE '' END, '', '',
       t, t + interval '3 milliseconds', t + interval '3 milliseconds' + d * interval '1 millisecond', t, 1
FROM (
    SELECT g, now() - random() * interval '%(days)s days' AS t, (power(random(), 3) * 4000)::int AS d
    FROM generate_series(%(first)s, %(last)s) AS g
) AS rows
"""


def setup_people():
    from django.contrib.auth import get_user_model

    from toolhub.accounts import clients
    from toolhub.toolkits import services

    users = get_user_model()
    admin = users.objects.create_user("bench-admin", "admin@example.org", "pw", is_staff=True, is_superuser=True)
    people = users.objects.bulk_create([users(username=f"user{i:02d}") for i in range(USERS)])
    source = (REPO / "toolhub" / "toolkits" / "demo" / "library_lookup.py").read_text()
    toolkits = [services.toolkit_create(source=source, user=admin, slug=f"bench_{i:02d}").toolkit for i in range(TOOLKITS)]
    apps = [clients.client_create(name=f"App {i}", by=admin)[0] for i in range(CLIENTS)]
    return admin, people, toolkits, apps


def seed(count: int, first: int, people, toolkits, apps) -> float:
    from django.db import connection

    started = time.perf_counter()
    step = 200_000
    for start in range(first, first + count, step):
        last = min(start + step, first + count) - 1
        with connection.cursor() as cursor:
            cursor.execute(SEED_SQL, {
                "toolkits": [t.pk for t in toolkits], "revisions": [t.latest_revision().pk for t in toolkits], "k": len(toolkits),
                "users": [u.pk for u in people], "u": len(people), "clients": [a.pk for a in apps], "c": len(apps),
                "days": DAYS, "first": start, "last": last,
            })
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_invocation")
    return time.perf_counter() - started


def fold_all() -> tuple[float, int]:
    """Build the rollup from nothing: the seeded history is older than the watermark, as an
    import of old invocations would be (services.usage_refold)."""
    from django.db import connection

    from toolhub.usage import services

    services.usage_refold()
    started = time.perf_counter()
    runs = 0
    while True:
        runs += 1
        if services.usage_fold().caught_up:
            break
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE usage_usagehour")
    return time.perf_counter() - started, runs


def time_pages(url: str, cookie: str, token: str, slug: str, runs: int) -> dict[str, list[float]]:
    import httpx2

    pages = {
        "Usage page, 7 days by tool": ("/usage/", "cookie"),
        "Usage page, 30 days by user": ("/usage/?range=30d&group=user", "cookie"),
        "Usage page, 30 days CSV by tool": ("/usage/?range=30d&group=tool&format=csv", "cookie"),
        "toolkit Overview (admin: with last errors)": (f"/toolkits/{slug}/", "cookie"),
        "GET /api/v1/usage?group_by=tool&bucket=day (7 d)": ("/api/v1/usage?group_by=tool&bucket=day", "token"),
        "GET /api/v1/usage?group_by=user (30 d, by day)": (f"/api/v1/usage?group_by=user&since={_days_ago(DAYS)}", "token"),
    }
    times: dict[str, list[float]] = {name: [] for name in pages}
    with httpx2.Client(base_url=url, timeout=120) as http:
        for round_ in range(runs + 2):
            # Round robin, so that the shared machine's changing load weighs on every row alike.
            for name, (path, auth) in pages.items():
                headers = {"Cookie": f"sessionid={cookie}"} if auth == "cookie" else {"Authorization": f"Bearer {token}"}
                started = time.perf_counter()
                response = http.get(path, headers=headers)
                elapsed = time.perf_counter() - started
                if response.status_code != 200:
                    raise SystemExit(f"{path} answered {response.status_code}: {response.text[:300]}")
                if round_ >= 2:
                    times[name].append(elapsed)
    return times


def _days_ago(days: int) -> str:
    from datetime import UTC, datetime, timedelta

    return (datetime.now(UTC) - timedelta(days=days) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:00:00Z")


def _ms(times: list[float]) -> str:
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * len(ordered))) - 1)]
    return f"{statistics.median(ordered) * 1000:7.1f} {p95 * 1000:7.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--invocations", type=int, default=1_000_000, help="the large history (default 1,000,000)")
    parser.add_argument("--small", type=int, default=2_000, help="the small history (default 2,000)")
    parser.add_argument("--runs", type=int, default=30, help="requests per page and history (default 30)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args()

    scratch = base.Scratch()
    if not scratch.pg_name:
        scratch.remove(keep=False)
        raise SystemExit("bench/usage.py needs a PostgreSQL DATABASE_URL")
    server = None
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.test import Client

        from toolhub.accounts.models import ApiToken

        call_command("migrate", verbosity=0)
        admin, people, toolkits, apps = setup_people()
        browser = Client()
        browser.force_login(admin)
        cookie = browser.cookies["sessionid"].value
        _token, token = ApiToken.issue(user=admin, name="bench")
        slug = toolkits[0].slug

        seed(args.small, 1, people, toolkits, apps)
        fold_all()
        server = serve.Server(scratch, args.port)
        small = time_pages(server.url, cookie, token, slug, args.runs)

        seconds = seed(args.invocations - args.small, args.small + 1, people, toolkits, apps)
        print(f"seeded {args.invocations:,} invocations in {seconds:.1f} s", flush=True)
        build, fold_runs = fold_all()
        from toolhub.usage import services
        from toolhub.usage.models import UsageHour

        started = time.perf_counter()
        services.usage_fold()
        again = time.perf_counter() - started
        rows = UsageHour.objects.count()
        large = time_pages(server.url, cookie, token, slug, args.runs)

        print(f"\nrollup: built from {args.invocations:,} invocations in {build:.1f} s ({fold_runs} runs of at most {services.MAX_SPAN.days} day(s)), "
              f"{rows:,} rows; one more fold when caught up: {again * 1000:.0f} ms")
        print(f"through uvicorn (toolhub.asgi), {args.runs} requests each, ms\n")
        print(f"{'page':52} {f'{args.small:,} invocations':>15}   {f'{args.invocations:,} invocations':>17}")
        print(f"{'':52} {'median     p95':>15}   {'median     p95':>17}")
        for name in small:
            print(f"{name:52} {_ms(small[name]):>15}   {_ms(large[name]):>17}")
    finally:
        if server is not None:
            server.stop()
        scratch.remove(keep=args.keep)


if __name__ == "__main__":
    main()
