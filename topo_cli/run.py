"""`topo run`: torchrun's flags in, launcher.torchrun call, the job's exit code out."""

from __future__ import annotations

import sys

import click
from click.core import ParameterSource

from topo.launcher.torchrun_flags import DEFAULT_LINE_PREFIX, DEFAULT_MASTER_PORT, DEFAULT_SHUTDOWN_TIMEOUT
from topo.launcher.torchrun_flags import TORCHRUN_DEFAULTS as D
from topo.binding import MEMORY
from topo.cli import SCRIPT_CONTEXT
from topo.cli.numbers import SECONDS, WHOLE


def _torchrun_option(name: str, *short: str, env: bool = True, **kwargs):
    """A torchrun flag under both spellings and, as torchrun's `action=env`, PET_<NAME>. No click
    default: a value the user did not give is left to Slurm, then to torchrun's default."""
    dashed = name.replace("_", "-")
    names = [*short, f"--{dashed}"] + ([f"--{name}"] if dashed != name else [])
    if env:
        kwargs["envvar"] = f"PET_{name.upper()}"
    return click.option(*names, name, default=None, **kwargs)


def _print_completion(ctx, param, shell):
    """torchrun's --print-completion, for `topo` (click's completion, where torchrun's is shtab's)."""
    if shell is None or ctx.resilient_parsing:
        return
    from click.shell_completion import get_completion_class
    root = ctx.find_root()
    complete = get_completion_class(shell)(root.command, {}, "topo", "_TOPO_COMPLETE")
    click.echo(complete.source())
    ctx.exit()


@click.command(context_settings=SCRIPT_CONTEXT)
@_torchrun_option("nnodes", metavar="N|MIN:MAX",
                  help=f"Nodes in the job; MIN:MAX is elastic (torch's rendezvous) [default: {D['nnodes']}; Slurm's "
                       "node count].")
@_torchrun_option("nproc_per_node", metavar="N|gpu|cpu|auto",
                  help=f"Workers on this node [default: {D['nproc_per_node']}; Slurm's GPUs or tasks per node].")
@_torchrun_option("node_rank", type=WHOLE,
                  help=f"This node's index, for the static rendezvous [default: {D['node_rank']}; SLURM_NODEID].")
@_torchrun_option("master_addr", help=f"Host of rank 0 [default: {D['master_addr']}; Slurm's first node].")
@_torchrun_option("master_port", type=WHOLE,
                  help=f"Port of rank 0's store [default: {DEFAULT_MASTER_PORT}; a free port on a single node, from "
                       "torch 2.12].")
@_torchrun_option("standalone", is_flag=True, help="One node: localhost, a free port and a new run id.")
@_torchrun_option("rdzv_endpoint", metavar="HOST:PORT", help="The rendezvous' address (static: rank 0's store).")
@_torchrun_option("rdzv_id", help=f"The run id (TORCHELASTIC_RUN_ID) [default: {D['rdzv_id']}].")
@_torchrun_option("rdzv_backend",
                  help=f"static, c10d, etcd, etcd-v2: all but static across nodes run on torch's rendezvous and "
                       f"agent [default: {D['rdzv_backend']}].")
@_torchrun_option("rdzv_conf", metavar="KEY=VALUE,...",
                  help="torch's rendezvous options (timeout, last_call_timeout, join_timeout, ...).")
@_torchrun_option("max_restarts", type=WHOLE,
                  help=f"Restart the local worker group after a failure, up to N times [default: {D['max_restarts']}].")
@_torchrun_option("monitor_interval", type=SECONDS,
                  help="torch's agent's polling period; topo's static plan polls every 5-100 ms.")
@_torchrun_option("start_method", type=click.Choice(["spawn", "fork", "forkserver"]),
                  help="torch's agent's; a script worker is always a new process.")
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
@_torchrun_option("log_line_prefix_template", metavar="TEMPLATE",
                  help="Prefix of each tee'd line: ${role_name}, ${rank}, ${local_rank}, ${hostname} [default: "
                       f"$TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, else {DEFAULT_LINE_PREFIX}].")
@_torchrun_option("signals_to_handle",
                  help="Signals forwarded to every worker, which then stop (SIGKILL after --shutdown-timeout); "
                       f"also TORCHELASTIC_SIGNALS_TO_HANDLE [default: {D['signals_to_handle']}].")
