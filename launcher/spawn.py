"""Binding at birth for the workers a framework starts itself, with set_affinity's arguments and plan:

    subprocess.Popen(bound_argv(["python", "worker.py"], rank))       # a command
    start_bound(ctx.Process(target=work, args=(rank,)), rank)         # instead of .start()

The child gets TOPO_BINDING and, unless set, OMP_NUM_THREADS as topo's launchers set it. With
spawn the calling thread takes the child's binding, forks and execs it (both keep the thread's CPUs
and memory policy) and takes its own back; a forkserver child binds itself, every thread and the
pages touched so far before its target runs; fork copies this process, pages and all: refused.
"""
from __future__ import annotations

import functools
import multiprocessing
import multiprocessing.forkserver
import os
import sys
import threading
import warnings
from typing import Sequence

from topo import syscalls
from topo.binding import BINDING_VAR, Binding
from topo.cpuset import CpuSet
from topo.errors import TopoError
from topo.launcher import bindexec
from topo.launcher.affinity import (AffinityError, DeviceId, Mode, Multithreading, Scope, apply_binding, home_nodes,
                                    migrate_to, plan_here, this_machine)
from topo.launcher.environ import thread_env

_WINDOW = threading.Lock()  # one child's binding on the calling thread at a time (os.environ is shared)


def plan_child(device_id: DeviceId, nproc_per_node: int | None = None, *, memory: str | None = None,
               **options: object) -> tuple[Binding, dict[str, str]]:
    """The binding a child for `device_id` gets (set_affinity's plan on this machine), and the
    environment it adds: OMP_NUM_THREADS as topo's launchers set it, unless it is set."""
    binding, share = plan_here(device_id, nproc_per_node, memory=memory, **options)
    return binding, thread_env(os.environ, binding, share, share)


def bound_argv(argv: Sequence[str | os.PathLike[str]], device_id: DeviceId, nproc_per_node: int | None = None, *,
               mode: Mode | str = Mode.UNIQUE_CONTIGUOUS, scope: Scope | str = Scope.NODE,
               multithreading: Multithreading | str = Multithreading.ALL_LOGICAL, balanced: bool = True,
               min_physical_cores: int = 1, max_physical_cores: int | None = None, memory: str | None = None,
               bind_fallback: bool = False) -> list[str]:
    """`argv` prefixed so that the command starts bound as set_affinity(device_id, ...) would bind
    it: `[sys.executable, "-m", "topo.launcher.bindexec", "cpus=0-3", "memory=bind:0", "--", *argv]`.
    The prefix exits 1 when the kernel refuses the binding (unless bind_fallback), 127 when the
    command is not found."""
    argv = [str(a) for a in argv]
    if not argv:
        raise AffinityError("bound_argv: the command is empty")
    binding, env = plan_child(device_id, nproc_per_node, mode=mode, scope=scope, multithreading=multithreading,
                              balanced=balanced, min_physical_cores=min_physical_cores,
                              max_physical_cores=max_physical_cores, memory=memory)
    flags = ["--bind-fallback"] if bind_fallback else []
    flags += [f"--env={name}={value}" for name, value in env.items()]
    return [sys.executable, "-m", bindexec.__name__, *flags, *binding.env_value().split(), "--", *argv]


def start_bound(process: multiprocessing.process.BaseProcess, device_id: DeviceId, nproc_per_node: int | None = None,
                *, mode: Mode | str = Mode.UNIQUE_CONTIGUOUS, scope: Scope | str = Scope.NODE,
                multithreading: Multithreading | str = Multithreading.ALL_LOGICAL, balanced: bool = True,
                min_physical_cores: int = 1, max_physical_cores: int | None = None, memory: str | None = None,
                bind_fallback: bool = False) -> Binding:
    """Start `process` (a spawn or forkserver multiprocessing.Process, not yet started) bound as
    set_affinity(device_id, ...) would bind it (module doc); the binding. AffinityError when it cannot be."""
    method = getattr(process, "_start_method", None) or multiprocessing.get_start_method()
    binding, env = plan_child(device_id, nproc_per_node, mode=mode, scope=scope, multithreading=multithreading,
                              balanced=balanced, min_physical_cores=min_physical_cores,
                              max_physical_cores=max_physical_cores, memory=memory)
    if method == "spawn":
        _spawn_bound(process, binding, bind_fallback, env)
    elif method == "forkserver":
        if type(process).run is not multiprocessing.process.BaseProcess.run:
            raise AffinityError(f"start_bound: {type(process).__name__} overrides run(), which forkserver children "
                                "run without a hook: call set_affinity(..., migrate=True, threads='all') first "
                                "thing in run(), or use the spawn start method")
        multiprocessing.forkserver.ensure_running()  # started here, unbound, if it was not yet
        process._target = functools.partial(_bind_first, binding, bind_fallback,
                                            home_nodes(this_machine(), binding), env, process._target)
        process.start()
    else:
        raise AffinityError(f"start_bound: start method {method!r} copies this process, pages and all; use spawn "
                            "or forkserver, or call set_affinity(..., migrate=True) in the child")
    return binding


def _spawn_bound(process, binding: Binding, fallback: bool, env: dict[str, str]) -> None:
    with _WINDOW:
        cpus = os.sched_getaffinity(0)
        policy = syscalls.get_mempolicy() if binding.memory_policy else None
        saved = {name: os.environ.get(name) for name in (BINDING_VAR, *env)}
        try:
            held = apply_binding(binding, fallback, "start_bound", stacklevel=4)
            os.environ.update(env, **{BINDING_VAR: held.env_value()})
            process.start()
        finally:
            os.sched_setaffinity(0, cpus)
            if policy is not None:
                try:
                    syscalls.set_mempolicy(*policy)
                except (TopoError, KeyError) as exc:
                    warnings.warn(f"start_bound: could not restore this thread's memory policy {policy[0]} "
                                  f"({exc})", stacklevel=3)
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def _bind_first(binding: Binding, fallback: bool, home: CpuSet, env: dict[str, str], target, *args, **kwargs):
    """A forkserver child's target: bind every thread, memory and the pages touched so far, then run `target`."""
    held = apply_binding(binding, fallback, "start_bound", threads=syscalls.other_threads())
    migrate_to(home)
    os.environ.update(env, **{BINDING_VAR: held.env_value()})
    return None if target is None else target(*args, **kwargs)
