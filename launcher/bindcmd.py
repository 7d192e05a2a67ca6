"""`topo bind`: bind this process as the bind JSON says for its local rank, then exec the command.

Meant to sit between any launcher and the program (torchrun --no-python, srun, mpirun), so a plan
written by `topo plan` is applied the same way `topo launch` applies it: the same entry per local
rank, the same numactl argv for memory. A CPU-only binding needs no numactl: sched_setaffinity on
ourselves survives the exec.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping, Sequence

from launcher.binding import binding_of, check_loaded, check_tools, device_ids
from launcher.slurm import task_env
from topo.errors import ParseError, TopoError, UsageError

# Where launchers put the local rank: torchrun, Slurm, Open MPI, MPICH / Intel MPI.
LOCAL_RANK_VARS = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
BIND_FILE_VARS = ("TOPO_BIND_FILE", "MSRUN_BIND_FILE")


class CommandNotFound(TopoError):
    exit_code = 127  # the shell's codes: 127 not found, 126 found but not executable


class CommandNotExecutable(TopoError):
    exit_code = 126


def resolve_local_rank(local_rank: int | None, environ: Mapping[str, str]) -> int:
    if local_rank is not None:
        if local_rank < 0:
            raise UsageError(f"--local-rank={local_rank} must be 0 or more")
        return local_rank
    for var in LOCAL_RANK_VARS:
        value = environ.get(var)
        if value is None or value == "":
            continue
        try:
            rank = int(value)
        except ValueError:
            raise UsageError(f"{var}={value!r} is not a local rank; pass --local-rank N") from None
        if rank < 0:
            raise UsageError(f"{var}={value!r} is not a local rank; pass --local-rank N")
        return rank
    raise UsageError("no local rank: pass --local-rank N, or run under a launcher that sets "
                     + ", ".join(LOCAL_RANK_VARS))


def plan_bind(command: Sequence[str], *, bind_file: str | None = None, local_rank: int | None = None,
              environ: Mapping[str, str] | None = None, topology=None):
    """What `topo bind` will do: (argv to exec, CPUs to set on ourselves or None, env additions,
    the binding, its bind JSON key). Raises UsageError for anything that would bind wrongly."""
    from planners.bindload import load_bind

    environ = os.environ if environ is None else environ
    if not command:
        raise UsageError("no command given: topo bind [--bind-file FILE] -- COMMAND [ARGS...]")
    source = bind_file or next((environ[v] for v in BIND_FILE_VARS if environ.get(v)), None)
    if source is None:
        raise UsageError("no bind JSON: pass --bind-file FILE (write one with `topo plan -o FILE`) "
                         "or set TOPO_BIND_FILE")
    try:
        loaded = load_bind(source)
    except ParseError as exc:
        raise UsageError(f"--bind-file: {exc}") from None
    rank = resolve_local_rank(local_rank, environ)
    if topology is None:
        from topo.discovery import discover

        topology = discover()
    check_loaded(loaded, topology, "--bind-file", [])
    key = f"device{device_ids(topology, rank + 1, environ)[rank]}"
    binding = binding_of(loaded.plan.get(key), topology, memory_policy=loaded.plan.memory_policy)
    env = {}
    if loaded.path is not None:
        env = {"MSRUN_BIND_FILE": loaded.path, "MSRUN_BIND_FILE_HASH": loaded.sha256 or ""}
    if binding.cpus is not None and "OMP_NUM_THREADS" not in environ:
        env["OMP_NUM_THREADS"] = str(max(1, binding.cpus.weight()))
    if binding.prefix[:1] == ("taskset",):
        return list(command), binding.cpus, env, binding, key
    check_tools([binding])
    return [*binding.prefix, *command], None, env, binding, key


def bind_and_exec(command: Sequence[str], *, bind_file: str | None = None, local_rank: int | None = None) -> None:
    """Apply the binding and replace this process by `command`; returns only by raising."""
    argv, cpus, env, binding, key = plan_bind(command, bind_file=bind_file, local_rank=local_rank)
    if not binding.is_bound:
        print(f"topo bind: the bind JSON has no process binding for {key}; running unbound", file=sys.stderr)
    if cpus is not None:
        try:
            os.sched_setaffinity(0, set(cpus))
        except OSError as exc:
            raise UsageError(f"cannot bind to CPUs {cpus} ({exc.strerror}); bind within `topo show`'s allowed CPUs") from None
    os.environ.update({**task_env(os.environ), **env})  # under srun: RANK, WORLD_SIZE, ... from Slurm
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(argv[0], argv)
    except FileNotFoundError:
        raise CommandNotFound(f"{argv[0]}: command not found") from None
    except PermissionError:
        raise CommandNotExecutable(f"{argv[0]}: permission denied") from None
