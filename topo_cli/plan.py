"""`topo plan` and `topo validate`: read the machine and the environment, call the planners, render.
Everything impure happens here; the strategies only see a Topology, a Job and Options."""

from __future__ import annotations

import json
import os
import sys

import click

from topo.errors import ParseError, TopoError, UsageError
from topo.planners import core
from topo.planners.core import Options
from topo.text import printable
from topo.cli import CONTEXT
from topo.cli.machine import STDOUT_NAMES, check_output, machine_options, write_text
from topo.cli.numbers import WholeRange


class _ModeOption(click.Option):
    """--mode: a mode of the planner registry (plug-ins included), which its help lists when shown."""

    def get_help_record(self, ctx):
        from topo import planners

        self.help = f"Binding strategy: {', '.join(planners.modes())} ('_' or '-'); see --list-modes."
        return super().get_help_record(ctx)

    def type_cast_value(self, ctx, value):
        from topo import planners

        return None if value is None else planners.get_planner(value).name  # its UsageError names the modes


class _Choice(click.Choice):
    """One of a planner option's values; '_' reads as '-' (all_logical), as the planners read it."""

    def convert(self, value, param, ctx):
        return super().convert(value.replace("_", "-") if isinstance(value, str) else value, param, ctx)


def _option(name: str, values=None, **kwargs):
    """A planner option: its choices (``values``) and default are `planners.core.Options`'."""
    field = name.lstrip("-").replace("-", "_")
    if values is not None:
        kwargs["type"] = _Choice(values)
    return click.option(name, default=getattr(Options, field), show_default=True, **kwargs)


def parse_devices(text: str | None, topology) -> tuple[int, ...] | None:
    """--devices: physical ids in local-rank order ("3,1", "0-3"), GPU/MIG UUIDs or PCI bus ids
    (found in `topology`), or none/cpu for a CPU-only job."""
    if text is None or text.strip().lower() in ("", "none", "cpu"):
        return None if text is None else ()
    from topo.cpuset import CpuSet
    from topo.visible import find_device

    ids: list[int] = []
    fix = "give physical device ids such as 0,1,3 (or 'none')"
    for item in (item.strip() for item in text.split(",")):
        if not item:
            raise UsageError(f"--devices {text!r} has an empty item: {fix}")
        numbers = all(c.isdigit() or c == "-" for c in item) and item.count("-") <= 1  # an id or a range of ids
        try:
            if numbers:
                ids.extend(CpuSet.parse(item))
            else:  # a UUID or a PCI bus id
                ids.append(find_device(topology, item)[0].index)
        except TopoError as exc:
            raise UsageError(f"--devices {text!r}: {exc}" + (f": {fix}" if numbers else "")) from None
    return tuple(ids)


@click.command(context_settings=CONTEXT)
@machine_options
@click.option("--mode", metavar="MODE", cls=_ModeOption)
@click.option("--list-modes", is_flag=True, help="List the modes, one line each, and exit.")
@click.option("--nproc-per-node", type=WholeRange(min=1),
              help="Number of processes (default: one per device; CPU-only: one per NUMA node).")
@click.option("--devices", metavar="IDS", help="Physical device ids, GPU/MIG UUIDs or PCI bus ids, comma separated, in "
              "local-rank order; 'none' for a CPU-only job. Default: the devices CUDA_VISIBLE_DEVICES / "
              "ASCEND_RT_VISIBLE_DEVICES leave visible.")
@_option("--scope", core.SCOPES, help="gpu_affinity modes: the CPUs a device may use, its NUMA node or its socket.")
@_option("--multithreading", core.MULTITHREADING,
         help="gpu_affinity modes: all threads of each core, or the first one.")
@click.option("--balanced/--no-balanced", default=Options.balanced, show_default=True,
              help="unique-* modes: the same number of cores for every device.")
@click.option("--priority-cores", is_flag=True,
              help="Each process's first CPU (its main thread's) on a priority core of its home: the most "
                   "efficient CPU kind (topo show --cpukinds), one per process where there are enough.")
@_option("--min-physical-cores", type=WholeRange(min=1),
         help="gpu_affinity modes: fail if a device gets fewer physical cores.")
@_option("--max-physical-cores", type=WholeRange(min=1),
         help="gpu_affinity modes: at most this many physical cores per device.")
@_option("--memory", core.MEMORY, help="numa: bind each process's memory to its device's NUMA node; preferred: prefer "
         "that node, fall back to others when it is full; device: bind it to the GPU's own memory node (GH200/GB200 "
         "HBM), else as numa; none: leave it.")
@_option("--msrun-bind", core.MSRUN_BIND, help="msrun-auto: --bind_core=True CPU split, or --bind_numa=True "
                                               "node assignment.")
@_option("--share", core.SHARE, help="msrun-auto: divide CPUs among this job's devices, or among all host "
                                     "devices (msrun).")
@click.option("--modules", metavar="LAYOUT", help="Thread modules at relative positions of each process's CPUs, "
              "gen_bind_json style: runtime=4-8,minddata=9-12,main=13-19 (adds a scheduler entry).")
@click.option("--scheduler-range", metavar="START-END",
              help="Scheduler CPUs: relative positions in the scheduler base (default 20-23 with --modules).")
@_option("--scheduler-base", core.SCHEDULER_BASES,
         help="Scheduler CPUs taken from: CPUs of no device, all, or device0's.")
