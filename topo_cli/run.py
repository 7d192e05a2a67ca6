"""`topo run`: torchrun's flags in, launcher.torchrun call, the job's exit code out."""

from __future__ import annotations

import sys

import click
from click.core import ParameterSource

from topo.launcher.torchrun_flags import DEFAULT_MASTER_PORT, DEFAULT_SHUTDOWN_TIMEOUT, MEMORY_POLICIES
from topo.launcher.torchrun_flags import TORCHRUN_DEFAULTS as D
from topo.cli import CONTEXT
from topo.cli.numbers import SECONDS, WHOLE

_SCRIPT_CONTEXT = {
    # SCRIPT and everything after it belong to the script, options included (torchrun's REMAINDER)
    "allow_interspersed_args": False,
    **CONTEXT,
}


def _torchrun_option(name: str, *short: str, env: bool = True, **kwargs):
    """A torchrun flag under both its spellings (--nproc-per-node, --nproc_per_node) and, as
    torchrun's `action=env`, its PET_<NAME> environment variable. No click default: a value the
    user did not give is left to Slurm, then to torchrun's default (launcher.torchrun)."""
    dashed = name.replace("_", "-")
    names = [*short, f"--{dashed}"] + ([f"--{name}"] if dashed != name else [])
    if env:
        kwargs["envvar"] = f"PET_{name.upper()}"
    return click.option(*names, name, default=None, **kwargs)


@click.command(context_settings=_SCRIPT_CONTEXT)
@_torchrun_option("nnodes", metavar="N", help=f"Nodes in the job (N, or N:N) [default: {D['nnodes']}; Slurm's node count].")
@_torchrun_option("nproc_per_node", metavar="N|gpu|cpu|auto",
                  help=f"Workers on this node [default: {D['nproc_per_node']}; Slurm's GPUs or tasks per node].")
@_torchrun_option("node_rank", type=WHOLE, help=f"This node's index [default: {D['node_rank']}; SLURM_NODEID].")
@_torchrun_option("master_addr", help=f"Host of rank 0 [default: {D['master_addr']}; Slurm's first node].")
@_torchrun_option("master_port", type=WHOLE,
                  help=f"Port of rank 0's store [default: {DEFAULT_MASTER_PORT}; a free port on a single node].")
@_torchrun_option("standalone", is_flag=True, help="One node: localhost, a free port and a new run id.")
@_torchrun_option("rdzv_endpoint", metavar="HOST:PORT", help="Rank 0's address, as a static rendezvous.")
@_torchrun_option("rdzv_id", help=f"The run id (TORCHELASTIC_RUN_ID) [default: {D['rdzv_id']}].")
@_torchrun_option("rdzv_backend", help="static (c10d only when each node knows its --node-rank).")
@_torchrun_option("rdzv_conf", help="Refused: the static rendezvous takes no options.")
@_torchrun_option("max_restarts", type=WHOLE, help=f"Restart the local worker group after a failure, up to N times [default: {D['max_restarts']}].")
@_torchrun_option("monitor_interval", type=SECONDS, help="Accepted for torchrun; topo polls every 5-100 ms.")
@_torchrun_option("start_method", type=click.Choice(["spawn", "fork", "forkserver"]),
                  help="Accepted for torchrun; a script worker is always a new process.")
@_torchrun_option("role", help=f"ROLE_NAME of the workers, and their output's prefix [default: {D['role']}].")
@_torchrun_option("module", "-m", is_flag=True, help="Run SCRIPT as a module: python -u -m SCRIPT.")
@_torchrun_option("no_python", is_flag=True, help="Run SCRIPT as a program, without the interpreter.")
@_torchrun_option("run_path", is_flag=True, help="Run SCRIPT (an absolute path) as python -u SCRIPT.")
@_torchrun_option("log_dir", metavar="DIR",
                  help="Base of <run id>_<random>/attempt_<n>/<local rank>/ [default: a temporary directory].")
@_torchrun_option("redirects", "-r", metavar="STD",
                  help="Write std streams to files: 0 none, 1 stdout, 2 stderr, 3 both, or per rank 0:1,1:2.")
