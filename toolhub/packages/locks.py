"""Locks for toolkits, without Django: a toolkit's requirements resolved with pip-compile into
a lock with hashes, the index settings that both locking and building follow, and the facts of
the interpreter a lock is resolved for. `toolhub.packages.envbuild` turns a lock into an
environment; both are re-exported from there.

`compile_lock(requirements=, constraints=, index=, log=, timeouts=, workdir=, interpreter=, ...) -> str`
    Runs `pip-compile --generate-hashes` (ToolHub's own pip-tools, imported by `interpreter`, the
    Python the environment will run, so `Requires-Python` and markers are judged for its exact
    version) over the requirements plus `BASE_REQUIREMENTS`, with the approved constraints as a
    `-c` file, and returns the lock text. Its first line records that version
    (`LOCK_PYTHON_PREFIX`, see `lock_python`). The lock names no index, find-links or paths, so
    it means the same thing on every host.
`lock_pins(lock) -> dict[str, str]`, `lock_package_names(lock) -> list[str]`
    The PEP 503 names pinned in a lock, with or without their specifiers (for the
    "transitive packages need approval" setting).

With a `sandbox` every step runs in bubblewrap as the build user (`confine`), as described in
`toolhub.packages.envbuild`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from toolhub.packages.build_runner import (
    BuildFailed,
    Log,
    Outcome,
    SourceBuildRefused,
    Timeouts,
    explain_failure,
    find_tool,
    minimal_env,
    refused_source_build,
    run_logged,
    tool_env,
)
from toolhub.sandbox.build import BuildSandbox

# What the sandbox runtime itself imports; every lock includes it.
BASE_REQUIREMENTS: tuple[str, ...] = ("pydantic>=2,<3",)

# Debian's interpreter: the sandbox user can read it, unlike a pyenv build under /root.
DEFAULT_INTERPRETER = "/usr/bin/python3.11"

# The lock's first line: "# Resolved for Python 3.11.2".
LOCK_PYTHON_PREFIX = "# Resolved for Python "
_RELEASE = re.compile(r"\d+\.\d+\.\d+")


@dataclass(frozen=True)
class IndexSettings:
    """Where packages come from; passed identically to pip-compile and uv."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    # Directories or URLs of wheelhouses (offline installs).
    find_links: tuple[str, ...] = ()
    no_index: bool = False
    # Refuse source distributions, so no package's build code ever runs on the worker...
    only_binary: bool = False
    # ...except these (canonical names), which are then built from source.
    source_packages: tuple[str, ...] = ()
    # A CA bundle for a private index with its own certificate authority.
    cert: str | None = None

    def _binary_args(self) -> list[str]:
        if not self.only_binary:
            return []
        return ["--only-binary=:all:", *(f"--no-binary={name}" for name in sorted(self.source_packages))]

    def index_hosts(self) -> tuple[tuple[str, int], ...]:
        """The (host, port) pairs locking and installing must reach: those of each index and
        find-links location that is not on this host (no index given means PyPI, whose files
        are on files.pythonhosted.org). Empty when everything is on this host."""
        places = [*self.find_links]
        if not self.no_index:
            places += [self.index_url or "https://pypi.org/simple", *self.extra_index_urls]
        hosts: list[tuple[str, int]] = []
        for place in places:
            parts = urlsplit(place)
            if parts.scheme in ("", "file") or not parts.hostname:
                continue
            hosts.append((parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)))
            if hosts[-1] == ("pypi.org", 443):
                hosts.append(("files.pythonhosted.org", 443))
        return tuple(dict.fromkeys(hosts))

    def local_paths(self) -> list[str]:
        """The host directories and files these settings read packages from (a build sandbox
        must see them): find-links directories, file:// indexes with the directory above them
        (a mirror's pages link to files beside `simple/`, as in `../../files/x.whl`), the CA
        bundle."""
        paths = [Path(self.cert)] if self.cert else []
        for location, is_index in (
            *((url, True) for url in (self.index_url, *self.extra_index_urls) if url),
            *((link, False) for link in self.find_links),
        ):
            parts = urlsplit(location)
            if parts.scheme not in ("file", ""):
                continue
            path = Path(unquote(parts.path) if parts.scheme else location).resolve()
            paths.append(path.parent if is_index else path)
        return [str(path) for path in paths]

    def pip_args(self) -> list[str]:
        args: list[str] = []
        if self.index_url:
            args += ["--index-url", self.index_url]
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        for link in self.find_links:
            args += ["--find-links", link]
        if self.no_index:
            args.append("--no-index")
        if self.cert:
            args += ["--cert", self.cert]
        if self.only_binary:
            args += ["--pip-args", " ".join(self._binary_args())]
        return args

    def uv_args(self) -> list[str]:
        args: list[str] = []
        if self.index_url:
            args += ["--default-index", self.index_url]
        for url in self.extra_index_urls:
            args += ["--index", url]
        for link in self.find_links:
            args += ["--find-links", link]
        if self.no_index:
            args.append("--no-index")
        args += self._binary_args()
        # pip-compile picked the versions by looking at every index at once; uv's default
        # (stop at the first index that knows a name) could miss a locked file. The hashes
        # in the lock still decide which files are acceptable.
        args += ["--index-strategy", "unsafe-best-match"]
        return args

    def env(self) -> dict[str, str]:
        # uv has no --cert option; it reads the bundle from the environment.
        return {"SSL_CERT_FILE": self.cert} if self.cert else {}


