"""`topo run`: torchrun's flags as a plan for launcher.run.execute, and the failure report; jobs that
need torch's rendezvous run under torch's agent (launcher.elastic). As torchrun, except on purpose:
the rendezvous is static (rank 0 hosts the TCPStore), --numa-binding takes every topo mode and is
verified in /proc, a failed job exits with the worker's code, a bound worker gets OMP_NUM_THREADS."""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import signal
import socket
import string
import sys
import tempfile
import uuid
from dataclasses import replace
from typing import Callable, Mapping, TextIO

from topo.launcher.binding import UNBOUND, binding_of, device_ids
from topo.launcher.environ import base_env, sharers, thread_env
from topo.launcher.job import check_log_dir
from topo.launcher.plan import Plan
from topo.launcher.procgroup import INHERIT, LaunchError, ProcessSpec
from topo.launcher.run import execute
from topo.launcher.supervisor import read_log
from topo.launcher.torchrun_errors import Failure, read_failure, report
from topo.launcher.torchrun_flags import STD_ERR, STD_OUT, RunConfig, discover_here, parse_signals
from topo.binding import Binding
from topo.errors import UsageError


def plan_run(config: RunConfig, *, environ: Mapping[str, str] | None = None,
             topology: Callable | object | None = None) -> Plan:
    """Per worker its argv, torchrun's environment, binding and log layout (`<run dir>/attempt_<n>/`,
    the run dir being the plan's log_dir), and the restart policy; UsageError before anything starts."""
    environ, command, bindings, warnings = _prepare(config, environ, topology)
    port = config.master_port
    if port is None:  # a port free on every interface now, for rank 0's TCPStore (torchrun binds port 0 too)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
    run_id = config.run_id or str(uuid.uuid4())
    shared = sharers(bindings)
    # torch 2.15 on: HIP_VISIBLE_DEVICES, when set, is what --virtual-local-rank maps (ROCm reads it first)
    hip = config.torchrun.hip_virtual_devices and bool(environ.get("HIP_VISIBLE_DEVICES"))
    devices = [_virtual_device(environ, r, "HIP_VISIBLE_DEVICES" if hip else "CUDA_VISIBLE_DEVICES")
               if config.virtual_local_rank else None
               for r in range(config.nproc_per_node)]  # a rank without a GPU is refused before anything starts
    host = socket.gethostname()
    shown = [config.local_ranks_filter is None or r in config.local_ranks_filter for r in range(len(bindings))]

    def worker_env(local_rank: int, restart: int, error_file: str) -> dict[str, str]:
        c, rank = config, config.rank(local_rank)  # torchrun's variables (local_elastic_agent._start_workers)
        env = {
            "LOCAL_RANK": str(local_rank), "RANK": str(rank), "GROUP_RANK": str(c.node_rank),
            "ROLE_RANK": str(rank), "ROLE_NAME": c.role, "LOCAL_WORLD_SIZE": str(c.nproc_per_node),
            "WORLD_SIZE": str(c.world_size), "GROUP_WORLD_SIZE": str(c.nnodes), "ROLE_WORLD_SIZE": str(c.world_size),
            "MASTER_ADDR": c.master_addr, "MASTER_PORT": str(port),
            "TORCHELASTIC_RESTART_COUNT": str(restart), "TORCHELASTIC_MAX_RESTARTS": str(c.max_restarts),
            "TORCHELASTIC_RUN_ID": run_id,
            # no agent store runs in topo: rank 0's init_process_group must host the TCPStore
            "TORCHELASTIC_USE_AGENT_STORE": "False",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
            "TORCHELASTIC_ERROR_FILE": error_file,
        }
        if c.torchrun.signals_variable:
            env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = c.signals_to_handle
        if c.virtual_local_rank:
            # every worker is local rank 0 and sees only its own GPU, the local_rank-th visible one
            env["LOCAL_RANK"] = "0"
            env["CUDA_VISIBLE_DEVICES"] = devices[local_rank]
            if hip:
                env["HIP_VISIBLE_DEVICES"] = devices[local_rank]
        env.update(thread_env(environ, bindings[local_rank], c.nproc_per_node, shared[local_rank]))
        return env

    def processes(restart: int, attempt_dir: str) -> tuple[ProcessSpec, ...]:
        specs = []
        for local_rank, binding in enumerate(bindings):
            rank_dir = os.path.join(attempt_dir, str(local_rank))
            to_files, to_console = config.streams(local_rank)
            # a rank outside --local-ranks-filter writes what is not redirected to /dev/null, as torchrun
            hidden = None if shown[local_rank] else os.devnull
            stdout = os.path.join(rank_dir, "stdout.log") if to_files & STD_OUT else hidden
            stderr = os.path.join(rank_dir, "stderr.log") if to_files & STD_ERR else (hidden or INHERIT)
            tail = bool(to_console) and shown[local_rank]
            specs.append(ProcessSpec(
                f"rank {config.rank(local_rank)}", (*binding.prefix, *command),
                worker_env(local_rank, restart, os.path.join(rank_dir, "error.json")), stdout, binding,
                config.role, config.rank(local_rank), local_rank, tail,
                stderr_path=stderr, tail_prefix=string.Template(config.line_prefix).safe_substitute(
                    role_name=config.role, rank=config.rank(local_rank), local_rank=local_rank, hostname=host)))
        return tuple(specs)

    def attempt(restart: int, run_dir: str) -> tuple[tuple[ProcessSpec, ...], str]:
        attempt_dir = os.path.join(run_dir, f"attempt_{restart}")
        specs = processes(restart, attempt_dir)
        try:
            for spec in specs:
                error_file = spec.env["TORCHELASTIC_ERROR_FILE"]
                os.makedirs(os.path.dirname(error_file), exist_ok=True)
                if os.path.lexists(error_file):
                    os.unlink(error_file)
        except OSError as exc:
            raise LaunchError(f"cannot create the run's files, {exc.filename}: {exc.strerror}; "
                              "give a writable --log-dir") from None
        return specs, attempt_dir

    return Plan(processes(0, "<run dir>/attempt_0"), base_env(environ), config.log_dir, tuple(warnings),
                config.max_restarts, attempt)