@_torchrun_option("tee", "-t", metavar="STD", help="As --redirects, and copy the files to the console.")
@_torchrun_option("local_ranks_filter", metavar="RANKS", help="Show only these local ranks' output (0,1).")
@_torchrun_option("signals_to_handle",
                  help="Signals forwarded to every worker, which then stop (SIGKILL after --shutdown-timeout); "
                       f"also TORCHELASTIC_SIGNALS_TO_HANDLE [default: {D['signals_to_handle']}].")
@_torchrun_option("virtual_local_rank", is_flag=True,
                  help="LOCAL_RANK=0 for every worker, each seeing only its own GPU in CUDA_VISIBLE_DEVICES.")
@_torchrun_option("local_addr", metavar="ADDR",
                  help="Accepted for torchrun; the static rendezvous never uses this node's address.")
@_torchrun_option("event_log_handler", metavar="NAME",
                  help="Accepted for torchrun; topo run records no torchelastic events.")
@_torchrun_option("duplicate_stdout_filters", metavar="WORDS",
                  help="Refused unless empty: topo run writes no filtered_stdout.log.")
@_torchrun_option("duplicate_stderr_filters", metavar="WORDS",
                  help="Refused unless empty: topo run writes no filtered_stderr.log.")
@_torchrun_option("logs_specs", metavar="NAME", env=False,
                  help="Refused: topo run writes torchrun's default log layout only.")
@_torchrun_option("numa_binding", metavar="MODE", env=False,
                  help="Bind each worker with a topo mode: node, socket, exclusive, core-complex, or any of "
                       "`topo plan --list-modes`.")
@_torchrun_option("memory", env=False, type=click.Choice(MEMORY_POLICIES),
                  help="Memory policy of --numa-binding: none (torch's), numa (bind), preferred [default: none].")
@_torchrun_option("bind_fallback", env=False, is_flag=True,
                  help="If the kernel refuses a memory binding, keep the CPU binding and drop the memory policy "
                       "(and keep a worker whose binding does not take as placed) instead of failing.")
@_torchrun_option("dry_run", env=False, is_flag=True,
                  help="Print each worker's argv, binding and environment; start nothing.")
@click.option("--grace-period", "--grace_period", "--shutdown-timeout", "--shutdown_timeout", "grace_period",
              type=SECONDS, default=None, envvar="PET_SHUTDOWN_TIMEOUT",
              help="Seconds between SIGTERM and SIGKILL when stopping workers [default: "
                   f"TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else {DEFAULT_SHUTDOWN_TIMEOUT:g}].")
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def run(ctx, script, script_args, **flags):
    """Start a PyTorch job's workers like torchrun, with any topo binding mode.

    Every torchrun flag a static job uses works with torchrun's names, spellings and defaults, and
    each worker gets torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...,
    TORCHELASTIC_ERROR_FILE). Workers run `$PYTHON_EXEC -u SCRIPT`, PYTHON_EXEC defaulting to the
    interpreter running topo (as torchrun): set it when the script's packages live in another
    environment. Inside a Slurm allocation the node count, node rank, master address and workers per
    node come from Slurm unless given. A failed worker's error file (@record) is reported as the root
    cause, and topo run exits with the worker's code.

    \b
    Examples:
      topo run --standalone --nproc-per-node=8 --numa-binding=exclusive train.py --epochs 3
      topo run --nnodes=2 --node-rank=0 --master-addr=10.0.0.1 --nproc-per-node=8 train.py
      srun -N2 --ntasks-per-node=1 topo run --nproc-per-node=8 train.py
    """
    from topo.launcher.torchrun import run as run_job
    from topo.launcher.torchrun_flags import config_from_flags

    given = {name: value for name, value in flags.items()
             if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)}
    config, from_slurm = config_from_flags(script, script_args, given)
    if from_slurm:
        click.echo(f"topo run: {from_slurm}", err=True)
    result = run_job(config)
    sys.exit(result.exit_code)
