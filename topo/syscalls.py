"""`apply`, the one applier of a Binding, and the Linux calls Python's os module lacks
(set_mempolicy, get_mempolicy, migrate_pages, prctl). glibc exports none of the NUMA calls (libnuma
wraps them): they go through syscall(2) with this architecture's numbers."""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import threading

from topo.binding import Binding
from topo.cpuset import CpuSet
from topo.errors import TopoError

# The kernel's memory policies (include/uapi/linux/mempolicy.h); MPOL_PREFERRED_MANY is Linux 5.15+.
POLICIES = {"default": 0, "preferred": 1, "bind": 2, "interleave": 3, "local": 4, "preferred-many": 5}
POLICY_NAMES = {v: k for k, v in POLICIES.items()}
# (set_mempolicy, get_mempolicy, migrate_pages): x86_64 has its own table, arm64 and riscv64 the generic one
_NUMBERS = {"x86_64": (238, 239, 256), "amd64": (238, 239, 256), "ppc64le": (261, 260, 258), "ppc64": (261, 260, 258),
            "aarch64": (237, 236, 238), "arm64": (237, 236, 238), "riscv64": (237, 236, 238),
            "s390x": (270, 269, 287), "i686": (276, 275, 294), "i386": (276, 275, 294)}
PR_SET_PDEATHSIG = 1
_MASK_BITS = 64  # one unsigned long per 64 nodes


class SyscallError(TopoError):
    """A system call the kernel refused, with its reason."""

    def __init__(self, call: str, errno: int, detail: str = ""):
        self.call, self.errno = call, errno
        super().__init__(f"{call}: {os.strerror(errno)}{f' ({detail})' if detail else ''}")


class BindingRefused(SyscallError):
    """The kernel refused a binding (seccomp, a container without CAP_SYS_NICE, CPUs or nodes
    outside the cgroup's); nothing of it was applied. `memory`: the memory policy was refused."""

    def __init__(self, message: str, refused: SyscallError):
        TopoError.__init__(self, message)
        self.call, self.errno, self.refused = refused.call, refused.errno, refused

    @property
    def memory(self) -> bool:
        return self.call == "set_mempolicy"


def apply(binding: Binding, *, fallback: bool = False, threads=(), option: str = "--bind-fallback") -> Binding:
    """Bind the calling thread as `binding` says, memory policy first, then CPUs; return what held.
    `fallback`: a refused memory policy walks down `Binding.relaxed` (bind, preferred, CPUs alone)
    instead of raising. `threads`: other threads of this process that get the CPUs too. When the
    kernel refuses: BindingRefused naming `option` (the flag asking for the fallback), and the
    memory policy put back."""
    held, previous = binding, None
    if binding.memory_policy is not None and binding.cpus is not None:
        try:
            previous = get_mempolicy()  # put back if the CPUs are refused
        except SyscallError:
            pass  # refused as Docker's seccomp profile refuses every NUMA call: set_mempolicy will be too
    while held.memory_policy is not None:
        try:
            _set_policy(held.memory_policy, held.memory_nodes or CpuSet())
            break
        except SyscallError as exc:
            if not fallback:
                raise BindingRefused(
                    f"{exc}: the kernel refused memory policy {held.memory_policy!r}"
                    f"{f' on node(s) {held.memory_nodes}' if held.memory_nodes else ''} (seccomp, or a container "
                    "without CAP_SYS_NICE, blocks set_mempolicy; the nodes must be in Mems_allowed); "
                    f"{option} tries 'preferred', then binds CPUs alone", exc) from exc
            held = held.relaxed()
    if binding.cpus is not None:
        try:
            os.sched_setaffinity(0, binding.cpus)
        except OSError as exc:
            if held.memory_policy is not None and previous is not None:
                try:
                    set_mempolicy(*previous)
                except (TopoError, KeyError):
                    pass  # a policy this module cannot name (weighted interleave)
            refused = SyscallError("sched_setaffinity", exc.errno, f"CPUs {binding.cpus}")
            raise BindingRefused(str(refused), refused) from None
        for tid in threads:
            try:
                os.sched_setaffinity(tid, binding.cpus)
            except OSError:
                pass  # the thread ended meanwhile
    return held


def other_threads(only_if: set[int] | None = None) -> list[int]:
    """The ids of this process's other threads: those whose CPU affinity is `only_if`, or all."""
    me, found = threading.get_native_id(), []
    for name in os.listdir("/proc/self/task"):
        tid = int(name)
        try:
            if tid != me and (only_if is None or os.sched_getaffinity(tid) == only_if):
                found.append(tid)
        except OSError:
            pass  # ended meanwhile
    return found