def _prepare(config: RunConfig, environ: Mapping[str, str] | None, topology):
    """(environment, argv, bindings, warnings), checked: `python -u [-m] SCRIPT ARGS`, or the program
    with --no-python; --run-path (torchrun: runpy.run_path) runs as `python -u SCRIPT` does."""
    environ = dict(os.environ if environ is None else environ)
    if config.no_python and not config.run_path:
        command = (config.script, *config.script_args)
    else:
        module = ("-m",) if config.module and not config.run_path else ()
        command = (config.python, "-u", *module, config.script, *config.script_args)
    program = command[0]
    if "/" in program:
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            what = "$PYTHON_EXEC" if not config.no_python else "the program"
            raise UsageError(f"{what} {program!r} is not an executable file: give one that runs")
    elif shutil.which(program, path=environ.get("PATH", os.defpath)) is None:
        raise UsageError(f"{program!r} is not on PATH: install it or give its path")
    if config.run_path and not os.path.isabs(config.script):
        raise UsageError(f"--run-path needs the script as an absolute path, got {config.script!r}")
    if (config.run_path or (not config.no_python and not config.module)) and not os.path.isfile(config.script):
        raise UsageError(f"script {config.script!r} does not exist (relative to {os.getcwd()})")
    if config.log_dir:
        check_log_dir(config.log_dir, "--log-dir")
    warnings: list[str] = []
    bindings: tuple[Binding, ...] = (UNBOUND,) * config.nproc_per_node
    if config.numa_binding:
        bindings = _bindings(config, environ, topology, warnings)
    return environ, command, bindings, warnings


def _virtual_device(environ: Mapping[str, str], local_rank: int, variable: str) -> str:
    visible = environ.get(variable)
    if visible is None:
        return str(local_rank)
    ids = visible.split(",")
    if local_rank >= len(ids):
        raise UsageError(f"--virtual-local-rank: local rank {local_rank} has no GPU in "
                         f"{variable}={visible}; start at most {len(ids)} workers")
    return ids[local_rank].strip()


def _bindings(config: RunConfig, environ: Mapping[str, str], topology, warnings: list[str]) -> tuple[Binding, ...]:
    """Local rank r's binding: the plan's entry for the r-th visible device (torchrun's rule), or
    its share of the CPUs without devices."""
    from topo import planners  # ~60 ms to import: only for --numa-binding
    if topology is None or callable(topology):
        topology = (topology or discover_here)()
    if not topology.is_this_system:
        raise UsageError(f"refusing to bind from a topology read below {topology.root!r}: it is not this machine")
    plan = planners.plan(topology, config.numa_binding, nproc=config.nproc_per_node, memory=config.memory,
                         priority_cores=config.priority_cores)
    warnings.extend(plan.warnings)
    keys = [f"device{d}" for d in device_ids(topology, config.nproc_per_node, environ)]
    path = environ.get("PATH", os.defpath)
    bindings = tuple(binding_of(plan.get(key), topology, memory_policy=plan.memory_policy, path=path) for key in keys)
    for rank, (key, b) in enumerate(zip(keys, bindings)):
        if not b.is_bound:
            warnings.append(f"local rank {rank}: mode {config.numa_binding} gives {key} no binding; it runs unbound")
    return bindings