# --------------------------------------------------------------------------------------------
# Locks


def compile_lock(
    *,
    requirements: Sequence[str],
    constraints: Sequence[str],
    index: IndexSettings,
    log: Log,
    timeouts: Timeouts,
    workdir: Path,
    base_requirements: Sequence[str] = BASE_REQUIREMENTS,
    cache_dir: Path | None = None,
    interpreter: str = DEFAULT_INTERPRETER,
    sandbox: BuildSandbox | None,
) -> str:
    """Resolve requirements (plus the runtime's base requirements) into a hashed lock.

    `workdir` receives requirements.in, constraints.txt and the output; `cache_dir` (pip's and
    pip-tools' caches) defaults to a directory inside it, i.e. no cache shared between calls.

    The resolver runs under `interpreter`, not under the worker's own Python: pip judges
    `Requires-Python` and environment markers by the interpreter it runs in, and a worker on
    3.11.7 would pin releases that an environment on 3.11.2 then refuses to install. ToolHub's
    pip-tools and pip are pure Python, so the target interpreter imports them from ToolHub's
    site-packages (`-S` keeps its own site-packages, which may hold another pip, out).
    """
    deadline = time.monotonic() + timeouts.total_seconds
    release = interpreter_release(interpreter)
    wanted = _clean_requirements([*requirements, *base_requirements], kind="requirement")
    limits = _clean_requirements(constraints, kind="constraint")

    workdir.mkdir(parents=True, exist_ok=True)
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    # Per Python release: pip-tools caches each package's dependencies with markers evaluated.
    cache = (cache_dir or workdir / "cache") / f"python-{release}"
    (workdir / "requirements.in").write_text("".join(f"{line}\n" for line in wanted))
    output = workdir / "requirements.txt"
    output.unlink(missing_ok=True)

    argv = [
        interpreter,
        "-S",
        str(find_tool("pip-compile")),
        "--generate-hashes",
        # -v makes pip name each distribution it takes up, so the log (and the reason for a
        # failed build) can say which package broke.
        "--verbose",
        # Lock pip and setuptools too when something needs them: hash-checking installs
        # refuse a requirement that has no pinned, hashed line.
        "--allow-unsafe",
        "--strip-extras",
        # No header (it would repeat the command line with this call's temporary paths) and
        # no index options: the lock has to be the same text on every host, whatever its
        # index settings, because its hash names the environment.
        "--no-header",
        "--no-emit-options",
        "--no-config",
        *index.pip_args(),
        "--output-file",
        output.name,
    ]
    if limits:
        (workdir / "constraints.txt").write_text("".join(f"{line}\n" for line in limits))
        argv += ["--constraint", "constraints.txt"]
    argv.append("requirements.in")

    env = tool_env(home=home, timeouts=timeouts, extra=index.env())
    env |= {"PIP_CACHE_DIR": str(cache / "pip"), "PIP_TOOLS_CACHE_DIR": str(cache / "pip-tools")}
    env["PYTHONPATH"] = str(_tools_site_packages())
    cache.mkdir(parents=True, exist_ok=True)
    confined = confine(sandbox, index=index, interpreter=interpreter, owned=(workdir, cache))
    result = run_logged(
        argv,
        env=env,
        cwd=workdir,
        log=log,
        deadline=deadline,
        timeouts=timeouts,
        stage="lock",
        sandbox=confined,
        writable=(workdir, cache),
        network=index.index_hosts(),
    )
    text = _read_regular(output)
    if result.returncode != 0 or text is None:
        raise step_failure("pip-compile", result, index, constraints=limits)
    return f"{LOCK_PYTHON_PREFIX}{release}\n" + text


