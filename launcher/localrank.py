"""This process's local rank and how many processes its node runs, as the launcher that started it
says, so every rank of a node plans it alike without a shared file (`topo bind --mode`). Launchers
are tried innermost first: torchrun started by srun reads torchrun's pair."""

from __future__ import annotations

from typing import Mapping

from topo.binding import MAX_PROCESSES
from topo.launcher.slurm import _tasks_on_node
from topo.numbers import ascii_number
from topo.cpuset import excerpt
from topo.errors import UsageError

# (launcher, its local-rank variable, the variables that may hold its node's process count);
# MPICH's are Intel MPI's too (Hydra), PMIx's are there where the launcher exports them
LAUNCHERS = (
    ("torchrun, accelerate, deepspeed", "LOCAL_RANK", ("LOCAL_WORLD_SIZE", "LOCAL_SIZE")),
    ("Open MPI", "OMPI_COMM_WORLD_LOCAL_RANK", ("OMPI_COMM_WORLD_LOCAL_SIZE",)),
    ("MPICH", "MPI_LOCALRANKID", ("MPI_LOCALNRANKS",)),
    ("PMIx", "PMIX_LOCAL_RANK", ("PMIX_LOCAL_SIZE",)),
    ("Slurm", "SLURM_LOCALID", ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE")),
)
OVERRIDE = "pass --local-rank and --nproc-per-node"


def local_rank(environ: Mapping[str, str], given: int | None = None, *, fix: str = "pass --local-rank") -> int:
    """`given`, else the innermost launcher's variable; UsageError naming it and `fix` when none is set or it is bad."""
    if given is not None:
        if given < 0:
            raise UsageError(f"--local-rank={given} must be 0 or more")
        return given
    found = _launcher(environ)
    if found is None:
        raise UsageError("no launcher variable gives this process's local rank ("
                         + ", ".join(var for _, var, _ in LAUNCHERS) + f"): run topo bind under a launcher, or {fix}")
    return _count(environ, found[1], least=0, fix=fix)


def local_rank_and_size(environ: Mapping[str, str], given_rank: int | None = None,
                        nproc_per_node: int | None = None) -> tuple[int, int, str]:
    """(local rank, processes on this node, where they came from: "OMPI_COMM_WORLD_LOCAL_RANK=1,
    OMPI_COMM_WORLD_LOCAL_SIZE=2"); `given_rank` / `nproc_per_node` win over the variables.
    UsageError naming the variable and the fix when one is missing or bad, or the rank not below the size."""
    found = _launcher(environ)
    rank = local_rank(environ, given_rank, fix=OVERRIDE)
    sources = [] if given_rank is not None else [f"{found[1]}={rank}"]
    if nproc_per_node is None:
        if found is None:
            raise UsageError(f"--local-rank={rank} without a launcher's process count: pass --nproc-per-node")
        nproc_per_node, size_var = _size(environ, *found)
        sources.append(f"{size_var}={nproc_per_node}")
    if not rank < nproc_per_node:
        raise UsageError(f"local rank {rank} is not below the node's {nproc_per_node} processes ("
                         + (", ".join(sources) or "as given") + f"): fix the launcher's variables or {OVERRIDE}")
    return rank, nproc_per_node, ", ".join(sources) or "as given"


def _launcher(environ: Mapping[str, str]) -> tuple[str, str, tuple[str, ...]] | None:
    return next((entry for entry in LAUNCHERS if environ.get(entry[1], "").strip()), None)


def _size(environ: Mapping[str, str], name: str, rank_var: str, sizes: tuple[str, ...]) -> tuple[int, str]:
    for var in sizes:
        text = environ.get(var, "").strip()
        if not text:
            continue
        if var.startswith("SLURM_"):  # "2(x3),1": this node's entry is at SLURM_NODEID (any, for NTASKS)
            node = environ.get("SLURM_NODEID", "0") if var != "SLURM_NTASKS_PER_NODE" else "0"
            count = _tasks_on_node({"SLURM_TASKS_PER_NODE": text, "SLURM_NODEID": node})
            if not count or count > MAX_PROCESSES:
                raise UsageError(f"{var}={excerpt(text, 40)!r} gives no task count for node SLURM_NODEID="
                                 f"{excerpt(environ.get('SLURM_NODEID', '0'), 20)!r}: fix it or {OVERRIDE}")
            return count, var
        return _count(environ, var, least=1), var
    raise UsageError(f"{rank_var} is set but not {' or '.join(sizes)}, so the node's process count is unknown: "
                     f"start the job with a launcher that sets both ({name}), or {OVERRIDE}")


def _count(environ: Mapping[str, str], var: str, *, least: int, fix: str = OVERRIDE) -> int:
    text = environ[var].strip()
    n = ascii_number(text[:12])
    if n is None or len(text) > 12 or not least <= n <= MAX_PROCESSES:
        raise UsageError(f"{var}={excerpt(text, 20)!r} is not a number from {least} to {MAX_PROCESSES}: fix it or "
                         f"{fix}")
    return n
