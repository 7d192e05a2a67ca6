"""`topo run` on torch.distributed.elastic, for the jobs only a rendezvous can form (c10d or etcd
without node ranks, MIN:MAX, --rdzv-conf, log plug-ins). torch's agent starts the workers, each
bound at birth by bindexec choosing its entry by the agent's `${local_rank}` macro; topo reads
each one back from /proc, and reports a failure as the static plan does."""

from __future__ import annotations

import functools
import os
import shlex
import signal
import sys
import threading
from dataclasses import fields
from typing import Mapping, Sequence, TextIO

import psutil

from topo.launcher import verify
from topo.launcher.environ import describe_threads, sharers, thread_env
from topo.launcher.procgroup import LaunchError
from topo.launcher.supervisor import EXEC_TIMEOUT, exit_code
from topo.launcher.torchrun_errors import read_failure, report
from topo.launcher.torchrun_flags import DEFAULT_LINE_PREFIX, DEFAULT_SIGNALS, RunConfig
from topo.binding import BINDING_VAR, Binding, observe
from topo.cpuset import excerpt
from topo.errors import ParseError, UsageError

BINDEXEC = ("-m", "topo.launcher.bindexec")
LOCAL_RANK_MACRO = "${local_rank}"  # torch.distributed.elastic.utils.api.macros.local_rank


def worker_argv(command: Sequence[str], bindings: Sequence[Binding], threads: Sequence[Mapping[str, str]],
                bind_fallback: bool = False) -> list[str]:
    """What the agent starts for every local rank: `command` when no worker is bound, else bindexec
    with each local rank's binding and OMP_NUM_THREADS (`threads`)."""
    if not any(b.is_bound for b in bindings):
        return list(command)
    table = []
    for rank, (binding, env) in enumerate(zip(bindings, threads)):
        table += [f"--rank={rank}", *binding.env_value().split(), *(f"--env={k}={v}" for k, v in env.items())]
    fallback = ["--bind-fallback"] if bind_fallback else []
    return [sys.executable, *BINDEXEC, f"--local-rank={LOCAL_RANK_MACRO}", *fallback, *table, "--", *command]


def launch_config(config: RunConfig):
    """torch's LaunchConfig, as torchrun's config_from_args makes it, with the fields this torch has;
    plus the flags given that it has no field for."""
    from torch.distributed.elastic.multiprocessing import Std
    from torch.distributed.elastic.rendezvous.utils import _parse_rendezvous_config
    from torch.distributed.launcher.api import LaunchConfig
    from torch.distributed.run import _get_logs_specs_class
    extras = config.torch_extras
    try:
        rdzv_configs = _parse_rendezvous_config(config.rdzv_conf)
    except ValueError as exc:
        raise UsageError(f"--rdzv-conf={excerpt(config.rdzv_conf, 60)!r}: {exc}") from None
    try:
        logs_specs_class = _get_logs_specs_class(extras["logs_specs"])
    except ValueError as exc:
        raise UsageError(f"--logs-specs={excerpt(str(extras['logs_specs']), 60)!r}: {exc}") from None
    endpoint = config.rdzv_endpoint
    if config.rdzv_backend == "static":
        rdzv_configs["rank"] = config.node_rank
        endpoint = endpoint or f"{config.master_addr}:{config.master_port}"
    wanted = {
        "min_nodes": config.min_nodes or config.nnodes, "max_nodes": config.nnodes,
        "nproc_per_node": config.nproc_per_node, "run_id": config.run_id, "role": config.role,
        "rdzv_endpoint": endpoint, "rdzv_backend": config.rdzv_backend, "rdzv_configs": rdzv_configs,
        "max_restarts": config.max_restarts, "monitor_interval": config.monitor_interval,
        "start_method": str(extras["start_method"]), "local_addr": config.local_addr,
        "event_log_handler": str(extras["event_log_handler"]),
        "logs_specs": logs_specs_class(log_dir=config.log_dir, redirects=Std.from_str(config.redirects),
                                       tee=Std.from_str(config.tee), local_ranks_filter=config.local_ranks_filter),
        "log_line_prefix_template": None if config.line_prefix == DEFAULT_LINE_PREFIX else config.line_prefix,
        "signals_to_handle": config.signals_to_handle, "virtual_local_rank": config.virtual_local_rank,
        "duplicate_stdout_filters": _filters(extras["duplicate_stdout_filters"]),
        "duplicate_stderr_filters": _filters(extras["duplicate_stderr_filters"]),
        "shutdown_timeout": config.grace_period,
    }
    have = {f.name for f in fields(LaunchConfig)}
    unused = {"signals_to_handle": DEFAULT_SIGNALS, "virtual_local_rank": False, "duplicate_stdout_filters": [],
              "duplicate_stderr_filters": [], "shutdown_timeout": 30.0}
    missing = [name for name, default in unused.items() if name not in have and wanted[name] != default]
    return LaunchConfig(**{k: v for k, v in wanted.items() if k in have}), missing


def _filters(value) -> list[str]:
    """--duplicate-*-filters as torchrun splits them: on commas, `,,` standing for a comma."""
    text = str(value or "")
    return [item.replace("\0", ",") for item in text.replace(",,", "\0").split(",")] if text else []


