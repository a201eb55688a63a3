"""Running pip-compile, uv and friends for toolhub.packages.envbuild.

`run_logged` runs one command in its own process group with an allowlisted environment
(`tool_env`), inside the build sandbox when given one (`toolhub.sandbox.build`: as the build
user, seeing only the paths named for the step), hands each line of output to a `log` callback as it arrives, and kills the whole
group when the build's total time or its allowed silence runs out. `explain_failure` turns the
output of a failed command into the one-line message (toolhub.messages) a user sees, the
`BuildFailed` it raises.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from toolhub.messages import Message, as_written, message
from toolhub.sandbox.build import BuildSandbox

Log = Callable[[str], None]


@dataclass(frozen=True)
class Timeouts:
    """Limits for one compile_lock or ensure_environment call."""

    total_seconds: float = 900
    # A step that prints nothing for this long is considered stuck.
    silence_seconds: float = 300
    # Per network request, and how often pip and uv retry one.
    network_seconds: float = 30
    network_retries: int = 2
    # Files uv downloads at once: well under the build forwarder's cap on open connections.
    concurrent_downloads: int = 8


class BuildFailed(Exception):
    """A lock or an environment could not be made: `message` says why for the user (text is
    shown as written), `reason` is its one line of English."""

    def __init__(self, reason: str | Message) -> None:
        english = str(reason)
        line = " ".join(english.split())
        if len(line) > 300:
            line = line[:299] + "…"
        super().__init__(line)
        self.reason = line
        # A message whose English would not fit on one line is kept as that line, as written.
        self.message = reason if isinstance(reason, Message) and line == english else as_written(line)


class SourceBuildRefused(BuildFailed):
    """Only wheels are accepted (binary-only) and `name` has none that fits."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"No wheel of {name} fits, and building from source is off: if {name} exists only as "
            f"source, an admin can allow a source build of {name} in the package queue (its build "
            "code then runs in the build sandbox); then retry"
        )
        self.name = name


def refused_source_build(reason: Message, *, only_binary: bool, allowed: Sequence[str]) -> str | None:
    """The package a binary-only step found no wheel of, when that is why it failed
    (`reason` from explain_failure) and no admin allowed it to be built from source."""
    found = reason.code == "step.no_distribution" and only_binary
    name = _name_of(str(reason.params["name"])) if found else None
    return name if name and name not in allowed else None


@dataclass
class Outcome:
    returncode: int
    # The last lines of output (all of them went to the log), for explaining failures.
    lines: deque[str]


# Variables a build may see from the worker: proxies are how many intranets reach an index.
_PASSED_THROUGH = (
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
)


def minimal_env(home: Path) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
    }


def tool_env(*, home: Path, timeouts: Timeouts, extra: Mapping[str, str]) -> dict[str, str]:
    env = minimal_env(home)
    tmp = home / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env["TMPDIR"] = str(tmp)
    env |= {name: os.environ[name] for name in _PASSED_THROUGH if name in os.environ}
    # pip with fewer than one retry says nothing about a refused connection, which would
    # leave "index unreachable" indistinguishable from "no such package".
    retries = str(max(1, timeouts.network_retries))
    env |= {
        "NO_COLOR": "1",
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
        "PIP_NO_COLOR": "1",
        "PIP_PROGRESS_BAR": "off",
        "PIP_TIMEOUT": f"{timeouts.network_seconds:g}",
        "PIP_RETRIES": retries,
        "UV_NO_CONFIG": "1",
        "UV_NO_PROGRESS": "1",
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_PYTHON_PREFERENCE": "only-system",
        "UV_HTTP_TIMEOUT": f"{max(1, round(timeouts.network_seconds))}",
        "UV_HTTP_RETRIES": retries,
        "UV_CONCURRENT_DOWNLOADS": str(max(1, timeouts.concurrent_downloads)),
        # Copies, not hardlinks into the cache: the environment stands alone, and opening
        # its permissions cannot change the cache's files.
        "UV_LINK_MODE": "copy",
    }
    env |= extra
    return env


