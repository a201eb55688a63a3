"""How long locks and environments take, offline, for one small lock (`humanize` + pydantic).

    .venv/bin/python bench/environments.py [RUNS]    (default 5)

Everything comes from the wheelhouse (`$TOOLHUB_WHEELHOUSE`, else `.data/wheelhouse`, filled by
`make wheelhouse`), so the numbers measure the tools rather than the network. Each run uses
fresh directories and, where the row says "cold", a fresh cache:

- pip-compile: `compile_lock` with no shared cache.
- first build: `ensure_environment` into an empty root (uv venv, uv pip install, compileall,
  permissions, marker, rename), with a cold and with a warm uv cache.
- reuse: `ensure_environment` again once the environment exists.
- uv pip install / pip install: the same lock into a fresh venv, cold caches, the way each tool
  installs by default (pip writes .pyc files, uv does not) and both without byte-compiling.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from toolhub.packages import build_runner  # noqa: E402
from toolhub.packages.envbuild import (  # noqa: E402
    DEFAULT_INTERPRETER,
    IndexSettings,
    Timeouts,
    compile_lock,
    ensure_environment,
)

TIMEOUTS = Timeouts(total_seconds=600, silence_seconds=300)


def _quiet(line: str) -> None:
    pass


def _percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile; with fewer than 20 values p95 is simply the largest."""
    ordered = sorted(values)
    rank = max(1, round(fraction * len(ordered) + 0.5))
    return ordered[min(rank, len(ordered)) - 1]


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _run(argv: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{argv[0]} failed:\n{done.stdout}{done.stderr}")


def _lock(index: IndexSettings, workdir: Path) -> str:
    return compile_lock(
        requirements=["humanize"], constraints=[], index=index, log=_quiet, timeouts=TIMEOUTS, workdir=workdir
    )


def _build(lock: str, index: IndexSettings, root: Path, cache: Path) -> Path:
    return ensure_environment(
        lock=lock,
        root=root,
        interpreter=DEFAULT_INTERPRETER,
        index=index,
        log=_quiet,
        timeouts=TIMEOUTS,
        cache_dir=cache,
    )


def _install(tool: str, extra: list[str], *, lock_file: Path, index: IndexSettings, here: Path) -> float:
    """Time one install of the lock into a fresh venv (created untimed) with a cold cache."""
    uv = str(build_runner.find_tool("uv"))
    env = build_runner.tool_env(home=here / "home", timeouts=TIMEOUTS, extra={})
    venv = here / "venv"
    shutil.rmtree(venv, ignore_errors=True)
    _run([uv, "venv", "--quiet", "--python", DEFAULT_INTERPRETER, str(venv)], env)
    python = str(venv / "bin" / "python")
    if tool == "uv":
        argv = [uv, "pip", "install", "--quiet", "--python", python, "--require-hashes", *index.uv_args()]
        env = env | {"UV_CACHE_DIR": str(here / "uv-cache-install")}
        shutil.rmtree(here / "uv-cache-install", ignore_errors=True)
    else:
        pip = str(build_runner.find_tool("pip"))
        argv = [pip, "--python", python, "install", "--quiet", "--require-hashes", "--no-cache-dir", *index.pip_args()]
    argv += [*extra, "-r", str(lock_file)]
    return _timed(lambda: _run(argv, env))


INSTALLS = {
    "uv pip install, no .pyc": ("uv", []),
    "pip install --no-compile": ("pip", ["--no-compile"]),
    "uv pip install --compile-bytecode": ("uv", ["--compile-bytecode"]),
    "pip install (writes .pyc)": ("pip", []),
}


def main(runs: int) -> None:
    wheelhouse = Path(os.environ.get("TOOLHUB_WHEELHOUSE") or REPO / ".data" / "wheelhouse")
    if not any(wheelhouse.glob("humanize-*.whl")):
        raise SystemExit(f"no humanize wheel in {wheelhouse}; run `make wheelhouse` first")
    index = IndexSettings(find_links=(str(wheelhouse),), no_index=True)
    rows: dict[str, list[float]] = {
        "pip-compile (lock)": [],
        "first build, cold uv cache": [],
        "first build, warm uv cache": [],
        "reuse (environment present)": [],
        **{name: [] for name in INSTALLS},
    }
    with tempfile.TemporaryDirectory(prefix="toolhub-bench-") as top_name:
        top = Path(top_name)
        warm_cache = top / "warm-cache"
        lock = _lock(index, top / "first-lock")
        # Fill the shared cache once, untimed, so every timed warm build finds it full.
        _build(lock, index, top / "warm-fill", warm_cache)
        for run in range(runs):
            here = top / f"run-{run}"
            rows["pip-compile (lock)"].append(_timed(lambda here=here: _lock(index, here / "lock")))
            cold = (lock, index, here / "cold", here / "uv-cache")
            rows["first build, cold uv cache"].append(_timed(lambda cold=cold: _build(*cold)))
            warm = (lock, index, here / "warm", warm_cache)
            rows["first build, warm uv cache"].append(_timed(lambda warm=warm: _build(*warm)))
            rows["reuse (environment present)"].append(_timed(lambda warm=warm: _build(*warm)))
            lock_file = here / "requirements.txt"
            lock_file.write_text(lock)
            for name, (tool, extra) in INSTALLS.items():
                rows[name].append(_install(tool, extra, lock_file=lock_file, index=index, here=here))
            shutil.rmtree(here)

    packages = [line.split("==")[0] for line in lock.splitlines() if "==" in line]
    print(f"Lock: {len(packages)} packages ({', '.join(packages)}), offline from {wheelhouse}")
    print(f"Interpreter for environments: {DEFAULT_INTERPRETER}; {runs} runs per row\n")
    width = max(map(len, rows))
    print(f"{'':{width}}  {'median':>9}  {'p95':>9}  {'min':>9}")
    for name, values in rows.items():
        median, p95 = statistics.median(values), _percentile(values, 0.95)
        print(f"{name:{width}}  {_format(median):>9}  {_format(p95):>9}  {_format(min(values)):>9}")
    print()
    for uv_row, pip_row in (
        ("uv pip install, no .pyc", "pip install --no-compile"),
        ("uv pip install --compile-bytecode", "pip install (writes .pyc)"),
    ):
        ratio = statistics.median(rows[pip_row]) / statistics.median(rows[uv_row])
        print(f"{pip_row} / {uv_row}: {ratio:.1f}x (medians)")
    if runs < 20:
        print("\n(With fewer than 20 runs, p95 is the slowest run.)")


def _format(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
