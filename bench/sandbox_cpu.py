"""The CPU one warm sandboxed call costs, and how much of it is the fork every call needs.

    .venv/bin/python bench/sandbox_cpu.py [--calls N] [--rounds R]

A warm call runs the toolkit in a process forked for that one call (docs/sandbox.md, Warm sandboxes), so
every call pays a fork of the fork server (an interpreter with the runtime and pydantic loaded),
that process's copy-on-write faults and its exit. This bench measures, on one warm sandbox of
the bench toolkit, R alternating rounds of N calls each, 10 ms apart (as a worker's calls are):

- the fork-server floor: the call's process is forked and answers an unknown op at once, so
  nothing of a toolkit loads;
- the trivial tool call (bench/invoke.py's echo tool), the same process doing the whole call;
- the baseline, outside any sandbox: the environment's own interpreter with the runtime's
  modules and pydantic imported as the fork server imports them (without its warm-up call),
  forking a child that exits at once, N times 10 ms apart (its own CPU and its children's, from
  getrusage).

For the two sandboxed rows the sandbox's CPU comes from its cpuacct cgroup (bubblewrap, the fork
server and every call's process), the host's from this thread's CPU time. Prints the medians
over the rounds (lowest and highest too) and the ratios to the baseline. Same scratch set-up and
requirements as bench/invoke.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import invoke as common  # noqa: E402 - the shared scratch set-up and toolkit

PAUSE = 0.01

# Run by the environment's interpreter on the runtime copy: the runtime's modules and pydantic
# imported as the fork server imports them (without its warm-up call), then N bare forks.
_BARE_FORKS = """
import importlib, json, os, resource, sys, time
sys.path.insert(0, sys.argv[1])
import forkserver
forkserver._load_package()
for name in ("channel", "events", "specs", "argcheck", "loader", "invoke", "egress_forwarder", "runner"):
    importlib.import_module(forkserver.PACKAGE + "." + name)
import pydantic
calls, pause = int(sys.argv[2]), float(sys.argv[3])
def cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
walls = []
start = cpu()
for _ in range(calls):
    began = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    walls.append(time.perf_counter() - began)
    time.sleep(pause)
rollup = open("/proc/self/smaps_rollup").read().splitlines()
anonymous = next(int(line.split()[1]) << 10 for line in rollup if line.startswith("Anonymous:"))
print(json.dumps({"cpu": (cpu() - start) / calls, "walls": walls, "anonymous": anonymous}))
"""


def _anonymous(pid: int | str) -> int:
    """A process's anonymous memory in bytes (smaps_rollup)."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) << 10
    return 0