def find_tool(name: str) -> Path:
    """A tool installed in ToolHub's own virtualenv (not necessarily on PATH)."""
    path = Path(sys.executable).parent / name
    if path.is_file():
        return path
    found = shutil.which(name)
    if found is None:
        raise BuildFailed(f"{name} is not installed next to {sys.executable}")
    return Path(found)


# setpriv makes the kernel kill the tool when the worker dies (even by SIGKILL), so a killed
# worker does not leave a tool writing into a directory the next build is deleting.
_SETPRIV = shutil.which("setpriv", path="/usr/bin:/bin")


def run_logged(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    log: Log,
    deadline: float,
    timeouts: Timeouts,
    stage: str,
    sandbox: BuildSandbox | None = None,
    writable: Sequence[Path] = (),
    network: Sequence[tuple[str, int]] = (),
) -> Outcome:
    """Run one command, logging each output line as it arrives, within the time limits.

    `deadline` is a time.monotonic() value shared by the steps of one build; the message for
    running past it names `timeouts.total_seconds`. On a timeout, or anything else that
    interrupts the wait, the whole process group is killed before the exception leaves.

    With `sandbox` the command runs in it, seeing `writable` read-write and reaching only the
    `network` (host, port) pairs, through a proxy that lives as long as the command (what it
    refused or could not reach is logged); killing bwrap ends every process of the sandbox
    (its pid namespace).
    """
    argv = [str(arg) for arg in argv]
    log("$ " + redact(shlex.join(argv)))
    with contextlib.ExitStack() as stack:
        if sandbox is None:
            command = ([_SETPRIV, "--pdeathsig", "KILL", "--"] if _SETPRIV else []) + argv
            popen: dict = {"cwd": cwd, "env": dict(env)}
        else:
            confined = stack.enter_context(sandbox.command(argv, env=env, cwd=cwd, writable=writable, network=network))
            command, popen = confined.argv, confined.popen
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            # Its own process group, so a kill also reaches the build backends it started.
            start_new_session=True,
            **popen,
        )
        outcome = _follow(process, log=log, deadline=deadline, timeouts=timeouts, stage=stage)
        # pip says nothing of an index page the proxy could not fetch; these lines do.
        for line in confined.egress_lines() if sandbox is not None else ():
            outcome.lines.append(line)
            log(line)
        return outcome


def _follow(process: subprocess.Popen, *, log: Log, deadline: float, timeouts: Timeouts, stage: str) -> Outcome:
    assert process.stdout is not None
    lines: deque[str] = deque(maxlen=2000)
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    pending = b""
    last_output = time.monotonic()

    def emit(raw: bytes) -> None:
        line = redact(raw.decode("utf-8", "replace").rstrip("\r"))[:4000]
        lines.append(line)
        log(line)

    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                raise BuildFailed(f"{stage} timed out after {timeouts.total_seconds:g} s")
            if now - last_output >= timeouts.silence_seconds:
                raise BuildFailed(f"no output for {timeouts.silence_seconds:g} s")
            wait = min(deadline, last_output + timeouts.silence_seconds) - now
            if not selector.select(timeout=wait):
                continue
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                break
            last_output = time.monotonic()
            *complete, pending = (pending + chunk).split(b"\n")
            for raw in complete:
                emit(raw)
        if pending:
            emit(pending)
        # The output is closed; a process that lingers after that still counts against time.
        try:
            returncode = process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise BuildFailed(f"{stage} timed out after {timeouts.total_seconds:g} s") from None
    finally:
        if process.returncode is None:
            # Not reaped yet, so the group id cannot have been reused by anyone else.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        selector.close()
        process.stdout.close()
    return Outcome(returncode=returncode, lines=lines)


_CREDENTIALS = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")


def redact(text: str) -> str:
    """Hide user:password@ in URLs; an index URL may carry credentials and logs are shown."""
    return _CREDENTIALS.sub(r"\1***@", text)


# --------------------------------------------------------------------------------------------
# Explaining failures in one line