@click.option("--explain", is_flag=True, help="Print a table per process (device, node, CPUs, cores, L3, memory, "
              "locality) and warnings instead of the JSON (the JSON still goes to -o FILE).")
@click.option("-o", "--output", metavar="FILE", help="Write the bind JSON to FILE (default: stdout; '-' is stdout).")
@click.option("--picture", metavar="FILE",
              help="Also draw the plan on the machine: FILE.svg, or FILE.html (the drawing and the legend).")
@click.option("-f", "--force", is_flag=True,
              help="Overwrite the -o and --picture files if they exist (else refused, as lstopo).")
def plan(machine, mode, list_modes, nproc_per_node, devices, modules, scheduler_range, explain, output, picture,
         force, **options):
    """Plan which CPUs and memory each process of a job uses; write MindSpore's bind JSON.

    \b
    Examples:
        topo plan --mode exclusive -o bind.json
        topo plan --mode unique-contiguous --scope socket --explain
        topo plan --mode exclusive --picture plan.html
        topo launch --bind_numa=bind.json train.py
    """
    from topo import planners
    from topo.planners.thread_modules import parse_modules, parse_range
    from topo.visible import default_kind

    if list_modes:
        registry = planners.registry()
        width = max(len(name) for name in registry)
        click.echo("\n".join(f"{name.ljust(width)}  {p.summary}" for name, p in registry.items()))
        return
    if not mode:
        raise UsageError(f"--mode is required: one of {', '.join(planners.modes())} (see --list-modes)")
    if picture is not None and os.path.splitext(picture)[1].lower() not in (".svg", ".html", ".htm"):
        raise UsageError(f"--picture {picture}: name the file .svg or .html")
    output = None if output in STDOUT_NAMES else output
    if output is not None and output == picture:
        raise UsageError(f"-o {output} and --picture {picture} name the same file: give two names")
    for path in (output, picture):
        if path is not None:
            check_output(path, force)  # before any work: nothing is written if one cannot be
    topology = machine.load()
    ids = parse_devices(devices, topology)  # None: planners.plan applies the visible-device variables
    result = planners.plan(  # the planner options (--scope, --memory, ...) as Options reads them
        topology, mode, devices=ids, nproc=nproc_per_node, **options,
        modules=parse_modules(modules, "--modules") if modules else None,
        scheduler_range=parse_range("--scheduler-range", scheduler_range) if scheduler_range else None)
    text = json.dumps(result.to_json(), indent=2) + "\n"
    if output is not None:
        write_text(output, text, force)
    if picture is not None or explain:
        from topo.views.plan import plan_html, plan_map, plan_svg

        # drawn on the view with disallowed CPUs, so they show greyed
        drawn = topology if machine.file is not None else machine.load(include_disallowed=True)
    if picture is not None:
        draw = plan_svg if picture.lower().endswith(".svg") else plan_html
        write_text(picture, draw(drawn, result), force)
    if explain:
        from topo.planners.explain import explain as render

        click.echo(printable(render(topology, result), lines=True))
        colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        click.echo("\n" + plan_map(drawn, result, colour=colour))
    elif output is None:
        sys.stdout.write(text)
    if not explain:
        for w in result.warnings:
            click.echo(printable(f"topo: warning: {w}"), err=True)
    if result.meta.get("cpu_only") and nproc_per_node is None and not default_kind(topology):
        # msrun and torchrun start one process per accelerator; without any, say how many were planned
        n = sum(not p.is_scheduler for p in result.processes)
        click.echo(f"topo plan: no accelerator here: planned {n} process{'' if n == 1 else 'es'}; "
                   "plan N with --devices none --nproc-per-node N", err=True)


@click.command(context_settings=CONTEXT)
@machine_options
@click.argument("file", metavar="FILE")
def validate(machine, file):
    """Check a bind JSON against msrun's schema and a topology (default: this machine).

    Lists every problem with its JSON path and a fix; exits 1 if there is any.

    \b
    Examples:
        topo validate bind.json
        topo validate bind.json --topology other-host.json
    """
    from topo.planners.bindcheck import Problem, validate_bind
    from topo.planners.bindload import read_bind_json

    try:
        data = read_bind_json(file).data
    except ParseError as exc:
        problems = [Problem("", str(exc), "fix the file so that it is a JSON object (see `topo plan -o`)")]
        data = None
    else:
        # disallowed CPUs and nodes stay in view, so a problem can say "not allowed" vs "not present"
        topology = machine.load(include_disallowed=True)
        problems = validate_bind(data, topology)
    errors = [p for p in problems if p.severity != "warning"]
    warned = len(problems) - len(errors)
    warnings = f", {warned} warning{'s' if warned != 1 else ''}" if warned else ""
    if errors:
        report = [f"{file}: {len(errors)} problem{'s' if len(errors) != 1 else ''}{warnings}"]
    else:
        keys = set(data.get("bind_cpu") or {}) | set(data.get("bind_memory") or {})
        report = [f"{file}: ok ({len(keys)} process{'' if len(keys) == 1 else 'es'}){warnings}"]
    for p in problems:
        report.append(f"  {p.path or '(file)'}: {'warning: ' if p.severity == 'warning' else ''}{p.message}")
        report += [f"    fix: {p.fix}"] if p.fix else []
    for line in report:  # each line escaped where it is printed: a newline in a message stays on its line
        click.echo(printable(line))
    if errors:
        sys.exit(1)
