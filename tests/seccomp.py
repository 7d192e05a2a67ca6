"""A seccomp filter that makes the kernel refuse set_mempolicy, as a container's profile does.

Installed in a child process (a filter cannot be removed); `refuse_set_mempolicy({2: EPERM})`
refuses MPOL_BIND with EPERM and lets every other mode through, `refuse_set_mempolicy()` refuses
every mode. Built from the classic BPF instructions of linux/filter.h and linux/seccomp.h.
"""

from __future__ import annotations

import ctypes
import errno
import platform

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
BPF_RET_K = 0x06  # BPF_RET | BPF_K
# offsets in struct seccomp_data: nr, arch, then args[0] (its low word on little-endian machines)
NR, ARCH, ARG0 = 0, 4, 16
# machine -> (AUDIT_ARCH_*, __NR_set_mempolicy)
ARCHES = {"x86_64": (0xC000003E, 238), "aarch64": (0xC00000B7, 237)}


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def supported() -> bool:
    return platform.machine() in ARCHES


def refuse_set_mempolicy(modes: dict[int, int] | None = None) -> None:
    """Install the filter in this process: set_mempolicy with a mode in `modes` fails with its
    errno (every mode fails with EPERM when `modes` is None); all else is allowed."""
    audit_arch, nr = ARCHES[platform.machine()]
    program = [(BPF_LD_W_ABS, 0, 0, ARCH), (BPF_JEQ_K, 1, 0, audit_arch), (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
               (BPF_LD_W_ABS, 0, 0, NR), (BPF_JEQ_K, 1, 0, nr), (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW)]
    if modes is None:
        program.append((BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM))
    else:
        program.append((BPF_LD_W_ABS, 0, 0, ARG0))
        for mode, code in modes.items():  # mode matches: fall through to the refusal, else skip it
            program += [(BPF_JEQ_K, 0, 1, mode), (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | code)]
        program.append((BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    filters = (SockFilter * len(program))(*(SockFilter(*insn) for insn in program))
    fprog = SockFprog(len(program), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    for args in ((PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), (PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0)):
        if libc.prctl(*(ctypes.c_ulong(a) for a in args)) != 0:
            raise OSError(ctypes.get_errno(), f"prctl{args[:2]}")
