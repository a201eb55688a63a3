"""The sandbox's seccomp filter (toolhub.sandbox.seccomp) against hostile toolkits, for real.

Each toolkit here calls the kernel directly through ctypes, with arguments that succeed (or
fail with another errno) without the filter, and reports what it got. Runs in bubblewrap as the
sandbox user through the real runtime; needs what tests/sandbox/test_isolation.py needs.
"""

from __future__ import annotations

import errno
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

pytest_plugins = ["tests.sandbox_fixtures"]

from tests.sandbox_fixtures import SANDBOX_USER, require_sandbox, wait_for_no_sandbox_processes  # noqa: E402
from toolhub.sandbox import seccomp  # noqa: E402
from toolhub.sandbox.launcher import Limits, SandboxOutcome, check_sandbox, run_sandboxed  # noqa: E402

pytestmark = pytest.mark.sandbox

LIMITS = Limits(cpu_seconds=5, wall_seconds=15, memory_bytes=512 << 20, processes=32, exit_grace_seconds=0.5)

# Every probe starts with this: raw system calls that report -errno instead of raising.
PRELUDE = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def sys_call(number, *args):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(number), *(ctypes.c_long(a) if isinstance(a, int) else a for a in args))
    return -ctypes.get_errno() if result == -1 else result
"""


@pytest.fixture(autouse=True)
def _nothing_survives():
    require_sandbox()
    yield
    left = wait_for_no_sandbox_processes()
    assert left == [], f"processes of {SANDBOX_USER} survived the test: {left}"


@pytest.fixture
def probe(tmp_path: Path, sandbox_env: Path, sandbox_runtime: Path) -> Callable[[str], dict]:
    """Run `body` (the body of a tool method returning a dict) in the sandbox; return the dict."""

    def _run(body: str) -> dict:
        source = (
            PRELUDE + "\nclass Tools:\n    def go(self) -> dict:\n" + textwrap.indent(textwrap.dedent(body), " " * 8)
        )
        path = tmp_path / f"toolkit-{uuid.uuid4().hex[:8]}.py"
        path.write_text(source)
        outcome: SandboxOutcome = run_sandboxed(
            interpreter_env=sandbox_env,
            runtime_dir=sandbox_runtime,
            source_path=path,
            request={"op": "invoke", "source_path": "/opt/toolkit/toolkit.py", "tool": "go", "arguments": {}},
            limits=LIMITS,
            on_message=lambda message: None,
        )
        assert outcome.status == "ok", outcome
        assert outcome.final is not None and outcome.final["kind"] == "result", outcome
        return outcome.final["result"]

    return _run


EPERM = -errno.EPERM


def test_every_sandbox_runs_under_a_filter(probe) -> None:
    report = probe(
        """
        status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
        return {"seccomp": status["Seccomp"].strip(), "filters": status["Seccomp_filters"].strip()}
        """
    )
    # 2 = filter mode; exactly the one filter bubblewrap loaded.
    assert report == {"seccomp": "2", "filters": "1"}


def test_the_kernel_keyring_is_refused(probe) -> None:
    report = probe(
        """
        KEY_SPEC_PROCESS_KEYRING, KEY_SPEC_SESSION_KEYRING = -2, -3
        payload = b"secret from another run"
        return {
            # add_key(2): would create a key readable in /proc/keys by the same uid.
            "add_key": sys_call(248, b"user", b"toolhub-probe", payload, len(payload), KEY_SPEC_PROCESS_KEYRING),
            # request_key(2): ENOKEY without the filter.
            "request_key": sys_call(249, b"user", b"toolhub-probe", None, 0),
            # keyctl(KEYCTL_GET_KEYRING_ID, session keyring, create): a keyring id without it.
            "keyctl": sys_call(250, 0, KEY_SPEC_SESSION_KEYRING, 1),
        }
        """
    )
    assert report == {"add_key": EPERM, "request_key": EPERM, "keyctl": EPERM}


def test_io_uring_is_refused(probe) -> None:
    report = probe(
        """
        params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
        return {
            "setup": sys_call(425, 4, params),  # a ring fd without the filter
            "enter": sys_call(426, 0, 0, 0, 0, None, 0),  # EBADF without it
            "register": sys_call(427, 0, 0, None, 0),  # EBADF without it
        }
        """
    )
    assert report == {"setup": EPERM, "enter": EPERM, "register": EPERM}


def test_tracing_and_reading_other_memory_is_refused(probe) -> None:
    report = probe(
        """
        class IoVec(ctypes.Structure):
            _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
        source = ctypes.create_string_buffer(b"x" * 16)
        target = ctypes.create_string_buffer(16)
        local, remote = IoVec(ctypes.addressof(target), 16), IoVec(ctypes.addressof(source), 16)
        return {
            # PTRACE_TRACEME succeeds without the filter.
            "ptrace": sys_call(101, 0, 0, 0, 0),
            # Reading its own memory succeeds without it (16 bytes).
            "process_vm_readv": sys_call(310, os.getpid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0),
            "process_vm_writev": sys_call(311, os.getpid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0),
            # kcmp(self, self, KCMP_FILE, 0, 0): 0 without it.
            "kcmp": sys_call(312, os.getpid(), os.getpid(), 0, 0, 0),
        }
        """
    )
    assert report == {"ptrace": EPERM, "process_vm_readv": EPERM, "process_vm_writev": EPERM, "kcmp": EPERM}


def test_kernel_surface_and_host_administration_are_refused(probe) -> None:
    report = probe(
        """
        attr = ctypes.create_string_buffer(128)
        return {
            "perf_event_open": sys_call(298, attr, 0, -1, -1, 0),
            "bpf": sys_call(321, 0, None, 0),
            # UFFD_USER_MODE_ONLY is allowed to anyone without the filter.
            "userfaultfd": sys_call(323, 1 | os.O_CLOEXEC),
            "open_by_handle_at": sys_call(304, -100, None, 0),
            "kexec_load": sys_call(246, 0, 0, None, 0),
            "init_module": sys_call(175, None, 0, b""),
            "finit_module": sys_call(313, 0, b"", 0),
            "delete_module": sys_call(176, b"loop", 0),
            "reboot": sys_call(169, 0, 0, 0, None),
            "syslog": sys_call(103, 10, None, 0),
            # mq_open("/q", O_CREAT | O_RDWR, 0600, NULL): a queue without the filter.
            "mq_open": sys_call(240, b"q", 0o100 | 0o2, 0o600, None),
        }
        """
    )
    assert report == dict.fromkeys(report, EPERM)
    assert len(report) == 11


def test_namespaces_and_mounts_cannot_change(probe) -> None:
    report = probe(
        """
        results = {
            "mount": sys_call(165, b"none", b"/tmp", b"tmpfs", 0, None),
            "umount2": sys_call(166, b"/tmp", 0),
            "pivot_root": sys_call(155, b"/tmp", b"/tmp"),
            "chroot": sys_call(161, b"/tmp"),
            "unshare": sys_call(272, 0x10000000),  # ENOSPC without the filter (no nested userns)
            "setns": sys_call(308, 0, 0),  # EBADF without it
            "fsopen": sys_call(430, b"tmpfs", 0),
            "open_tree": sys_call(428, -100, b"/tmp", 1),
            "move_mount": sys_call(429, -100, b"/tmp", -100, b"/tmp", 0),
            "clone3": sys_call(435, None, 0),
        }
        # clone(CLONE_NEWUSER | SIGCHLD) fails with ENOSPC without the filter; a child, should
        # one ever start, leaves at once.
        child = sys_call(56, 0x10000000 | 17, 0, 0, 0, 0)
        if child == 0:
            os._exit(0)
        results["clone_newuser"] = child
        results["clone_newnet"] = sys_call(56, 0x40000000 | 17, 0, 0, 0, 0)
        # A plain fork still works (the filter does not break subprocesses).
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        results["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        import subprocess, sys
        results["subprocess"] = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True).stdout.strip()
        return results
        """
    )
    assert report.pop("clone3") == -errno.ENOSYS
    assert report.pop("fork") == 7
    assert report.pop("subprocess") == "42"
    assert report == dict.fromkeys(report, EPERM)


def test_only_the_default_personality(probe) -> None:
    report = probe(
        """
        return {
            "query": sys_call(135, 0xFFFFFFFF),
            "default": sys_call(135, 0),
            "no_randomize": sys_call(135, 0x0040000),  # ADDR_NO_RANDOMIZE: allowed without it
            "linux32": sys_call(135, 0x0008),
            "read_implies_exec": sys_call(135, 0x0400000),
            "high_bits": sys_call(135, 0x1_0004_0000),
            "after": sys_call(135, 0xFFFFFFFF),
        }
        """
    )
    assert report == {
        "query": 0,
        "default": 0,
        "no_randomize": EPERM,
        "linux32": EPERM,
        "read_implies_exec": EPERM,
        "high_bits": EPERM,
        "after": 0,
    }


def test_only_unix_and_ip_sockets(probe) -> None:
    report = probe(
        """
        import socket
        def family(domain, kind=socket.SOCK_DGRAM, protocol=0):
            fd = sys_call(41, domain, kind, protocol)
            if fd >= 0:
                os.close(fd)
                return "opened"
            return fd
        def python_netlink():
            try:
                socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 15).close()  # NETLINK_KOBJECT_UEVENT
            except PermissionError:
                return "PermissionError"
            return "opened"
        pair = (ctypes.c_int * 2)()
        return {
            "unix": family(1),
            "inet": family(2),
            "inet6": family(10),
            "socketpair_unix": "opened" if sys_call(53, 1, 1, 0, pair) == 0 else "refused",
            # NETLINK_ROUTE stays, read-only (the C library lists interfaces through it).
            "netlink_route": family(16, socket.SOCK_RAW, 0),
            "interfaces": [name for _, name in socket.if_nameindex()],
            # Each of these opens without the filter, as the sandbox user in its own netns.
            "netlink_audit": family(16, socket.SOCK_RAW, 9),
            "netlink_uevent": family(16, socket.SOCK_DGRAM, 15),
            "netlink_sock_diag": family(16, socket.SOCK_DGRAM, 4),
            "netlink_generic": family(16, socket.SOCK_DGRAM, 16),
            "netlink_netfilter": family(16, socket.SOCK_DGRAM, 12),
            "alg": family(38, socket.SOCK_SEQPACKET),
            "packet": family(17, socket.SOCK_RAW),
            "vsock": family(40, socket.SOCK_STREAM),
            # 0x1_0000_0010 is AF_NETLINK to a kernel that reads an int; so is protocol
            # 0x1_0000_0000 NETLINK_ROUTE.
            "netlink_high_bits": family(0x1_0000_0010, socket.SOCK_RAW, 15),
            "netlink_route_high_bits": family(16, socket.SOCK_RAW, 0x1_0000_0000),
            "socketpair_netlink": sys_call(53, 16, socket.SOCK_RAW, 0, pair),
            # The Python API sees the refusal as PermissionError.
            "python_netlink": python_netlink(),
        }
        """
    )
    assert report == {
        "unix": "opened",
        "inet": "opened",
        "inet6": "opened",
        "socketpair_unix": "opened",
        "netlink_route": "opened",
        "interfaces": ["lo"],
        "netlink_audit": EPERM,
        "netlink_uevent": EPERM,
        "netlink_sock_diag": EPERM,
        "netlink_generic": EPERM,
        "netlink_netfilter": EPERM,
        "alg": EPERM,
        "packet": EPERM,
        "vsock": EPERM,
        "netlink_high_bits": EPERM,
        "netlink_route_high_bits": EPERM,
        "socketpair_netlink": EPERM,
        "python_netlink": "PermissionError",
    }


def test_the_32_bit_and_x32_abis_are_refused(probe) -> None:
    report = probe(
        """
        import mmap, subprocess, sys
        # getpid through the i386 ABI (int 0x80, eax = 20): the pid without the filter. Run in
        # a child of its own, so that a kernel without 32-bit emulation only kills that child.
        i386 = (
            "import ctypes, mmap, os\\n"
            "m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\\n"
            "m.write(bytes([0xb8, 0x14, 0, 0, 0, 0xcd, 0x80, 0xc3]))\\n"
            "f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))\\n"
            "print(f(), os.getpid())\\n"
        )
        child = subprocess.run([sys.executable, "-c", i386], capture_output=True, text=True)
        got, pid = (child.stdout.split() + ["", ""])[:2]
        return {
            "i386_getpid": int(got) if got else child.returncode,
            "i386_child_pid": int(pid) if pid else None,
            # getpid through the x32 ABI (the 0x40000000 bit).
            "x32_getpid": sys_call(0x40000000 | 39),
            "native_getpid": sys_call(39) == os.getpid(),
        }
        """
    )
    assert report["i386_child_pid"] is not None and report["i386_child_pid"] > 1
    assert report["i386_getpid"] == EPERM
    assert report["x32_getpid"] == EPERM
    assert report["native_getpid"] is True


def test_proc_hides_the_hosts_boot_arguments_and_keys(probe) -> None:
    report = probe(
        """
        def read(path):
            try:
                with open(path, "rb") as handle:
                    return handle.read(4096).decode("utf-8", "replace")
            except OSError as exc:
                return type(exc).__name__
        return {path: read(path) for path in ("/proc/cmdline", "/proc/keys", "/proc/key-users", "/proc/self/status")}
        """
    )
    assert report["/proc/cmdline"] == "PermissionError"
    assert report["/proc/keys"] in ("PermissionError", "FileNotFoundError")
    assert report["/proc/key-users"] in ("PermissionError", "FileNotFoundError")
    assert "Seccomp:" in report["/proc/self/status"]
    host_cmdline = Path("/proc/cmdline").read_text().strip()
    assert host_cmdline and all(host_cmdline not in value for value in report.values())


def test_the_program_is_built_once_and_is_valid_bpf() -> None:
    program = seccomp.filter_program()
    assert program is seccomp.filter_program()
    # struct sock_filter is 8 bytes; the kernel accepts at most 4096 instructions.
    assert len(program) % 8 == 0 and 0 < len(program) // 8 < 4096


def test_check_sandbox_loads_the_filter() -> None:
    check_sandbox()
