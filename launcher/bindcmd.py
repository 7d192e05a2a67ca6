"""`topo bind`: bind this process as the bind JSON says for its local rank (or as `--mode` plans
this node), then exec the command. Between any launcher and the program, a plan is applied as `topo
launch` applies it (the same entry per local rank, the same numactl argv for memory), by
topo.syscalls.apply first: a refusal can still fall back and name its fix."""

from __future__ import annotations

import os
import shutil
import sys
from typing import Mapping, Sequence

from topo.binding import BINDING_VAR
from topo.discovery import discover
from topo.errors import ParseError, TopoError, UsageError
from topo.launcher.binding import binding_of, check_loaded, device_ids, held_words
from topo.launcher import localrank
from topo.launcher.environ import bind_file_env, sharers, thread_env
from topo.launcher.slurm import task_env
from topo.cpuset import excerpt
from topo.planners.binding import from_entry
from topo.planners.bindload import load_bind
from topo.syscalls import BindingRefused, apply

BIND_FILE_VARS = ("TOPO_BIND_FILE", "MSRUN_BIND_FILE")
MEMORY_WORDS = {"none": None, "numa": "bind", "preferred": "preferred"}  # --memory as set_affinity's memory=


class CommandError(TopoError):
    """A command that cannot be exec'd, with the shell's code: 127 not found, 126 found but not executable."""

    def __init__(self, program: str, found: bool):
        super().__init__(f"{program}: permission denied" if found else f"{program}: command not found")
        self.exit_code = 126 if found else 127


def plan_bind(command: Sequence[str], *, bind_file: str | None = None, local_rank: int | None = None,
              environ: Mapping[str, str] | None = None, topology=None):
    """(argv to exec, env additions, binding, bind JSON key) for `topo bind`; UsageError for anything
    that would bind wrongly."""
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
    rank = localrank.local_rank(environ, local_rank)
    if topology is None:
        topology = discover()
    check_loaded(loaded, topology, "--bind-file", [])
    key = f"device{device_ids(topology, rank + 1, environ)[rank]}"
    entry = loaded.plan.get(key)
    if entry is None and loaded.plan.workers():  # a file that binds no process binds none
        have = ", ".join(p.key for p in loaded.plan.workers())
        raise UsageError(f"the bind JSON has no {key} for local rank {rank} (it has {have}): plan one process per "
                         "local rank, e.g. topo plan --nproc-per-node N -o FILE, or pass the right --local-rank")
    binding = binding_of(entry, topology, memory_policy=loaded.plan.memory_policy,
                         path=environ.get("PATH", os.defpath))
    shared = 1  # how many of the plan's processes share `binding`'s busiest CPU (itself one of them)
    if binding.cpus is not None:
        others = [from_entry(p, topology, None) for p in loaded.plan.processes]
        shared = max(1, sharers([*others, binding])[-1] - 1)  # `binding` counted once
    env = {**bind_file_env(loaded.path, loaded.sha256), **thread_env(environ, binding, 1, shared)}
    argv = [*binding.prefix, *command] if binding.applied_by == "numactl" else list(command)  # else apply() alone
    return argv, env, binding, key


def plan_mode(command: Sequence[str], *, mode: str, scope: str = "node", memory: str = "none",
              local_rank: int | None = None, nproc_per_node: int | None = None,
              environ: Mapping[str, str] | None = None):
    """plan_bind for `topo bind --mode`: this local rank's share of its whole node's plan, as
    set_affinity plans it, so that every rank plans alike."""
    from topo.launcher.affinity import AffinityError, plan_here

    environ = os.environ if environ is None else environ
    if not command:
        raise UsageError("no command given: topo bind --mode MODE -- COMMAND [ARGS...]")
    rank, size, source = localrank.local_rank_and_size(environ, local_rank, nproc_per_node)
    _undo_default_binding(environ)
    try:
        binding, share = plan_here(rank, size, mode=mode, scope=scope, memory=MEMORY_WORDS[memory],
                                   multithreading="all_logical", balanced=True, min_physical_cores=1,
                                   max_physical_cores=None)
    except AffinityError as exc:
        raise UsageError(f"--mode {mode}, local rank {rank} of {size} ({source}): {exc}") from None
    return list(command), thread_env(environ, binding, size, share), binding, f"local rank {rank}"


