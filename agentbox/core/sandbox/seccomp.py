"""The seccomp filter every sandbox runs under: the syscalls that could undo a sandbox fail.

bwrap drops every capability and sets `no_new_privs`, so most of these calls would fail
anyway; the filter makes the rule independent of who runs agentbox and of the kernel's
sysctls. Blocked (they fail with EPERM, the program keeps running):

- mount-table changes: mount, umount2, pivot_root and the new mount API (open_tree,
  move_mount, fsopen, fsconfig, fsmount, fspick, mount_setattr);
- new or other namespaces: unshare, setns, and clone with any CLONE_NEW* flag (clone3
  answers ENOSYS, as in container runtimes, so libc falls back to clone, whose flags the
  filter can read);
- ptrace, the kernel keyrings (keyctl, add_key, request_key), bpf, perf_event_open,
  userfaultfd, kernel modules and kexec;
- the terminal-injection ioctls TIOCSTI and TIOCLINUX, which could push keystrokes into
  the user's shell from an attached session.

A syscall of another architecture (the i386 or x32 ABI on x86-64) kills the process, so
the table cannot be dodged by switching ABI. The filter is a classic BPF program built
here (no libseccomp needed) and handed to bwrap through `--seccomp FD`.
"""

from __future__ import annotations

import errno
import functools
import os
import struct
from dataclasses import dataclass

# BPF instruction classes and fields (linux/filter.h)
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JSET_K = 0x45
_RET_K = 0x06

_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000

# offsets in struct seccomp_data
_NR, _ARCH = 0, 4


def _arg_low(index: int) -> int:
    """Offset of the low 32 bits of syscall argument `index` (little-endian)."""
    return 16 + 8 * index


CLONE_NS_FLAGS = 0x7E020000
"""CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET."""
TIOCSTI = 0x5412
TIOCLINUX = 0x541C


@dataclass(frozen=True)
class _Arch:
    audit: int
    numbers: dict[str, int]
    foreign_bit: int | None = None
    """Syscall-number bit of a second ABI on the same audit arch (x32 on x86-64)."""


_DENIED = ("mount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount",
           "fspick", "mount_setattr", "unshare", "setns", "ptrace", "keyctl", "add_key", "request_key",
           "bpf", "perf_event_open", "userfaultfd", "init_module", "finit_module", "delete_module",
           "kexec_load", "kexec_file_load")

_ARCHES = {
    "x86_64": _Arch(0xC000003E, {
        "mount": 165, "umount2": 166, "pivot_root": 155, "open_tree": 428, "move_mount": 429, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "unshare": 272, "setns": 308,
        "ptrace": 101, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323, "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246,
        "kexec_file_load": 320, "clone": 56, "clone3": 435, "ioctl": 16,
    }, foreign_bit=0x40000000),
    "aarch64": _Arch(0xC00000B7, {
        "mount": 40, "umount2": 39, "pivot_root": 41, "open_tree": 428, "move_mount": 429, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "unshare": 97, "setns": 268,
        "ptrace": 117, "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241,
        "userfaultfd": 282, "init_module": 105, "finit_module": 273, "delete_module": 106, "kexec_load": 104,
        "kexec_file_load": 294, "clone": 220, "clone3": 435, "ioctl": 29,
    }),
}
_ARCHES["arm64"] = _ARCHES["aarch64"]
_ARCHES["amd64"] = _ARCHES["x86_64"]

BLOCKED_SYSCALLS: tuple[str, ...] = (*_DENIED, "clone (CLONE_NEW*)", "clone3 (ENOSYS)", "ioctl (TIOCSTI, TIOCLINUX)")
"""What the filter refuses, for `doctor` and the docs."""


def supported() -> bool:
    """True when this machine's architecture has a syscall table here."""
    return os.uname().machine in _ARCHES


class _Program:
    """A tiny assembler: instructions with symbolic jump targets, resolved at the end."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | int, str | int, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def op(self, code: int, k: int, jt: str | int = 0, jf: str | int = 0) -> None:
        self.code.append((code, jt, jf, k))

    def assemble(self) -> bytes:
        out = bytearray()
        for index, (code, jt, jf, k) in enumerate(self.code):
            offsets = []
            for target in (jt, jf):
                if isinstance(target, str):
                    offset = self.labels[target] - index - 1
                    if not 0 <= offset <= 255:
                        raise ValueError(f"seccomp jump to {target} out of range")
                    offsets.append(offset)
                else:
                    offsets.append(target)
            out += struct.pack("=HBBI", code, offsets[0], offsets[1], k & 0xFFFFFFFF)
        return bytes(out)


@functools.lru_cache(maxsize=1)
def program(machine: str | None = None) -> bytes:
    """The filter as `struct sock_filter[]` bytes, for bwrap's `--seccomp FD`."""
    arch = _ARCHES.get(machine or os.uname().machine)
    if arch is None:
        raise OSError(errno.ENOSYS, f"no seccomp syscall table for {machine or os.uname().machine}")
    p = _Program()
    p.op(_LD_W_ABS, _ARCH)
    p.op(_JEQ_K, arch.audit, jt=1, jf=0)
    p.op(_RET_K, _RET_KILL_PROCESS)
    p.op(_LD_W_ABS, _NR)
    if arch.foreign_bit is not None:
        p.op(_JSET_K, arch.foreign_bit, jt="kill", jf=0)
    for name in _DENIED:
        p.op(_JEQ_K, arch.numbers[name], jt="eperm", jf=0)
    p.op(_JEQ_K, arch.numbers["clone"], jt="clone", jf=0)
    p.op(_JEQ_K, arch.numbers["clone3"], jt="enosys", jf=0)
    p.op(_JEQ_K, arch.numbers["ioctl"], jt="ioctl", jf=0)
    p.op(_RET_K, _RET_ALLOW)
    p.label("clone")
    p.op(_LD_W_ABS, _arg_low(0))
    p.op(_JSET_K, CLONE_NS_FLAGS, jt="eperm", jf=0)
    p.op(_RET_K, _RET_ALLOW)
    p.label("ioctl")
    p.op(_LD_W_ABS, _arg_low(1))  # the kernel reads the request as 32 bits: so does the filter
    p.op(_JEQ_K, TIOCSTI, jt="eperm", jf=0)
    p.op(_JEQ_K, TIOCLINUX, jt="eperm", jf=0)
    p.op(_RET_K, _RET_ALLOW)
    p.label("eperm")
    p.op(_RET_K, _RET_ERRNO | errno.EPERM)
    p.label("enosys")
    p.op(_RET_K, _RET_ERRNO | errno.ENOSYS)
    p.label("kill")
    p.op(_RET_K, _RET_KILL_PROCESS)
    return p.assemble()
