"""Planners: turn a Topology and a job into a BindPlan (MindSpore's unified bind JSON).

    import topo, planners
    plan = planners.plan(topo.discover(), "exclusive")          # one process per accelerator
    plan = planners.plan(t, "unique-contiguous", scope="socket", nproc=4)
    json.dump(plan.to_json(), open("bind.json", "w"))

Strategies ``(Topology, Job, Options) -> BindPlan`` are listed in ``BUILTIN``; a plug-in adds a function
(with optional ``summary``, ``shares_cpus``) or a ``Planner`` under the entry-point group ``topo.planners``.
"""

from __future__ import annotations

from typing import Sequence

from topo.errors import UsageError
from topo.model import Topology

from topo.planners.bindcheck import Problem, validate_bind
from topo.planners.bindload import load_bind
from topo.planners.bindplan import BindPlan, ProcessBinding
from topo.planners.core import Job, Options, Planner

ENTRY_POINT_GROUP = "topo.planners"

BUILTIN: dict[str, Planner] = {name: Planner(name, summary, f"topo.planners.{target}", shares_cpus=shares)
                                for name, summary, target, shares in (
    ("msrun-auto", "msrun --bind_core=True CPU split (or --msrun-bind numa: --bind_numa=True nodes)",
     "msrun:plan_msrun_auto", False),
    ("node", "torch: all allowed CPUs of the device's NUMA node", "torch:plan_node", True),
    ("socket", "torch: all allowed CPUs of the device's socket", "torch:plan_socket", True),
    ("exclusive", "torch: the node's physical cores split among its devices (lower ranks get the rest)",
     "torch:plan_exclusive", False),
    ("core-complex", "torch: one last-level-cache group (L3/CCX) of the node per device",
     "torch:plan_core_complex", True),
    ("all", "gpu_affinity: every core of the scope, node-local first", "gpu_affinity:plan_all", True),
    ("single", "gpu_affinity: the first core of the scope", "gpu_affinity:plan_single", True),
    ("single-unique", "gpu_affinity: one core per device, never shared", "gpu_affinity:plan_single_unique", False),
    ("unique-interleaved", "gpu_affinity: the scope's cores dealt out, every k-th core per device",
     "gpu_affinity:plan_unique_interleaved", False),
    ("unique-contiguous", "gpu_affinity: the scope's cores cut into one block per device",
     "gpu_affinity:plan_unique_contiguous", False),
)}

_registry: dict[str, Planner] | None = None


def normalize_mode(mode: str) -> str:
    return mode.strip().lower().replace("_", "-")


def registry() -> dict[str, Planner]:
    """Every mode: ours, then those other packages declare under the ``topo.planners`` group
    (a name of ours declared again by a plug-in does not replace ours)."""
    global _registry
    if _registry is None:
        reg = dict(BUILTIN)
        for ep in _entry_points():
            name = normalize_mode(ep.name)
            if name in BUILTIN:
                continue
            try:
                obj = ep.load()
            except Exception as exc:  # a broken plug-in must not break the built-in modes
                def broken(topology, job, options, value=ep.value, exc=exc):
                    raise UsageError(f"planner {value} failed to load: {exc}")
                reg[name] = Planner(name, f"(failed to load {ep.value}: {exc})", broken)
                continue
            if isinstance(obj, Planner):
                reg[normalize_mode(obj.name)] = obj
            elif callable(obj):
                summary = getattr(obj, "summary", None) or (obj.__doc__ or ep.value).strip().splitlines()[0]
                reg[name] = Planner(name, summary, obj, shares_cpus=bool(getattr(obj, "shares_cpus", False)))
        _registry = reg
    return _registry


def _entry_points():
    from importlib.metadata import entry_points

    return list(entry_points(group=ENTRY_POINT_GROUP))


def modes() -> list[str]:
    return list(registry())


def get_planner(mode: str) -> Planner:
    name = normalize_mode(mode)
    if name in BUILTIN:  # ours win over plug-ins: no need to scan the installed packages' entry points
        return BUILTIN[name]
    reg = registry()
    if name not in reg:
        raise UsageError(f"unknown mode {mode!r}; choose one of {', '.join(reg)}")
    return reg[name]


def plan(topology: Topology, mode: str, *, job: Job | None = None, devices: Sequence[int] | None = None,
         nproc: int | None = None, **options) -> BindPlan:
    """Plan ``mode`` for ``topology``: one process per accelerator unless ``job``, ``devices`` (physical
    ids, ``()`` for CPU-only) or ``nproc`` say otherwise. Without ``devices`` on the live machine, the
    devices the visible-device variables leave, in their order (`topo.visible.visible_device_ids`).
    ``options`` are `planners.core.Options` fields."""
    planner = get_planner(mode)
    opts = Options.from_kwargs(**options)
    hidden = None
    if job is None:
        if devices is None:
            from topo.visible import hidden_warning, visible_device_ids

            devices = visible_device_ids(topology)
            hidden = hidden_warning(topology) if devices == () else None
        job = Job.for_topology(topology, devices=devices, nproc=nproc)
    result = planner.load()(topology, job, opts)
    if not isinstance(result, BindPlan):
        raise UsageError(f"planner {planner.name!r} returned {type(result).__name__}, not a BindPlan")
    # a reader's notes: the mode, whether it shares CPUs by design (`topo validate` accepts overlap), and
    # whether the job drives no device (its keys are then ranks, msrun's DEVICE_ID: no locality to explain)
    meta = {"schema": "topo.bind/1", "mode": planner.name}
    if planner.shares_cpus:
        meta["shared_cpus"] = True
    if job.cpu_only:
        meta["cpu_only"] = True
    meta.update(result.meta)
    return BindPlan.build(result.processes, cpu_mode=result.cpu_mode, memory_mode=result.memory_mode,
                          actor_thread_fix_bind=result.actor_thread_fix_bind, meta=meta,
                          warnings=(hidden, *result.warnings) if hidden else result.warnings)


__all__ = ["plan", "modes", "registry", "get_planner", "Planner", "Job", "Options", "BindPlan",
           "ProcessBinding", "Problem", "validate_bind", "load_bind", "ENTRY_POINT_GROUP"]
