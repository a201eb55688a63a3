"""The long-lived parent of a warm sandbox: `python -I /opt/runtime/forkserver.py`.

It runs as pid 1 of the sandbox's pid namespace, imports the runtime, pydantic and the packages
installed in the environment once (import only, see ``_preload_environment``), and then serves
calls one at a time over its stdin, which is a UNIX socket to the host. It never imports
or runs a toolkit itself: for each call it forks a child, and only that child, made for that one
call, loads the toolkit and answers the request (``runner.main``, exactly as a cold sandbox's
``main.py`` does). Once the child is reaped it says so (the host may answer the call then), kills
every other process in the namespace, reaps them, empties ``/tmp``, ``/dev/shm`` and
``/opt/toolkit``, removes every SysV IPC object, checks that nothing is left, and reports to the
host. Anything unexpected is reported as a problem, and the host then retires the sandbox.

Control messages are JSON lines; descriptors travel as SCM_RIGHTS:

    host -> here   {"op": "fork", "limits": {...}}  + fds [stdin, stdout, stderr]: fork the
                                                     call's process (at once: the host may do so
                                                     ahead of the call, while it finds out what
                                                     the call is)
    here -> host   {"op": "ready", "preloaded": [...]}  once, after the imports (the names of
                                                     the environment's packages imported too)
                   {"op": "started", "pid": N}       + fd [pidfd of the call's process], once
                                                     forked
                   {"op": "exited", "status": W, "utime": s, "stime": s, "maxrss": kb}
                                                     once the call's process is reaped
                   {"op": "done", "problems": [...]} once everything of the call is gone

The call's process waits for its request on stdin; the toolkit's source comes with it, right
after the request line (``runner``), and the process writes it to ``/opt/toolkit/toolkit.py``
itself, so nothing of a toolkit is in the process before its call, and the parent never holds
a toolkit's source. A process forked ahead that no call takes is killed by the host (through its
pidfd) and reaped here like any call's.

The parent is not dumpable (``PR_SET_DUMPABLE`` 0), so the call's process, though it runs as the
same uid, can neither read nor write its memory through ``/proc`` (and ``ptrace`` and
``process_vm_*`` are refused by the seccomp filter); as pid 1 it receives no signal from inside
the namespace that it has no handler for, and it keeps none.
"""

from __future__ import annotations

import array
import ctypes
import importlib
import importlib.util
import json
import os
import resource
import shutil
import signal
import socket
import sys
import time

PACKAGE = "toolhub_runtime"
WRITABLE = ("/tmp", "/dev/shm", "/opt/toolkit")
_PR_SET_DUMPABLE = 4
_PR_SET_PDEATHSIG = 1
_IPC_RMID = 0

_libc = ctypes.CDLL(None, use_errno=True)