def confine(
    sandbox: BuildSandbox | None, *, index: IndexSettings, interpreter: str, owned: Sequence[Path]
) -> BuildSandbox | None:
    """The build sandbox for one call: it also sees ToolHub's tools, the interpreter and the
    index's local paths; `owned` (directories the worker just made) become the build user's."""
    if sandbox is None:
        return None
    readable = [*sandbox.readable, *index.local_paths()]
    for prefix in (Path(sys.prefix), Path(interpreter).resolve().parent.parent):
        if prefix != Path("/usr") and Path("/usr") not in prefix.parents:
            readable.append(str(prefix))
    for path in owned:
        sandbox.own(path)
    return dataclasses.replace(sandbox, readable=tuple(dict.fromkeys(readable)), python=interpreter)


def step_failure(tool: str, result: Outcome, index: IndexSettings, *, constraints: Sequence[str] = ()) -> BuildFailed:
    reason = explain_failure(tool, result, index_url=index.index_url, constraints=constraints)
    name = refused_source_build(reason, only_binary=index.only_binary, allowed=index.source_packages)
    return SourceBuildRefused(name) if name else BuildFailed(reason)


def _read_regular(path: Path) -> str | None:
    """The text of a file a build wrote, or None; never follows a symlink the build made."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with open(fd, encoding="utf-8", errors="replace") as handle:
        return handle.read() if stat.S_ISREG(os.fstat(fd).st_mode) else None


def lock_python(lock: str) -> str | None:
    """The Python release a lock was resolved for ("3.11.2"), or None for an older lock."""
    first = lock.lstrip().split("\n", 1)[0].rstrip()
    if first.startswith(LOCK_PYTHON_PREFIX):
        release = first.removeprefix(LOCK_PYTHON_PREFIX)
        return release if _RELEASE.fullmatch(release) else None
    return None


def _tools_site_packages() -> Path:
    """The site-packages that holds ToolHub's pip-tools (and pip, click, build...)."""
    import piptools

    return Path(piptools.__file__).resolve().parent.parent


def lock_pins(lock: str) -> dict[str, str]:
    """The packages a lock pins, by canonical name, each with its specifier (`==1.2.3`)."""
    pins: dict[str, str] = {}
    for line in lock.splitlines():
        # Hash and comment lines are indented or start with "#"; options start with "-".
        if not line or line[0] in " \t#-":
            continue
        text = line.rstrip().removesuffix("\\").strip()
        with contextlib.suppress(InvalidRequirement):
            requirement = Requirement(text)
            pins[canonicalize_name(requirement.name)] = str(requirement.specifier)
    return pins


def lock_package_names(lock: str) -> list[str]:
    """The canonical names of the packages a lock pins, sorted."""
    return sorted(lock_pins(lock))


def _clean_requirements(items: Sequence[str], *, kind: str) -> list[str]:
    """Parse requirement strings strictly; return them normalised, deduplicated and sorted.

    Each one becomes a line of a pip requirements file, so a line break or a leading dash
    would let a toolkit smuggle in pip options such as another index. Direct URLs are
    refused too: approvals are for names served by the configured indexes.
    """
    cleaned: set[str] = set()
    for item in items:
        text = item.strip()
        if not text or text.startswith("-") or any(c in text for c in "\r\n\\"):
            raise BuildFailed(f"invalid {kind} {item!r}")
        try:
            requirement = Requirement(text)
        except InvalidRequirement as exc:
            raise BuildFailed(f"invalid {kind} {text!r}: {exc}") from None
        if requirement.url:
            raise BuildFailed(f"{kind} {text!r} names a URL; only index packages are allowed")
        if kind == "constraint" and requirement.extras:
            raise BuildFailed(f"constraint {text!r} has extras, which constraints cannot have")
        cleaned.add(str(requirement))
    return sorted(cleaned)


def interpreter_version(interpreter: str) -> str:
    """`sys.version` of the interpreter, asked once per interpreter binary."""
    real = Path(interpreter).resolve()
    try:
        info = real.stat()
    except OSError as exc:
        raise BuildFailed(f"interpreter {interpreter} not found: {exc.strerror}") from None
    # An upgraded interpreter is a new file, so the cache never answers for the old one.
    cache_key = (str(real), info.st_ino, info.st_mtime_ns, info.st_size)
    version = _interpreter_versions.get(cache_key)
    if version is None:
        try:
            done = subprocess.run(
                [interpreter, "-I", "-S", "-c", "import sys; print(sys.version)"],
                env=minimal_env(Path("/")),
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise BuildFailed(f"interpreter {interpreter} does not run: {exc}") from None
        version = done.stdout.strip()
        _interpreter_versions[cache_key] = version
    return version


_interpreter_versions: dict[tuple[str, int, int, int], str] = {}


def interpreter_release(interpreter: str) -> str:
    """The interpreter's version as three numbers, such as "3.11.2"."""
    version = interpreter_version(interpreter)
    match = _RELEASE.match(version)
    if match is None:
        raise BuildFailed(f"interpreter {interpreter} reports an unexpected version: {version[:80]!r}")
    return match.group(0)