_NETWORK_ERRORS = re.compile(
    r"Connection refused|Failed to establish a new connection|Name or service not known|"
    r"Temporary failure in name resolution|No route to host|Network is unreachable|"
    r"ConnectTimeout|Read timed out|tcp connect error|dns error|error sending request|"
    r"CERTIFICATE_VERIFY_FAILED|certificate verify failed|invalid peer certificate|SSLError",
    re.IGNORECASE,
)
_NETWORK_CAUSES = (
    "Connection refused",
    "Name or service not known",
    "Temporary failure in name resolution",
    "No route to host",
    "Network is unreachable",
    "timed out",
    "certificate verify failed",
    "invalid peer certificate",
)
# What the build's proxy and forwarder say when a step reached their limits.
_BYTE_CAP = re.compile(r"egress refused: byte limit reached \((\d+) bytes per invocation\)")
_CONNECTION_CAP = re.compile(r"ToolHub egress refused(?: \d+ connections)?: more than (\d+) connections open at once")
_URL = re.compile(r"(?:https?|file)://[^\s`'\")]+")
_HOST_PORT = re.compile(r"host='([^']+)', port=(\d+)")


def explain_failure(
    tool: str,
    result: Outcome,
    *,
    index_url: str | None,
    constraints: Sequence[str] = (),
) -> Message:
    """One line saying why `tool` failed, from the last lines of its output.

    `index_url` names the index when the output does not say which one was unreachable;
    `constraints` lets a conflict be blamed on the constraint that caused it.
    """
    lines = list(result.lines)
    text = "\n".join(lines)

    # The build's own caps (toolhub/sandbox/build.py), before the network errors they cause.
    capped = _BYTE_CAP.search(text)
    if capped:
        return message("step.download_limit", tool=tool, size=_size(int(capped.group(1))))
    opened = _CONNECTION_CAP.search(text)
    if opened:
        return message("step.connection_limit", tool=tool, count=int(opened.group(1)))

    network = [line for line in lines if _NETWORK_ERRORS.search(line)]
    if network:
        fetches = [line for line in lines if "fetch" in line.lower()]
        return message("step.index_unreachable", where=_describe_network_error(network + fetches, index_url))

    hashes = re.search(r"Hash mismatch for `?([^`\s:]+)", text)
    if hashes or "THESE PACKAGES DO NOT MATCH THE HASHES" in text:
        name = hashes.group(1) if hashes else "a package"
        return message("step.hash_mismatch", name=name)

    # Before the tool's own last words, which name whatever it was writing ("Failed to
    # install ...") and not why: the host's disk, not the toolkit, needs someone's attention.
    full = re.search(r"No space left on device|Disk quota exceeded", text)
    if full:
        return message("step.failed", tool=tool, error=f"the disk is full on this host ({full.group(0)})")

    build = _explain_build_failure(lines)
    if build:
        return build

    missing = (
        re.search(r"No matching distribution found for (\S+)", text)
        or re.search(r"Because (\S+) was not found in the (?:package registry|provided package locations)", text)
        or re.search(r"Because there is no version of (\S+) and you require", text)
        or re.search(r"Wheels are required for `([^`]+)` because building from source is disabled", text)
    )
    if missing:
        name = _name_of(missing.group(1))
        limits = [c for c in constraints if _name_of(c) == name]
        if limits:
            return message("step.no_distribution_constrained", name=missing.group(1), limits=", ".join(limits))
        return message("step.no_distribution", name=missing.group(1))

    if re.search(r"conflicting dependencies|ResolutionImpossible|requirements are unsatisfiable", text):
        return _explain_conflict(text, constraints)

    for line in reversed(lines):
        stripped = line.strip()
        if stripped.lower().startswith("error:"):
            return message("step.failed", tool=tool, error=stripped[6:].strip())
    return message("step.exited", tool=tool, status=result.returncode)


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if count >= scale:
            return f"{round(count / scale, 1):g} {unit}"
    return f"{count} bytes"