def run(config: RunConfig, *, environ: Mapping[str, str] | None = None, topology=None,
        out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the local worker group (under torch's agent where the job needs its rendezvous), restart
    it up to `max_restarts` times, report to `err` (dry-run text and tee'd output to `out`), and
    return the exit code: the failing worker's, or 1 after SIGINT, 128 + N after another signal N.
    Must run on a thread that lives as long as the job (the workers die with it)."""
    out, err = out or sys.stdout, err or sys.stderr
    if config.torch_agent:
        from topo.launcher.elastic import run_agent  # imports torch: only for the forms only it runs
        return run_agent(config, *_prepare(config, environ, topology), out=out, err=err)
    plan = plan_run(config, environ=environ, topology=topology)
    if config.dry_run:
        print(describe_run(plan, config), file=out)
        return 0

    say = functools.partial(print, "topo run:", file=err, flush=True)  # one line of topo run's own to err
    run_dir = None

    def make_run_dir(plan: Plan) -> Plan:
        """`<log dir>/<run id>_<random>`, torchrun's layout; without --log-dir under a new temporary base."""
        nonlocal run_dir
        try:
            if config.log_dir:
                os.makedirs(config.log_dir, exist_ok=True)
            base = config.log_dir or tempfile.mkdtemp(prefix="torchelastic_")
            run_dir = tempfile.mkdtemp(prefix=f"{plan.processes[0].env['TORCHELASTIC_RUN_ID']}_", dir=base)
        except OSError as exc:
            raise LaunchError(f"cannot create the run directory, {exc.filename or config.log_dir}: {exc.strerror}; "
                              "give a writable --log-dir") from None
        return replace(plan, log_dir=run_dir)

    if config.nproc_per_node > 1 and "OMP_NUM_THREADS" not in plan.base_env and not config.numa_binding:
        say(f"OMP_NUM_THREADS=1 for each of the {config.nproc_per_node} workers (they share this node's CPUs); "
            "set OMP_NUM_THREADS to tune it")
    result = execute(plan, join=True, grace_period=config.grace_period, bind_fallback=config.bind_fallback, out=out,
                     err=err, say=say, prepare=make_run_dir,
                     handled=tuple(signal.Signals[name] for name in parse_signals(config.signals_to_handle)))
    restart, received, code, first = result.restarts, result.signal, result.exit_code, result.failed_process
    ended = [] if first is None else [first, *(p for p in result.processes
                                               if p.popen.returncode not in (None, 0) and p is not first)]
    failures = [read_failure(rank=p.spec.rank, local_rank=p.spec.local_rank, pid=p.pid, exitcode=p.popen.returncode,
                             error_file=p.spec.env["TORCHELASTIC_ERROR_FILE"]) for p in ended]
    if received is not None:
        # torchrun ends with an uncaught SignalException, exit 1; for the others, 128 + n
        code = 1 if received == signal.SIGINT else 128 + received
        say(f"received {signal.Signals(received).name} during attempt {restart}; no further attempt (exit {code})")
    if failures:
        report(err, config.script, failures, f" on attempt {restart}", run_dir)
        hint = _interpreter_hint(plan, config, failures[0],
                                 os.path.join(run_dir, f"attempt_{restart}", str(failures[0].local_rank)))
        if hint:
            say(hint)
    elif config.log_dir is None:  # a success, or a stop by signal: no error file to keep
        shutil.rmtree(os.path.dirname(run_dir), ignore_errors=True)  # the temporary base made for this run
    return code


def _interpreter_hint(plan: Plan, config: RunConfig, failure: Failure, rank_dir: str) -> str | None:
    """For a Python error (exit code 1): which interpreter ran it, and how to choose another."""
    if config.no_python or failure.exitcode != 1:
        return None
    text = failure.message + failure.traceback
    for name in ("stderr.log", "stdout.log"):
        text += read_log(os.path.join(rank_dir, name), tail=True)
    source = "from PYTHON_EXEC" if plan.base_env.get("PYTHON_EXEC") else "the interpreter running topo run, as torchrun"
    if "ModuleNotFoundError" in text or "No module named" in text:
        return (f"the workers could not import a module with {config.python} ({source}): set PYTHON_EXEC to the "
                "interpreter that has it (PYTHON_EXEC=/path/to/venv/bin/python topo run ...)")
    return f"the workers ran {config.python} ({source}); PYTHON_EXEC chooses another"


def describe_run(plan: Plan, config: RunConfig) -> str:
    """The dry-run text: per worker its argv, binding and torchrun environment."""
    env = plan.processes[0].env
    lines = [f"warning: {w}" for w in plan.warnings]
    lines.append(f"run id {env['TORCHELASTIC_RUN_ID']}, {config.nnodes} node(s) x {config.nproc_per_node} worker(s), "
                 f"node rank {config.node_rank}, master {config.master_addr}:{env['MASTER_PORT']}, "
                 f"restarts up to {config.max_restarts}")
    for spec in plan.processes:
        lines.append(f"{spec.name}, local rank {spec.local_rank}: {shlex.join(spec.argv)}")
        lines.append(f"  binding: {spec.binding.describe()}")
        lines.append("  env: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(spec.env.items())))
    return "\n".join(lines)