def _load_package() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(
        PACKAGE, os.path.join(here, "__init__.py"), submodule_search_locations=[here]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    spec.loader.exec_module(package)


# The runtime's own sample, introspected and validated once before the first call: pydantic
# builds much of its machinery lazily, on the first model (about 0.2 s), and every child
# inherits it built. Only this fixed text runs here, never a toolkit.
_WARMUP_SOURCE = """
from pydantic import BaseModel, Field


class Tools:
    class Valves(BaseModel):
        limit: int = Field(default=3, description="a number")

    class UserValves(BaseModel):
        token: str = ""

    def sample(self, text: str, count: int = 1, flags: list[str] | None = None) -> str:
        \"\"\"
        A sample tool.
        :param text: some text
        \"\"\"
        return text * count

    def detailed(self, text: str = Field(default="x", description="some text")) -> str:
        return text
"""


def _preload() -> None:
    for name in ("channel", "events", "specs", "argcheck", "loader", "invoke", "egress_forwarder", "runner"):
        importlib.import_module(f"{PACKAGE}.{name}")
    import pydantic  # noqa: F401

    loader = sys.modules[f"{PACKAGE}.loader"]
    invoke = sys.modules[f"{PACKAGE}.invoke"]
    specs = sys.modules[f"{PACKAGE}.specs"]
    path = "/tmp/.toolhub-warmup.py"
    with open(path, "w") as handle:
        handle.write(_WARMUP_SOURCE)
    try:
        loader.introspect(path)
        toolkit = loader.load(path)
        instance = toolkit.cls()
        tools = specs.tool_functions(instance)
        # A tool with a `Field` default is checked with its pydantic model (invoke.py) ...
        invoke.validate_arguments(tools["detailed"], {"text": "y"})
        # ... and one of simple types with the schemas made once here (argcheck).
        sys.modules[f"{PACKAGE}.argcheck"].prepare()
        invoke.validate_arguments(tools["sample"], {"text": "x", "count": 2, "flags": ["a"]})
    finally:
        os.unlink(path)
        sys.modules.pop(loader.MODULE_NAME, None)


# The environment's own packages, imported here before the first call so that no call pays for
# them: import only (never a toolkit), each tried first in a child of its own, and imported here
# only if that import succeeded within _PRELOAD_TRY_SECONDS and left the child with one thread
# (a fork of a process with more threads could deadlock).
_PRELOAD_TRY_SECONDS = 5.0
_PRELOAD_SECONDS = 15.0
ENV_PREFIX = "/opt/env/"


def _environment_modules() -> list[str]:
    """The top-level modules of the distributions installed in the environment, from their
    metadata (``top_level.txt``, else the top-level names their RECORD lists)."""
    from importlib import metadata

    site = [path for path in sys.path if path.startswith(ENV_PREFIX)]
    names: set[str] = set()
    for distribution in metadata.distributions(path=site):
        listed = distribution.read_text("top_level.txt")
        if listed:
            names.update(listed.split())
            continue
        for entry in distribution.files or []:
            parts = entry.parts
            if len(parts) > 1 or parts[0].endswith(".py"):
                names.add(parts[0].removesuffix(".py"))
    return sorted(name for name in names if name.isidentifier() and not name.startswith("_") and name not in sys.modules)


def _preload_environment() -> list[str]:
    loaded = []
    deadline = time.monotonic() + _PRELOAD_SECONDS
    for name in _environment_modules():
        if time.monotonic() > deadline:
            break
        if not _imports_cleanly(name):
            continue
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - a package that fails here is simply not preloaded
            sys.modules.pop(name, None)
            continue
        loaded.append(name)
    return loaded


def _imports_cleanly(name: str) -> bool:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            importlib.import_module(name)
            code = 0 if len(os.listdir("/proc/self/task")) == 1 else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + _PRELOAD_TRY_SECONDS
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) == 0
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return False
        time.sleep(0.01)


def main() -> None:
    # No handler for anything: pid 1 then ignores every signal sent from inside the namespace.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    control = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.close(devnull)
    _load_package()
    _preload()
    # Whatever the packages print while they load goes nowhere (the host reads stderr only when
    # the sandbox fails to start), and whatever they leave in /tmp is removed.
    stderr = os.dup(2)
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 2)
    os.close(quiet)
    try:
        preloaded = _preload_environment()
    finally:
        os.dup2(stderr, 2)
        os.close(stderr)
    _clean()
    _send(control, {"op": "ready", "preloaded": preloaded})
    buffer = b""
    while True:
        message, fds, buffer = _receive(control, buffer)
        if message is None:
            return
        if message.get("op") == "fork" and len(fds) == 3:
            stdin, stdout, stderr = fds
            _run(control, _fork(control, stdin, stdout, stderr, message.get("limits") or {}))
        else:
            for fd in fds:
                os.close(fd)
            _send(control, {"op": "done", "problems": ["bad control message"]})


def _fork(control: socket.socket, stdin: int, stdout: int, stderr: int, limits: dict) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(control, stdin, stdout, stderr, limits)
    for fd in (stdin, stdout, stderr):
        os.close(fd)
    return pid