def _runs_fork_server(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return not argv[0].endswith(b"bwrap") and any(arg.endswith(b"forkserver.py") for arg in argv)


def _parent(pid: int) -> int:
    text = Path(f"/proc/{pid}/stat").read_text()
    return int(text[text.rindex(")") + 2 :].split()[1])


def _bare_forks(interpreter: Path, runtime_dir: Path, calls: int) -> tuple[float, list[float], int]:
    done = subprocess.run(
        [str(interpreter), "-I", "-c", _BARE_FORKS, str(runtime_dir), str(calls), str(PAUSE)],
        capture_output=True, text=True, check=True, timeout=600,
    )
    result = json.loads(done.stdout)
    return result["cpu"], result["walls"], result["anonymous"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per round and row (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    args = parser.parse_args()

    scratch = common.Scratch()
    try:
        import django

        django.setup()
        from django.core.management import call_command

        from toolhub.sandbox.warm import _descendants as descendants
        from toolhub.sandbox.warm_pool import WarmPool
        from toolhub.toolkits import sandboxing as sandbox
        from toolhub.toolkits.building import revision_environment

        call_command("migrate", verbosity=0)
        _user, toolkit = common.ready_toolkit()
        revision = toolkit.current_revision
        env_dir = revision_environment(revision)
        runtime_dir = sandbox.runtime_dir()
        source_path = sandbox.source_file(revision)
        limits = sandbox.limits()
        pool = WarmPool(size=1, uid_pool=sandbox.uid_pool(), max_calls=1_000_000, max_age=24 * 3600)
        try:
            echo = common.warm_echo(pool, env_dir=env_dir, runtime_dir=runtime_dir, source_path=source_path,
                                    limits=limits)
            echo()
            echo()
            (only,) = pool.idle()
            floor = common.fork_server_floor(only, source_path.read_bytes(), limits)

            counter = only._memory.dirs.get("cpuacct")
            if counter is None:
                raise SystemExit("the sandbox has no cpuacct cgroup (run as root, with cgroups v1 mounted)")
            usage = counter / "cpuacct.usage"
            time.sleep(0.1)  # the last call's clean-up
            # The fork server: the interpreter running forkserver.py whose parent does not (a
            # call's process forked ahead is one too; bubblewrap's processes only name it).
            servers = {pid for pid in descendants(only.process.pid) if _runs_fork_server(pid)}
            (server,) = [pid for pid in servers if _parent(pid) not in servers]
            server_anonymous = _anonymous(server)

            rows: dict[str, dict[str, list[float]]] = {}
            for _ in range(args.rounds):
                cpu, walls, baseline_anonymous = _bare_forks(Path(env_dir) / "bin" / "python", runtime_dir, args.calls)
                row = rows.setdefault("baseline", {"sandbox": [], "host": [], "walls": []})
                row["sandbox"].append(cpu * 1000)
                row["walls"] += walls
                for name, action in (("floor", floor), ("echo", echo)):
                    row = rows.setdefault(name, {"sandbox": [], "host": [], "walls": []})
                    sandbox_before, host_before = int(usage.read_text()), time.thread_time()
                    for _ in range(args.calls):
                        began = time.perf_counter()
                        action()
                        row["walls"].append(time.perf_counter() - began)
                        time.sleep(PAUSE)
                    # The last call's clean-up finishes on the sandbox's own thread.
                    time.sleep(0.1)
                    row["host"].append((time.thread_time() - host_before) * 1000 / args.calls)
                    row["sandbox"].append((int(usage.read_text()) - sandbox_before) / 1e6 / args.calls)
        finally:
            pool.close()

        labels = {
            "baseline": "bare fork + exit, runtime's imports, no sandbox",
            "floor": "fork-server floor (warm sandbox, no toolkit)",
            "echo": "trivial tool call (warm sandbox)",
        }
        base = statistics.median(rows["baseline"]["sandbox"])
        print()
        print(f"{args.rounds} alternating rounds of {args.calls} calls, {PAUSE * 1000:.0f} ms apart; CPU ms per call")
        print(f"{'what':<50} {'CPU':>7} {'lowest':>7} {'highest':>7} {'÷ base':>7} {'host':>6} {'wall p50':>9} {'p95':>7}")
        print("-" * 100)
        for name, row in rows.items():
            values, walls = row["sandbox"], sorted(row["walls"])
            median = statistics.median(values)
            host = f"{statistics.median(row['host']):>6.2f}" if row["host"] else f"{'-':>6}"
            print(f"{labels[name]:<50} {median:>7.2f} {min(values):>7.2f} {max(values):>7.2f} {median / base:>7.2f} "
                  f"{host} {statistics.median(walls) * 1000:>9.2f} {common._percentile(walls, 0.95) * 1000:>7.2f}")
        print("-" * 100)
        print("CPU: the sandbox's cgroup (bubblewrap, fork server, the calls' processes); for the baseline, the")
        print("forking interpreter and its children. host: the calling thread here. wall: per call, ms.")
        print(f"anonymous memory: the fork server {server_anonymous / 2**20:.1f} MiB, "
              f"the baseline's interpreter {baseline_anonymous / 2**20:.1f} MiB")
    finally:
        scratch.remove(False)


if __name__ == "__main__":
    main()