def _describe_network_error(lines: list[str], index_url: str | None) -> str:
    joined = "\n".join(lines)
    cause = next((c for c in _NETWORK_CAUSES if c.lower() in joined.lower()), "network error")
    host = _HOST_PORT.search(joined)
    if host:
        where = f"{host.group(1)}:{host.group(2)}"
    else:
        url = _URL.search(joined) or _URL.search(index_url or "")
        where = urlsplit(url.group(0)).netloc.rpartition("@")[2] if url else "the index"
    return f"{where} ({cause})"


_BUILD_FAILURES = (
    # uv
    "Failed to build `",
    "build backend returned an error",
    # pip, inside pip-compile
    "MetadataGenerationFailed",
    "metadata-generation-failed",
    "subprocess-exited-with-error",
    "InstallationSubprocessError",
)
_EXCEPTION_LINE = re.compile(r"^\s*([\w.]*(?:Error|Exception|Failed)): (.+)$")
# pip -v names each distribution as it takes it up; the last one is the one that failed.
_PIP_SUBJECT = re.compile(r"^\s*(?:Processing|Collecting|Downloading|Using cached) (\S+)")


def _explain_build_failure(lines: list[str]) -> Message | None:
    text = "\n".join(lines)
    if not any(marker in text for marker in _BUILD_FAILURES):
        return None
    found = re.search(r"Failed to build `([A-Za-z0-9._-]+)", text)
    if found:
        name = found.group(1)
    else:
        subjects = [m.group(1) for line in lines if (m := _PIP_SUBJECT.match(line))]
        name = _distribution_name(subjects[-1]) if subjects else "a package"
    # Prefer the package's own exception ("RuntimeError: it refuses to build") over pip's
    # report about it ("Preparing metadata (pyproject.toml) exited with 1").
    exceptions = [m for line in lines if (m := _EXCEPTION_LINE.match(line))]
    own = [m for m in exceptions if not m.group(1).startswith("pip.")]
    if own:
        detail = f"{own[-1].group(1).rpartition('.')[2]}: {own[-1].group(2).strip()}"
    elif exceptions:
        detail = exceptions[0].group(2).strip()
    else:
        detail = ""
    if detail:
        return message("step.package_build_failed_because", name=name, detail=detail)
    return message("step.package_build_failed", name=name)


def _distribution_name(subject: str) -> str:
    """`toolhub-demo-b` from `toolhub-demo-b>=1`, `…/toolhub_demo_b-1.0.tar.gz` or a URL."""
    base = subject.rstrip("/").rpartition("/")[2]
    for suffix in (".tar.gz", ".zip", ".whl"):
        if base.endswith(suffix):
            return str(canonicalize_name(base.partition("-")[0]))
    return _name_of(subject) or subject


def _name_of(requirement: str) -> str | None:
    try:
        return canonicalize_name(Requirement(requirement).name)
    except InvalidRequirement:
        return None


# pip's resolver names each requirement that took part in a conflict, and who asked for it:
# RequirementInformation(requirement=SpecifierRequirement('b>=1'), parent=LinkCandidate('…'))
_CONFLICT_PART = re.compile(r"SpecifierRequirement\('([^']+)'\), parent=(?:None|\w+\('([^']+)'\))")


def _explain_conflict(text: str, constraints: Sequence[str]) -> Message:
    limits = {_name_of(c): c for c in constraints}
    parts = _CONFLICT_PART.findall(text)
    for requirement, parent in parts:
        constraint = limits.get(_name_of(requirement))
        if constraint is None:
            continue
        if not parent:
            return message("step.constraint_contradicts_requirement", constraint=constraint, requirement=requirement)
        # The parent is a distribution file or URL, e.g. …/toolhub_demo_a-1.0-py3-none-any.whl.
        name, _, rest = parent.rstrip("/").rpartition("/")[2].partition("-")
        version = rest.split("-")[0].removesuffix(".tar.gz").removesuffix(".zip")
        who = f"{canonicalize_name(name)} {version}" if name and version else parent
        return message("step.constraint_contradicts_dependency", constraint=constraint, who=who, requirement=requirement)
    if parts:
        return as_written("conflicting requirements: " + ", ".join(sorted({r for r, _ in parts})))
    return as_written("conflicting requirements")
