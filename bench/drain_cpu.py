"""Where the CPU of a warm worker host goes, per invocation, while it drains a queue.

    .venv/bin/python bench/drain_cpu.py [--calls N] [--drains R]

A warm worker's rate is bound by CPU when everything runs on one host: it finishes about
(cores × 1,000) ÷ (CPU milliseconds one call costs every process on the host) calls a second.
This bench starts one real Celery worker of concurrency 2 with warm sandboxes (as
bench/invoke.py's "warm host" row does: a worker of its own, its processes' sandboxes started
by four calls first), then R times: N invocations queued through the services, their tasks sent
while the worker is stopped (SIGSTOP, so the sends are not in the window), the worker continued
and timed until every one has ended. For each drain it reads the CPU time of every process on
the host from `/proc/<pid>/stat` (with what each reaped: a fork server reaps its calls'
processes) before and after, and groups it by role; `/proc/stat` gives the whole machine's.

Prints, for each role, the median over the drains of its CPU milliseconds per call (and the
lowest and highest), and the rate: measured (from the first claim to the last recorded end),
and what the whole machine's CPU per call allows. The worker's sandboxes retire after
TOOLHUB_SANDBOX_WARM_MAX_CALLS calls; keep N × R below it (the default is 1000), or a
successor's start is in a window. Same scratch set-up and requirements as bench/invoke.py.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import invoke as common  # noqa: E402 - the shared scratch set-up, worker and toolkit

ROLES = (
    "Celery main process",
    "Celery pool processes",
    "sandboxes (fork servers and their calls)",
    "PostgreSQL",
    "Redis",
    "this process (sending, polling)",
    "everything else (kernel threads, ...)",
)


def _processes() -> dict[int, tuple[str, int, int, int]]:
    """pid -> (command name, parent pid, start time, CPU ticks including reaped children)."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            text = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        command = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        ticks = sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
        found[int(name)] = (command, int(fields[1]), int(fields[19]), ticks)
    return found


def _busy_ticks() -> int:
    values = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(values) - values[3] - values[4]  # all but idle and iowait


def _role(pid: int, table: dict[int, tuple[str, int, int, int]], main_pid: int) -> str:
    command, parent, _start, _ticks = table[pid]
    if pid == os.getpid():
        return ROLES[5]
    if pid == main_pid:
        return ROLES[0]
    if parent == main_pid:
        return ROLES[1]
    if command.startswith("postgres"):
        return ROLES[3]
    if command.startswith("redis-server"):
        return ROLES[4]
    # Below a pool process: bubblewrap, the fork server and its calls.
    seen = set()
    while parent > 1 and parent in table and parent not in seen:
        seen.add(parent)
        if table[parent][1] == main_pid:
            return ROLES[2]
        parent = table[parent][1]
    return ROLES[6]


def _cpu_by_role(before, after, main_pid: int) -> dict[str, float]:
    """CPU seconds of each role between two `_processes()` snapshots (a process that is new
    in `after` counts from its start; one that ended in between is counted by what reaped it)."""
    tick = os.sysconf("SC_CLK_TCK")
    spent: dict[str, float] = defaultdict(float)
    for pid, (_command, _parent, start, ticks) in after.items():
        earlier = before.get(pid)
        base = earlier[3] if earlier is not None and earlier[2] == start else 0
        spent[_role(pid, after, main_pid)] += (ticks - base) / tick
    return spent


def drain(user, toolkit, worker: common.Worker, calls: int) -> tuple[float, dict[str, float], float]:
    """One drain: (measured rate, CPU seconds by role, the machine's busy CPU seconds)."""
    from toolhub import broker
    from toolhub.runs.tasks import run_invocation

    ids = common.queued_invocations(user, toolkit, calls)
    os.kill(worker.process.pid, signal.SIGSTOP)
    try:
        for pk in ids:
            broker.send(run_invocation.name, pk)
    finally:
        before, busy_before = _processes(), _busy_ticks()
        os.kill(worker.process.pid, signal.SIGCONT)
    common._wait_for_all(ids)
    after, busy_after = _processes(), _busy_ticks()
    busy = (busy_after - busy_before) / os.sysconf("SC_CLK_TCK")
    return common._drained_rate(ids), _cpu_by_role(before, after, worker.process.pid), busy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="invocations per drain (default 200)")
    parser.add_argument("--drains", type=int, default=4, help="drains (default 4)")
    args = parser.parse_args()

    scratch = common.Scratch()
    worker = None
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.test import Client

        from toolhub.accounts.models import ApiToken

        call_command("migrate", verbosity=0)
        user, toolkit = common.ready_toolkit()
        client = Client()
        _token, raw = ApiToken.issue(user=user, name="bench")
        worker = common.Worker(scratch, concurrency=2, warm=True)
        # Both worker processes start their sandbox.
        common.throughput(client, {"HTTP_AUTHORIZATION": f"Bearer {raw}"}, toolkit, 4)

        rates, busy, by_role = [], [], defaultdict(list)
        for _ in range(args.drains):
            rate, spent, machine = drain(user, toolkit, worker, args.calls)
            rates.append(rate)
            busy.append(machine * 1000 / args.calls)
            for role in ROLES:
                by_role[role].append(spent.get(role, 0.0) * 1000 / args.calls)

        cores = os.cpu_count() or 1
        print()
        print(f"{args.drains} drains of {args.calls} calls, one warm worker of concurrency 2, {cores} cores")
        print(f"{'CPU per call':<46} {'median ms':>10} {'lowest':>8} {'highest':>8} {'share':>7}")
        print("-" * 83)
        total = statistics.median(busy)
        for role in ROLES:
            values = by_role[role]
            median = statistics.median(values)
            print(f"{role:<46} {median:>10.2f} {min(values):>8.2f} {max(values):>8.2f} {median / total:>7.0%}")
        print(f"{'the whole machine (/proc/stat)':<46} {total:>10.2f} {min(busy):>8.2f} {max(busy):>8.2f}")
        print("-" * 83)
        print(f"{'invocations/s, measured':<46} {statistics.median(rates):>10.1f} {min(rates):>8.1f} {max(rates):>8.1f}")
        allowed = [cores * 1000 / value for value in busy]
        print(f"{'invocations/s the CPU per call allows':<46} {statistics.median(allowed):>10.1f} "
              f"{min(allowed):>8.1f} {max(allowed):>8.1f}")
        print(f"CPU per call for 100/s on {cores} cores: {cores * 10:.1f} ms")
    finally:
        if worker is not None:
            worker.stop()
        scratch.remove(False)


if __name__ == "__main__":
    main()
