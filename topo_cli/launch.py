"""`topo launch` (msrun's flags) and `topo bind` (an exec wrapper): flags in, library call, exit code out."""

from __future__ import annotations

import sys

import click
from click.core import ParameterSource

from topo.cli import SCRIPT_CONTEXT
from topo.cli.numbers import SECONDS, WHOLE, WholeRange
from topo.launcher.config import LaunchConfig


def _msrun_option(name: str, **kwargs):
    """An msrun flag under its own spelling (--worker_num) and the dashed one (--worker-num); the
    default LaunchConfig's unless given as msrun's text."""
    dashed = name.replace("_", "-")
    names = [f"--{name}"] + ([f"--{dashed}"] if dashed != name else [])
    kwargs.setdefault("show_default", True)
    kwargs.setdefault("default", getattr(LaunchConfig, name))
    return click.option(*names, name, **kwargs)


@click.command(context_settings=SCRIPT_CONTEXT)
@_msrun_option("worker_num", type=WHOLE, help="Workers in the whole job.")
@_msrun_option("local_worker_num", type=WHOLE, help="Workers started on this node.")
@_msrun_option("master_addr", help="Address of the scheduler (MindSpore) / rank 0 store (PyTorch).")
@_msrun_option("master_port", type=WHOLE, help="Port of the scheduler / store.")
@_msrun_option("node_rank", type=WHOLE, help="This node's index; -1 lets MindSpore assign ranks.")
@_msrun_option("log_dir", show_default="the current directory",
               help="Directory for scheduler.log and worker_<rank>.log.")
@_msrun_option("join", default="False", metavar="True|False",
               help="Wait for the job, show its logs, stop it all when one worker fails.")
@_msrun_option("cluster_time_out", type=WHOLE, help="MS_TOPO_TIMEOUT in seconds.")
@_msrun_option("bind_core", default="False", metavar="True|False|JSON",
               help="Pin CPUs: True (automatic) or '{\"device0\": [\"0-9\"], \"scheduler\": [...]}'.")
@_msrun_option("bind_numa", default="False", metavar="True|False|JSON|FILE",
               help="Bind NUMA nodes: True, a JSON table of node ids, or a unified bind JSON (file or inline).")
@_msrun_option("sim_level", type=WholeRange(-1, 3), help="MindSpore simulation level (no scheduler).")
@_msrun_option("sim_rank_id", type=WHOLE, help="Simulate this one rank.")
@_msrun_option("rank_table_file", show_default=False, help="Exported as RANK_TABLE_FILE.")
@_msrun_option("worker_log_name", show_default="worker",
               help="Worker log base name; {ip} and {hostname} are filled in.")
@_msrun_option("tail_worker_log", default="-1", help="Ranks whose logs --join shows (comma list), -1 for all.")
@click.option("--scheduler/--no-scheduler", default=None,
              help="Force the MindSpore scheduler process on or off [default: on when master_addr is this "
                   "machine and node_rank is 0 or -1]. PyTorch jobs need none.")
@click.option("--dry-run", "--dry_run", "dry_run", is_flag=True,
              help="Print each process's argv, binding and environment additions; start nothing.")
@click.option("--grace-period", "--grace_period", "grace_period",
              type=SECONDS, default=LaunchConfig.grace_period, show_default=True,
              help="Seconds between SIGTERM and SIGKILL when stopping the job.")
@click.option("--bind-fallback", "--bind_fallback", "bind_fallback", is_flag=True,
              help="If the kernel refuses a memory binding, keep the CPU binding and drop the memory policy "
                   "(and run a process whose binding does not take as placed) instead of failing.")
@click.option("--priority-cores", "--priority_cores", "priority_cores", is_flag=True,
              help="With --bind_core=True: each worker's CPUs hold a priority core of its home, first in "
                   "MSRUN_CPU_LIST (topo plan --priority-cores).")