def _set_policy(policy: str, nodes: CpuSet) -> None:
    """"preferred" on several nodes is MPOL_PREFERRED_MANY, which a kernel before 5.15 answers with
    EINVAL: then MPOL_PREFERRED, which keeps the first node."""
    if policy == "preferred" and nodes.weight() > 1:
        try:
            set_mempolicy("preferred-many", nodes)
            return
        except SyscallError as exc:
            if exc.errno != errno.EINVAL:
                raise
    set_mempolicy(policy, nodes)


@functools.cache
def _libc_handle():
    return ctypes.CDLL(None, use_errno=True)


def _numbers() -> tuple[int, int, int]:
    machine = platform.machine().lower()
    try:
        return _NUMBERS[machine]
    except KeyError:
        raise TopoError(f"set_mempolicy: this architecture ({machine}) is not supported, "
                        "bind memory with numactl instead") from None


def _mask(nodes: CpuSet, top: int | None = None) -> tuple[ctypes.Array, int]:
    """`nodes` as the kernel's array of unsigned longs reaching node `top` (default: the last of
    `nodes`), and the maxnode argument: one past the last bit, as numactl passes it."""
    words = (top if top is not None else nodes.last() if nodes else 0) // _MASK_BITS + 1
    arr = (ctypes.c_ulong * words)()
    for i in range(words):
        arr[i] = (nodes.mask >> (i * _MASK_BITS)) & ((1 << _MASK_BITS) - 1)
    return arr, words * _MASK_BITS + 1


def set_mempolicy(policy: str, nodes: CpuSet = CpuSet()) -> None:
    """Set this thread's memory policy (a name of POLICIES) on `nodes`, as numactl does before it
    execs; threads and children started afterwards inherit it. SyscallError with the reason."""
    mode = POLICIES[policy]
    if mode in (POLICIES["default"], POLICIES["local"]):
        mask, maxnode = None, 0
    elif not nodes:
        raise TopoError(f"set_mempolicy: policy {policy!r} needs at least one NUMA node")
    else:
        mask, maxnode = _mask(nodes)
    if _libc_handle().syscall(ctypes.c_long(_numbers()[0]), ctypes.c_int(mode), mask, ctypes.c_ulong(maxnode)):
        raise SyscallError("set_mempolicy", ctypes.get_errno(), f"{policy} {nodes}" if nodes else policy)


def get_mempolicy() -> tuple[str, CpuSet]:
    """This thread's memory policy and its nodes, e.g. ("bind", CpuSet("0"))."""
    mode = ctypes.c_int(0)
    words = 16  # 1024 nodes: the largest MAX_NUMNODES of common kernel configurations
    mask = (ctypes.c_ulong * words)()
    if _libc_handle().syscall(ctypes.c_long(_numbers()[1]), ctypes.byref(mode), mask,
                              ctypes.c_ulong(words * _MASK_BITS), None, ctypes.c_ulong(0)):
        raise SyscallError("get_mempolicy", ctypes.get_errno())
    bits = sum(int(mask[i]) << (i * _MASK_BITS) for i in range(words))
    return POLICY_NAMES.get(mode.value & 0xFF, str(mode.value)), CpuSet.from_mask(bits)


def migrate_pages(pid: int, old_nodes: CpuSet, new_nodes: CpuSet) -> int:
    """Move process `pid`'s pages (0: this process) from `old_nodes` to `new_nodes`; the number
    that could not be moved. Another user's process needs CAP_SYS_NICE. SyscallError with the reason."""
    if not new_nodes:
        raise TopoError("migrate_pages: name at least one node to move pages to")
    if not old_nodes:
        return 0
    top = max(old_nodes.last(), new_nodes.last())
    old, maxnode = _mask(old_nodes, top)
    new, _ = _mask(new_nodes, top)
    rc = _libc_handle().syscall(ctypes.c_long(_numbers()[2]), ctypes.c_int(pid), ctypes.c_ulong(maxnode), old, new)
    if rc < 0:
        raise SyscallError("migrate_pages", ctypes.get_errno(), f"nodes {old_nodes} to {new_nodes}")
    return rc


def prctl(option: int, arg2: int = 0) -> None:
    """prctl(2) with one argument (an integer, or an address from ctypes.addressof). A death signal
    (PR_SET_PDEATHSIG) follows the parent *thread*, survives exec and is cleared by fork."""
    if _libc_handle().prctl(ctypes.c_int(option), ctypes.c_ulong(arg2), ctypes.c_ulong(0), ctypes.c_ulong(0),
                            ctypes.c_ulong(0)) != 0:
        raise SyscallError(f"prctl({option})", ctypes.get_errno())


def load() -> None:
    """Resolve libc and this architecture's numbers now: a child between fork and exec must not load libraries."""
    _libc_handle()
    try:
        _numbers()
    except TopoError:
        pass  # set_mempolicy says so when it is called
