"""The syscall filter every sandbox runs under, built with libseccomp and handed to bubblewrap.

bubblewrap loads a classic-BPF seccomp program from a descriptor (``--seccomp FD``) right before
it executes the sandboxed command, after ``no_new_privs`` is set, so the filter binds the
command and everything it starts, and can never be lifted. This module builds that program with
Debian's ``libseccomp2`` through ctypes (no Python binding is needed) and returns its bytes.

The filter is a deny list on top of the namespaces, the unprivileged uid and the empty
capability set, which already make most of these calls fail: it shrinks the kernel surface a
toolkit can reach (the calls below are where most recent local privilege escalations were) and
closes the channels that namespaces do not separate. Denied calls fail with ``EPERM`` (``clone3``
with ``ENOSYS``, so that the C library falls back to ``clone``, whose flags can be checked); the
process is not killed, so a library that probes for a feature just sees it missing.

What is refused, and why (docs/sandbox.md has the same list):

- ``add_key``, ``request_key``, ``keyctl``: the kernel keyring is keyed by uid, not by
  namespace, so it would be a channel between two runs.
- ``mq_open`` and the other POSIX message queue calls: the queues live in the IPC namespace,
  which the calls of a warm sandbox share, and cannot be listed (so not cleared) without a
  mount.
- ``io_uring_setup``, ``io_uring_enter``, ``io_uring_register``: a large, often-exploited
  interface whose operations bypass this very filter.
- ``ptrace``, ``process_vm_readv``, ``process_vm_writev``, ``kcmp``, ``pidfd_getfd``: reading or
  writing another process's memory or descriptors.
- ``perf_event_open``, ``bpf``, ``userfaultfd``, ``lookup_dcookie``, ``fanotify_init``,
  ``open_by_handle_at``, ``name_to_handle_at``: kernel attack surface and host information
  with no use in a tool (``userfaultfd`` is the classic way to widen race windows;
  ``open_by_handle_at`` walks around mount boundaries).
- ``kexec_load``, ``kexec_file_load``, ``init_module``, ``finit_module``, ``delete_module``,
  ``reboot``, ``swapon``, ``swapoff``, ``acct``, ``quotactl``, ``syslog``, ``iopl``,
  ``ioperm``, ``settimeofday``, ``clock_settime``, ``clock_adjtime``, ``adjtimex``,
  ``vhangup``: administration of the host.
- ``mount``, ``umount2``, ``pivot_root``, ``chroot``, ``unshare``, ``setns``, the new mount API
  (``fsopen``, ``fsconfig``, ``fsmount``, ``fspick``, ``move_mount``, ``open_tree``,
  ``mount_setattr``), and ``clone`` with any ``CLONE_NEW*`` flag: the sandbox's namespaces and
  mounts are fixed once bubblewrap has built them.
- ``personality`` with anything but the default persona (0) or the query (0xffffffff): other
  personas change the address-space layout (``ADDR_NO_RANDOMIZE``) or the syscall semantics.
- ``socket`` and ``socketpair`` for any family but ``AF_UNIX``, ``AF_INET`` and ``AF_INET6``:
  no packet sockets, no ``AF_ALG`` (the kernel's crypto API), ``AF_VSOCK``, Bluetooth..., and
  no netlink but ``NETLINK_ROUTE``: the C library's ``if_nameindex``, ``getifaddrs`` and the
  ``AI_ADDRCONFIG`` check of ``getaddrinfo`` read the interface list through it, and without
  capabilities it can only read the sandbox's own network namespace (which has ``lo`` and
  nothing else). Every other netlink protocol is refused: ``NETLINK_KOBJECT_UEVENT`` (host
  device events), ``NETLINK_AUDIT``, ``NETLINK_SOCK_DIAG``, ``NETLINK_GENERIC`` (a gateway to
  dozens of kernel subsystems), netfilter, xfrm...
- every system call made through another ABI than the native x86-64 one (the 32-bit ``int 0x80``
  i386 ABI and x32): the filter only describes native numbers, and compat code paths have
  their own history of bugs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import platform
import threading

from toolhub.sandbox.limits import SandboxUnavailable

# libseccomp's constants (seccomp.h of libseccomp 2.5).
_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_FLTATR_ACT_BADARCH = 2
_SCMP_CMP_NE = 1
_SCMP_CMP_EQ = 4
_SCMP_CMP_GT = 6
_SCMP_CMP_MASKED_EQ = 7
_NR_SCMP_ERROR = -1


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0x0000FFFF)


DENIED_CALLS: tuple[str, ...] = (
    # the kernel keyring
    "add_key",
    "request_key",
    "keyctl",
    # POSIX message queues: they live in the IPC namespace, which a warm sandbox's calls
    # share, and cannot be listed without a mount, so they could not be cleared between calls
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedreceive",
    "mq_notify",
    "mq_getsetattr",
    # io_uring
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    # other processes' memory and descriptors
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    # kernel attack surface and host information
    "perf_event_open",
    "bpf",
    "userfaultfd",
    "lookup_dcookie",
    "fanotify_init",
    "open_by_handle_at",
    "name_to_handle_at",
    # administration of the host
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "syslog",
    "iopl",
    "ioperm",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "vhangup",
    # namespaces and mounts
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
)

# Calls answered with ENOSYS: clone3 passes its flags in memory, where a filter cannot read
# them, so it must look absent to make the C library use clone, whose flags are checked.
ABSENT_CALLS: tuple[str, ...] = ("clone3",)

# CLONE_NEWTIME, CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER,
# CLONE_NEWPID, CLONE_NEWNET.
NAMESPACE_FLAGS: tuple[int, ...] = (
    0x00000080,
    0x00020000,
    0x02000000,
    0x04000000,
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
)

ALLOWED_SOCKET_FAMILIES: tuple[int, ...] = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6
_AF_NETLINK = 16
_AF_MAX = 46  # Linux 6.x; anything above is refused by the "greater than" rule anyway


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as exc:
        raise SandboxUnavailable(
            f"libseccomp is not installed ({exc}). Install the Debian package `libseccomp2` "
            "(scripts/system-setup does); every sandbox runs under a seccomp filter."
        ) from exc
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.restype = None
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_attr_set.restype = ctypes.c_int
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.restype = ctypes.c_int
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.restype = ctypes.c_int
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_export_bpf.restype = ctypes.c_int
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


_lock = threading.Lock()
_program: bytes | None = None


def filter_program() -> bytes:
    """The BPF program (``struct sock_filter`` array) for bubblewrap's ``--seccomp``.

    Built once per process and cached. Raises ``SandboxUnavailable`` when libseccomp is
    missing or refuses the rules, since no sandbox may start without the filter.
    """
    global _program
    with _lock:
        if _program is None:
            _program = _build()
        return _program


def _build() -> bytes:
    if platform.machine() != "x86_64":
        raise SandboxUnavailable(f"the seccomp filter is written for x86-64, not {platform.machine()}")
    lib = _library()
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        raise SandboxUnavailable("libseccomp could not create a filter")
    eperm = _errno_action(errno.EPERM)
    try:
        # A context starts with the native architecture only; calls of any other ABI (i386
        # through int 0x80, x32) meet the "bad architecture" action.
        _check(lib.seccomp_attr_set(ctx, _SCMP_FLTATR_ACT_BADARCH, eperm), "the bad-architecture action")
        for name in DENIED_CALLS:
            _rule(lib, ctx, eperm, name)
        for name in ABSENT_CALLS:
            _rule(lib, ctx, _errno_action(errno.ENOSYS), name)
        for flag in NAMESPACE_FLAGS:
            _rule(lib, ctx, eperm, "clone", (0, _SCMP_CMP_MASKED_EQ, flag, flag))
        # personality(unsigned int): refuse everything but 0 (the default persona) and
        # 0xffffffff (the query). A rule compares an argument once, so "neither all zeros
        # nor all ones in the low 32 bits" is written as "some bit k is set while bit k+1
        # (cyclically) is clear", one masked comparison per k: a 32-bit value that is not
        # constant has such a 1-to-0 step somewhere around the circle.
        for bit in range(32):
            mask = (1 << bit) | (1 << ((bit + 1) % 32))
            _rule(lib, ctx, eperm, "personality", (0, _SCMP_CMP_MASKED_EQ, mask, 1 << bit))
        for call in ("socket", "socketpair"):
            _rule(lib, ctx, eperm, call, (0, _SCMP_CMP_GT, _AF_MAX, 0))
            for family in range(_AF_MAX + 1):
                if family in ALLOWED_SOCKET_FAMILIES:
                    continue
                if family == _AF_NETLINK and call == "socket":
                    # Only NETLINK_ROUTE (protocol 0), see the docstring.
                    _rule(lib, ctx, eperm, call, (0, _SCMP_CMP_EQ, family, 0), (2, _SCMP_CMP_NE, 0, 0))
                else:
                    _rule(lib, ctx, eperm, call, (0, _SCMP_CMP_EQ, family, 0))
        fd = os.memfd_create("toolhub-seccomp", os.MFD_CLOEXEC)
        try:
            _check(lib.seccomp_export_bpf(ctx, fd), "exporting the program")
            size = os.lseek(fd, 0, os.SEEK_END)
            program = os.pread(fd, size, 0)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)
    if not program or len(program) % 8:
        raise SandboxUnavailable("libseccomp exported an empty or malformed filter")
    return program


def _rule(lib: ctypes.CDLL, ctx: int, action: int, name: str, *comparisons: tuple[int, int, int, int]) -> None:
    number = lib.seccomp_syscall_resolve_name(name.encode())
    if number == _NR_SCMP_ERROR:
        # A call this libseccomp does not know does not exist on this kernel's ABI either.
        return
    array = (_ArgCmp * max(len(comparisons), 1))(*(_ArgCmp(*c) for c in comparisons))
    _check(lib.seccomp_rule_add_array(ctx, action, number, len(comparisons), array), f"the rule for {name}")


def _check(result: int, what: str) -> None:
    if result < 0:
        raise SandboxUnavailable(f"libseccomp refused {what}: {os.strerror(-result)}")