@click.option("--python", "python", default=LaunchConfig.python, metavar="PATH",
              help="Interpreter put before SCRIPT [default: `python` from PATH, as msrun].")
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def launch(script, script_args, **flags):
    """Start a distributed job's processes next to their CPUs, like msrun (and torchrun).

    Every msrun flag works with msrun's names, defaults and values (--join=True, _ or - spellings).
    SCRIPT runs as `python SCRIPT ARGS...` in a scheduler process (MindSpore, MS_ROLE=MS_SCHED) and
    in each worker, with msrun's and torchrun's environment variables, logging to
    LOG_DIR/scheduler.log and LOG_DIR/worker_<rank>.log.

    \b
    Examples:
      topo launch --worker_num=8 --local_worker_num=8 --join=True --log_dir=logs net.py
      topo launch --worker_num=2 --local_worker_num=2 --join=True --no-scheduler train.py  # PyTorch
      topo plan --mode exclusive -o bind.json && topo launch --bind_numa=bind.json --dry-run net.py
    """
    from topo.launcher.config import config_from_flags
    from topo.launcher.run import launch as run_launch
    ctx = click.get_current_context()
    given = {name for name in flags if ctx.get_parameter_source(name) is not ParameterSource.DEFAULT}
    config, from_slurm = config_from_flags(script, script_args, flags, given)
    if from_slurm:
        click.echo(f"topo launch: {from_slurm}", err=True)
    sys.exit(run_launch(config).exit_code)


@click.command(context_settings=SCRIPT_CONTEXT)
@click.option("--mode", "mode", default=None, metavar="MODE",
              help="Plan this node here, with a mode of set_affinity / `topo plan --list-modes` (exclusive, "
                   "unique_contiguous, node, ...), for the launcher's local rank and process count; no bind JSON.")
@click.option("--scope", type=click.Choice(["node", "socket"]), default="node", show_default=True,
              help="--mode: the CPUs a device may use, its NUMA node or its socket (gpu_affinity modes).")
@click.option("--memory", type=click.Choice(["none", "numa", "preferred"]), default="none", show_default=True,
              help="--mode: leave memory alone, bind it to the process's NUMA node(s), or prefer them.")
@click.option("--bind-file", "bind_file", default=None, metavar="FILE",
              help="Bind JSON (a path, or inline JSON) [default: $TOPO_BIND_FILE, then $MSRUN_BIND_FILE].")
@click.option("--local-rank", "local_rank", type=WHOLE, default=None,
              help="This process's local rank [default: the launcher's: $LOCAL_RANK, $OMPI_COMM_WORLD_LOCAL_RANK, "
                   "$MPI_LOCALRANKID, $PMIX_LOCAL_RANK or $SLURM_LOCALID].")
@click.option("--nproc-per-node", "nproc_per_node", type=WholeRange(min=1), default=None,
              help="--mode: the processes on this node [default: the launcher's: $LOCAL_WORLD_SIZE, $LOCAL_SIZE, "
                   "$OMPI_COMM_WORLD_LOCAL_SIZE, $MPI_LOCALNRANKS, $PMIX_LOCAL_SIZE or Slurm's tasks on this node].")
@click.option("--bind-fallback", "--bind_fallback", "bind_fallback", is_flag=True,
              help="If the kernel refuses the memory binding, keep the CPU binding and drop the memory policy.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def bind(mode, scope, memory, bind_file, local_rank, nproc_per_node, bind_fallback, command):
    """Bind this process as its launcher's local rank, then exec COMMAND in its place.

    With --mode, every rank plans its whole node alike (the launcher's local rank and process count,
    as set_affinity plans) and takes its own share: one prefix for any launcher, no file to share.
    With a bind JSON, the process is its `device<N>` entry for this local rank (N is the physical
    device it drives, through CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES; N = local rank on a
    machine without accelerators). CPUs are set with sched_setaffinity; a bind JSON's memory binding
    execs through numactl, exactly as msrun would, or is set with set_mempolicy when numactl is not
    installed (and always with --mode).

    \b
    Examples:
      torchrun --nproc-per-node=8 --no-python topo bind --mode exclusive -- python train.py
      mpirun -np 8 topo bind --mode exclusive -- ./app
      srun --ntasks-per-node=8 topo bind --mode exclusive --memory numa -- python train.py
      torchrun --nproc-per-node=8 --no-python topo bind --bind-file bind.json -- python train.py
    """
    from topo.launcher.bindcmd import bind_and_exec
    bind_and_exec(command, bind_file=bind_file, local_rank=local_rank, bind_fallback=bind_fallback, mode=mode,
                  scope=scope, memory=memory, nproc_per_node=nproc_per_node)  # the last three serve --mode