def _run(control: socket.socket, pid: int) -> None:
    """Hand the call's process to the host, wait for it, then remove everything it left."""
    problems: list[str] = []
    pidfd = os.pidfd_open(pid)
    try:
        _send(control, {"op": "started", "pid": pid}, [pidfd])
    finally:
        os.close(pidfd)
    _, status, usage = os.wait4(pid, 0)
    # Reported at once: the host may answer a call that sent a successful result now, with
    # this usage, and waits for "done" only before the sandbox's next call.
    _send(
        control,
        {"op": "exited", "status": status, "utime": usage.ru_utime, "stime": usage.ru_stime, "maxrss": usage.ru_maxrss},
    )
    # Everything else the call started goes with it; pid 1 is spared by kill(-1).
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    problems += _clean()
    _send(control, {"op": "done", "problems": problems})


def _child(control: socket.socket, stdin: int, stdout: int, stderr: int, limits: dict) -> None:
    try:
        control.close()
        os.dup2(stdin, 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        os.closerange(3, 1 << 16)
        # Dumpable again: only the parent needs hiding, and the call's own /proc stays its own.
        _libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
        _libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        # The sandbox's memory cgroup holds the parent too: a call over the limit must be what
        # the OOM killer picks (raising one's own score needs no privilege).
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("1000")
        for name, value in limits.items():
            which = getattr(resource, name, None)
            if isinstance(which, int) and isinstance(value, int):
                resource.setrlimit(which, (value, value))
        os.chdir("/tmp")
        importlib.import_module(f"{PACKAGE}.runner").main()
        code = 0
    except BaseException:  # noqa: BLE001 - the child must never return into the server loop.
        code = 70
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _clean() -> list[str]:
    problems = []
    for directory in WRITABLE:
        try:
            names = os.listdir(directory)
        except OSError as exc:
            problems.append(f"cannot list {directory}: {exc}")
            continue
        for name in names:
            path = os.path.join(directory, name)
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, onerror=_force)
                else:
                    os.unlink(path)
            except OSError as exc:
                problems.append(f"cannot remove {path}: {exc}")
        if os.listdir(directory):
            problems.append(f"{directory} is not empty")
    for kind in ("shm", "msg", "sem"):
        for ident in _ipc_ids(kind):
            if kind == "shm":
                _libc.shmctl(ident, _IPC_RMID, None)
            elif kind == "msg":
                _libc.msgctl(ident, _IPC_RMID, None)
            else:
                _libc.semctl(ident, 0, _IPC_RMID)
        if _ipc_ids(kind):
            problems.append(f"SysV {kind} objects are left")
    left = [name for name in os.listdir("/proc") if name.isdigit() and name != "1"]
    if left:
        problems.append(f"processes are left: {left}")
    return problems


def _force(function, path, _exc_info) -> None:
    """rmtree's error handler: a directory the call made unreadable is made readable again."""
    parent = os.path.dirname(path)
    os.chmod(parent, 0o700)
    if os.path.isdir(path) and not os.path.islink(path):
        os.chmod(path, 0o700)
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _ipc_ids(kind: str) -> list[int]:
    try:
        with open(f"/proc/sysvipc/{kind}") as handle:
            lines = handle.read().splitlines()[1:]
    except OSError:
        return []
    ids = []
    for line in lines:
        fields = line.split()
        if len(fields) > 1 and fields[1].isdigit():
            ids.append(int(fields[1]))
    return ids


def _send(control: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode() + b"\n"
    if fds:
        control.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        control.sendall(data)


def _receive(control: socket.socket, buffer: bytes) -> tuple[dict | None, list[int], bytes]:
    fds: list[int] = []
    while b"\n" not in buffer:
        data, ancillary, _flags, _address = control.recvmsg(1 << 16, socket.CMSG_SPACE(16 * 4))
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                usable = len(payload) - len(payload) % 4
                fds += array.array("i", payload[:usable]).tolist()
        if not data:
            for fd in fds:
                os.close(fd)
            return None, [], b""
        buffer += data
    line, _, rest = buffer.partition(b"\n")
    try:
        message = json.loads(line)
    except ValueError:
        message = {}
    return (message if isinstance(message, dict) else {}), fds, rest


if __name__ == "__main__":
    main()