@_torchrun_option("virtual_local_rank", is_flag=True,
                  help="LOCAL_RANK=0 for every worker, each seeing only its own GPU in CUDA_VISIBLE_DEVICES.")
@_torchrun_option("local_addr", metavar="ADDR", help="This node's address in torch's rendezvous.")
@_torchrun_option("event_log_handler", metavar="NAME", help="torch's agent's event handler.")
@_torchrun_option("duplicate_stdout_filters", metavar="WORDS",
                  help="Copy stdout lines with these words to filtered_stdout.log (torch's agent).")
@_torchrun_option("duplicate_stderr_filters", metavar="WORDS",
                  help="Copy stderr lines with these words to filtered_stderr.log (torch's agent).")
@_torchrun_option("logs_specs", metavar="NAME", env=False, help="A torchrun.logs_specs plug-in (torch's agent).")
@_torchrun_option("numa_binding", metavar="MODE", env=False,
                  help="Bind each worker with a topo mode: node, socket, exclusive, core-complex, or any of "
                       "`topo plan --list-modes`.")
@_torchrun_option("memory", env=False, type=click.Choice(MEMORY),
                  help="Memory policy of --numa-binding: none (torch's), numa (bind), preferred, device (bind "
                       "to the GPU's own memory node where it has one) [default: none].")
@_torchrun_option("priority_cores", env=False, is_flag=True,
                  help="With --numa-binding: each worker's first CPU on a priority core of its home (topo plan "
                       "--priority-cores).")
@_torchrun_option("bind_fallback", env=False, is_flag=True,
                  help="If the kernel refuses a memory binding, keep the CPU binding and drop the memory policy "
                       "(and keep a worker whose binding does not take as placed) instead of failing.")
@_torchrun_option("dry_run", env=False, is_flag=True,
                  help="Print each worker's argv, binding and environment; start nothing.")
@click.option("--grace-period", "--grace_period", "--shutdown-timeout", "--shutdown_timeout", "grace_period",
              type=SECONDS, default=None, envvar="PET_SHUTDOWN_TIMEOUT",
              help="Seconds between SIGTERM and SIGKILL when stopping workers [default: "
                   f"TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else {DEFAULT_SHUTDOWN_TIMEOUT:g}].")
@click.option("--print-completion", "--print_completion", type=click.Choice(["bash", "zsh", "fish"]),
              callback=_print_completion, expose_value=False, is_eager=True,
              help="Print the shell completion script of `topo` and exit.")
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def run(ctx, script, script_args, **flags):
    """Start a PyTorch job's workers like torchrun, with any topo binding mode.

    Every torchrun flag works with torchrun's names, spellings and defaults (those of the installed
    torch), and each worker gets torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR,
    ..., TORCHELASTIC_ERROR_FILE). One node, or nodes that each know their --node-rank, run on
    topo's static plan; c10d/etcd rendezvous across nodes, elastic --nnodes=MIN:MAX and --rdzv-conf
    run on torch's own rendezvous and agent, each worker bound at birth. Workers run `$PYTHON_EXEC -u
    SCRIPT`, PYTHON_EXEC defaulting to the interpreter running topo (as torchrun): set it when the
    script's packages live in another environment. Inside a Slurm allocation the node count, node
    rank, master address and workers per node come from Slurm unless given. A failed worker's error
    file (@record) is reported as the root cause, and topo run exits with the worker's code.

    \b
    Examples:
      topo run --standalone --nproc-per-node=8 --numa-binding=exclusive train.py --epochs 3
      topo run --nnodes=2 --node-rank=0 --master-addr=10.0.0.1 --nproc-per-node=8 train.py
      topo run --nnodes=1:4 --rdzv-backend=c10d --rdzv-endpoint=10.0.0.1:29400 --rdzv-id=job7 \\
               --nproc-per-node=8 --numa-binding=exclusive train.py
      srun -N2 --ntasks-per-node=1 topo run --nproc-per-node=8 train.py
    """
    from topo.launcher.torchrun import run as run_job
    from topo.launcher.torchrun_flags import config_from_flags
    given = {name: value for name, value in flags.items()
             if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)}
    config, from_slurm = config_from_flags(script, script_args, given)
    if from_slurm:
        click.echo(f"topo run: {from_slurm}", err=True)
    sys.exit(run_job(config))