def run_agent(config: RunConfig, environ: Mapping[str, str], command: Sequence[str], bindings: Sequence[Binding],
              warnings: Sequence[str], *, out: TextIO, err: TextIO) -> int:
    """launcher.torchrun.run under torch's agent, each worker bound at birth to its `bindings` entry.
    Must run on the main thread: the agent turns the signals it handles into SignalException there."""
    threads = [thread_env(environ, b, config.nproc_per_node, shared) if b.is_bound else {}
               for b, shared in zip(bindings, sharers(bindings))]
    argv = worker_argv(command, bindings, threads, config.bind_fallback)
    if config.dry_run:  # the rendezvous, the workers' command, each local rank's binding (ranks come later)
        nodes = f"{config.min_nodes} to {config.nnodes}" if config.min_nodes != config.nnodes else str(config.nnodes)
        endpoint = config.rdzv_endpoint or f"{config.master_addr}:{config.master_port}"
        lines = [*(f"warning: {w}" for w in warnings),
                 f"torch's agent runs this job ({config.torch_agent}): rendezvous {config.rdzv_backend} at {endpoint}, "
                 f"run id {config.run_id}, {nodes} node(s) x {config.nproc_per_node} worker(s), "
                 f"restarts up to {config.max_restarts}",
                 f"every worker: {shlex.join(argv)}  ({LOCAL_RANK_MACRO}: its local rank)",
                 *(f"local rank {rank}: binding: {b.describe()}" for rank, b in enumerate(bindings))]
        print("\n".join(lines), file=out)
        return 0

    import torch
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.launcher.api import elastic_launch

    say = functools.partial(print, "topo run:", file=err, flush=True)  # one line of topo run's own to err
    launch, missing = launch_config(config)
    for name in missing:
        say(f"warning: torch {torch.__version__}'s agent has no {name}; --{name.replace('_', '-')} is not used")
    for warning in warnings:
        say(f"warning: {warning}")
    say(f"torch {torch.__version__}'s rendezvous and agent run this job ({config.torch_agent})")
    if config.node_rank != 0 and config.rdzv_backend != "static":  # torchrun's warning too
        say(f"warning: --node-rank={config.node_rank} is not used: the {config.rdzv_backend} rendezvous orders "
            "the nodes")
    if "OMP_NUM_THREADS" not in environ and config.nproc_per_node > 1 and not config.numa_binding:
        # torchrun's rule, set as its config_from_args sets it: the agent gives workers this environment
        os.environ["OMP_NUM_THREADS"] = "1"
        say(f"OMP_NUM_THREADS=1 for each of the {config.nproc_per_node} workers (they share this node's CPUs); "
            "set OMP_NUM_THREADS to tune it")
    if note := describe_threads([f"local rank {r}" for r in range(len(bindings))], bindings, threads):
        say(note)
    bound = argv[1:1 + len(BINDEXEC)] == list(BINDEXEC)
    done = threading.Event()  # set, then join: the job has ended
    check = threading.Thread(target=check_workers, args=(say, argv[:1 + len(BINDEXEC)] if bound else (), done),
                             name="topo-worker-check", daemon=True)
    code, failures = 0, []
    check.start()
    try:
        elastic_launch(launch, argv[0])(*argv[1:])
    except ChildFailedError as exc:
        root, first = exc.get_first_failure()
        failures = [read_failure(rank=r, local_rank=f.local_rank, pid=f.pid, exitcode=f.exitcode,
                                 error_file=f.error_file)
                    for r, f in sorted(exc.failures.items(), key=lambda item: item[0] != root)]  # the root cause first
        code = exit_code(first.exitcode)
    except SignalException as exc:
        # torchrun ends with an uncaught SignalException, exit 1; for the others, 128 + n
        code = 1 if exc.sigval == signal.SIGINT else 128 + int(exc.sigval)
        say(f"received {signal.Signals(exc.sigval).name}; the workers were stopped (exit {code})")
    except (RendezvousError, ValueError, RuntimeError) as exc:
        raise LaunchError(f"torch's rendezvous or agent failed: {type(exc).__name__}: {exc}") from None
    finally:
        done.set()
        check.join(EXEC_TIMEOUT)
    if failures:
        report(err, config.script, failures, "", launch.logs_specs.root_log_dir)
    return code


def check_workers(say, prefix: Sequence[str], done: threading.Event) -> None:
    """Follows the workers torch's agent starts (this process's children) until `done`: once one has
    left `prefix` (bindexec), says whether its CPUs and memory policy in /proc are what bindexec
    applied (TOPO_BINDING in its environment)."""
    me, seen = psutil.Process(), set()
    prefixes = (tuple(me.cmdline()), tuple(prefix))  # what a child shows between fork and exec, then bindexec
    while not done.wait(0.02):
        try:
            children = me.children()
        except psutil.Error:
            continue
        for child in children:
            if child.pid not in seen:
                seen.add(child.pid)
                _check_worker(say, child, prefixes)


def _check_worker(say, child: psutil.Process, prefixes) -> None:
    if not verify.wait_for_exec(child.pid, prefixes, EXEC_TIMEOUT):
        return  # it ended first: bindexec said why on its stderr, and the agent reports the exit
    try:
        env = child.environ()
    except psutil.Error:
        return
    if "TORCHELASTIC_RUN_ID" not in env:
        return  # not a worker (a helper process of the agent's)
    attempt = env.get("TORCHELASTIC_RESTART_COUNT", "0")
    name = f"rank {env.get('RANK', '?')} (local rank {env.get('LOCAL_RANK', '?')}, attempt {attempt})"
    try:
        held = Binding.from_env(env.get(BINDING_VAR, ""))
    except ParseError:
        held = Binding()
    try:
        observed = observe(child.pid)
    except OSError:
        observed = None  # it ended
    if observed is None:
        say(f"{name}: exited before it could be checked")
    elif not held.is_bound:
        say(f"{name}: not bound (runs on CPUs {observed.cpus})")
    elif problem := verify.mismatch(held, observed):
        say(f"{name}: bound to {held.describe()}; {problem}: changed after start (by the process itself or another "
            "tool); the job goes on")
    else:
        say(f"{name}: {held.describe()} (verified)")