def _undo_default_binding(environ: Mapping[str, str]) -> None:
    """Open MPI binds each rank unless told not to, so each would plan a different node: take back the
    parent's CPUs (mpirun's daemon), as `--bind-to none` would; a binding asked for (--bind-to X) is refused."""
    if environ.get("OMPI_MCA_orte_bound_at_launch") != "1":
        return
    policy = environ.get("OMPI_MCA_hwloc_base_binding_policy", "").strip()
    if policy and policy != "none":
        raise UsageError(f"mpirun --bind-to {excerpt(policy, 20)} bound this rank already "
                         "(OMPI_MCA_hwloc_base_binding_policy): give mpirun --bind-to none and let topo bind place it")
    try:
        os.sched_setaffinity(0, os.sched_getaffinity(os.getppid()))
    except OSError:
        pass  # the parent is gone or not ours to read: plan within this rank's CPUs


def bind_and_exec(command: Sequence[str], *, bind_file: str | None = None, local_rank: int | None = None,
                  bind_fallback: bool = False, mode: str | None = None, **mode_options) -> None:
    """Apply the bind JSON's entry for this local rank (with `mode`: plan_mode's, given `mode_options`),
    then exec `command`; returns only by raising. `bind_fallback`: a refused memory policy tries
    MPOL_PREFERRED, then the CPUs alone, saying which held."""
    if mode is not None and bind_file is not None:
        raise UsageError("--mode plans the binding and --bind-file reads one: give one of them")
    argv, env, binding, key = (plan_mode(command, mode=mode, local_rank=local_rank, **mode_options) if mode is not None
                               else plan_bind(command, bind_file=bind_file, local_rank=local_rank))
    origin = "the bind JSON" if mode is None else f"this node's {mode} plan"
    if not binding.is_bound:
        print(f"topo bind: the bind JSON has no process binding for {key}; running unbound", file=sys.stderr)
    threads = env.get("OMP_NUM_THREADS")
    if threads and binding.cpus is not None and int(threads) < binding.cpus.weight():
        print(f"topo bind: {key}: OMP_NUM_THREADS={threads}: its {binding.cpus.weight()} CPUs are shared with other "
              f"processes of {origin}; set OMP_NUM_THREADS to choose another", file=sys.stderr)
    if binding.direct and binding.prefix[0] == "numactl":
        print(f"topo bind: {key}: {binding.describe()} (applied directly: {binding.note})", file=sys.stderr)
    try:  # numactl would set the same after the exec, too late to fall back or say what to do
        held = apply(binding, fallback=bind_fallback)
    except BindingRefused as exc:
        if exc.memory:
            raise BindingRefused(f"the kernel refused the memory binding ({exc.refused}), {key} of {origin}: "
                                 "drop the memory binding, grant CAP_SYS_NICE, or add --bind-fallback to try "
                                 "'preferred', then the CPU binding alone", exc.refused) from None
        raise BindingRefused(f"the kernel refused CPUs {binding.cpus} ({os.strerror(exc.errno)}), {key} of "
                             f"{origin}: bind within `topo show`'s allowed CPUs", exc.refused) from None
    if held != binding:
        print(f"topo bind: {key}: the kernel refused memory policy {binding.memory_policy}; {held_words(held)} "
              "(--bind-fallback)", file=sys.stderr)
        argv = list(command)  # not through numactl, which would ask again
    os.environ.update({**task_env(os.environ), **env})  # under srun: RANK, WORLD_SIZE, ... from Slurm
    os.environ.pop(BINDING_VAR, None)
    if held.is_bound:
        os.environ[BINDING_VAR] = held.env_value()  # what set_affinity keeps
    program = command[0]
    if argv[0] != program and shutil.which(program, path=os.environ.get("PATH", os.defpath)) is None:
        # numactl would exec it and exit 1 in its own words: the shell's 127 / 126, as for a direct exec
        raise CommandError(program, found="/" in program and os.path.exists(program))
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(argv[0], argv)
    except (FileNotFoundError, PermissionError) as exc:
        raise CommandError(argv[0], found=isinstance(exc, PermissionError)) from None
