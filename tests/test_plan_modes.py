"""Every mode on synthetic machines, hwloc's captured machines and the generated accelerator servers:
the properties each mode promises (allowed CPUs only, disjoint / balanced where promised, SMT
siblings together, memory on allowed CPU nodes, deterministic, valid bind JSON)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topo import planners
import topo
from topo.planners.bindcheck import validate_bind
from topo.planners.core import PSEUDO_NODE, AllowedResources
from topo.cpuset import CpuSet
from topo.errors import UsageError
from topo.synthetic import synthetic

sys.path.insert(0, str(Path(__file__).parent))
import machines  # noqa: E402

# from the registry, where the mode names and their facts are written
MODES = list(planners.BUILTIN)
UNIQUE = {name for name, p in planners.BUILTIN.items() if not p.shares_cpus}
GPU_AFFINITY = {name for name, p in planners.BUILTIN.items() if p.strategy.startswith("topo.planners.gpu_affinity:")}
WHOLE_CORES = {name for name, p in planners.BUILTIN.items() if not p.strategy.startswith("topo.planners.msrun:")}

SYNTHETIC = {
    "2pack-8numa-gpu-per-node": lambda: synthetic("pack:2 numa:4 l3:2 core:8 pu:2", gpus_per_numa=1),
    "dgx-a100-like": lambda: synthetic("pack:2 numa:4 l3:4 core:4 pu:2", pu_order="scatter",
                                       gpu_nodes=[3, 3, 1, 1, 7, 7, 5, 5]),
    "cgroup-limited": lambda: synthetic("pack:2 numa:2 l3:2 core:6 pu:2", gpus_per_numa=2,
                                        allowed="0-17,24-33,48-95"),
    "gh200-quad": lambda: synthetic("pack:4 numa:1 l3:1 core:18 pu:1", gpus_per_numa=1, gpu_memory_nodes=True),
    "ascend-like": lambda: synthetic("pack:2 numa:2 l3:1 core:12 pu:1", gpus_per_numa=2, device_kind="npu",
                                     vendor="huawei"),
    "cpu-only": lambda: synthetic("pack:2 numa:2 l3:2 core:4 pu:2"),
    "3gpus-uneven": lambda: synthetic("pack:1 numa:2 l3:3 core:5 pu:2", gpu_nodes=[0, 0, 1]),
}


def cores_in(resources: AllowedResources, cpus: CpuSet) -> list[CpuSet]:
    """The physical cores (restricted to ``cpus``) with a PU in ``cpus``, by lowest PU."""
    return [resources.cores[i] & cpus for i in resources.core_indexes(cpus)]


def check_plan(t: topo.Topology, mode: str, plan, **opts) -> None:
    resources = AllowedResources(t)
    allowed = t.allowed_pus & t.pus
    workers = plan.workers()
    assert workers, "a plan has at least one process"
    mains = {}
    for p in workers:
        if plan.cpu_mode == "cpu":
            cpus = p.cpus("main")
            assert cpus, f"{mode}: {p.key} got no CPUs"
            assert cpus <= allowed, f"{mode}: {p.key} has disallowed CPUs {cpus - allowed}"
            mains[p.key] = cpus
        else:
            assert plan.cpu_mode == "numa"
            assert p.cpu_nodes is not None and CpuSet((p.cpu_nodes,)) <= CpuSet(resources.node_ids)
        if opts.get("memory", "numa") == "numa" and resources.node_ids != [PSEUDO_NODE]:
            nodes = p.memory_nodes
            assert nodes, f"{mode}: {p.key} has no memory node"
            for n in nodes:
                assert n in t.allowed_numa_nodes and n in resources.node_cpus, \
                    f"{mode}: {p.key} memory on node {n}, not an allowed node with CPUs"
        elif opts.get("memory") == "none":
            assert p.memory is None
    keys = list(mains)
    if mode in UNIQUE and plan.cpu_mode == "cpu":
        for i, a in enumerate(keys):
            for b in keys[i + 1:]:
                assert not mains[a].intersects(mains[b]), f"{mode}: {a} and {b} overlap"
    if mode in WHOLE_CORES and (mode not in GPU_AFFINITY
                                or opts.get("multithreading", "all-logical") == "all-logical"):
        for k, cpus in mains.items():
            for core in cores_in(resources, cpus):
                full = resources.cores[resources.core_of_pu[core.first()]]
                assert full <= cpus, f"{mode}: {k} holds part of core {full}"
    if opts.get("multithreading") == "single-logical" and mode in GPU_AFFINITY:
        for k, cpus in mains.items():
            assert all(c.weight() == 1 for c in cores_in(resources, cpus)), f"{mode}: {k} has two threads of a core"
    ncores = {k: len(cores_in(resources, v)) for k, v in mains.items()}
    if mode in ("unique-interleaved", "unique-contiguous") and opts.get("balanced", True):
        # balanced = the same number of node cores (gpu_affinity's groups) for everyone; with scope
        # socket each also holds the socket cores dealt to its node cores, which may differ by one
        # (memory is bound to the home node, which tells the node cores apart)
        if opts.get("scope", "node") == "node":
            assert len(set(ncores.values())) == 1, f"{mode}: unbalanced {ncores}"
        elif all(p.memory_nodes for p in workers):
            local = {p.key: len(cores_in(resources, mains[p.key] & resources.cpus_of_nodes(p.memory_nodes)))
                     for p in workers}
            assert len(set(local.values())) == 1, f"{mode}: unbalanced {local}"
    if mode == "exclusive":
        # balance among processes sharing a home node
        homes = {}
        for r, p in enumerate(workers):
            nodes = tuple(n for n in resources.node_ids if mains[p.key].intersects(resources.node_cpus[n]))
            homes.setdefault(nodes, []).append(ncores[p.key])
        for counts in homes.values():
            assert max(counts) - min(counts) <= 1, f"exclusive: unbalanced {counts}"
    if mode in ("single", "single-unique"):
        assert all(n == 1 for n in ncores.values())
    # the JSON is valid against the topology; only the shared modes may overlap
    assert validate_bind(plan.to_json(), t) == []
    problems = validate_bind(plan.to_json(), t, allow_overlap=False)
    if mode in UNIQUE:
        assert problems == []
    else:
        assert all("overlap" in p.message for p in problems), problems
    assert planners.bindload.plan_from_json(plan.to_json()).to_json() == plan.to_json()


def plan_and_check(t, mode, **opts):
    plan = planners.plan(t, mode, **opts)
    again = planners.plan(t, mode, **opts)
    assert plan == again and plan.to_json() == again.to_json(), "planning is deterministic"
    check_plan(t, mode, plan, **opts)
    return plan


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
@pytest.mark.parametrize("mode", MODES)
def test_every_mode_on_synthetic(name, mode):
    t = SYNTHETIC[name]()
    t.check()
    plan_and_check(t, mode)


@pytest.mark.parametrize("mode", ["all", "single", "single-unique", "unique-interleaved", "unique-contiguous"])
@pytest.mark.parametrize("scope", ["node", "socket"])
@pytest.mark.parametrize("mt", ["all-logical", "single-logical"])
@pytest.mark.parametrize("balanced", [True, False])
def test_gpu_affinity_options(mode, scope, mt, balanced):
    for name in ("dgx-a100-like", "3gpus-uneven", "cgroup-limited"):
        plan_and_check(SYNTHETIC[name](), mode, scope=scope, multithreading=mt, balanced=balanced)


@pytest.mark.parametrize("options", [
    {"msrun_bind": "numa"}, {"msrun_bind": "core", "share": "host"}, {"affinity": False},
    {"spread_nodes": True}, {"memory": "none"}, {"msrun_bind": "numa", "memory": "none"},
])
@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_msrun_auto_variants(name, options):
    plan_and_check(SYNTHETIC[name](), "msrun-auto", **options)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("nproc", [1, 3, 5])
def test_cpu_only_jobs_split_allowed_cpus(mode, nproc):
    t = SYNTHETIC["cpu-only"]()
    plan = plan_and_check(t, mode, nproc=nproc)
    assert [p.key for p in plan.workers()] == [f"device{r}" for r in range(nproc)]
    if mode in ("node", "msrun-auto") and nproc <= 4:
        union = CpuSet()
        for p in plan.workers():
            union |= p.cpus()
        assert union == t.allowed_pus  # the whole machine is used


@pytest.mark.parametrize("mode", MODES)
def test_partial_job_by_devices(mode):
    t = SYNTHETIC["dgx-a100-like"]()
    plan = plan_and_check(t, mode, devices=[5, 2, 3])
    assert [(p.key, p.local_rank) for p in plan.workers()] == [("device5", 0), ("device2", 1), ("device3", 2)]


# ---- hwloc's captured machines (CPU-only) and the generated GPU / NPU servers ------------------
HWLOC_TARBALLS = sorted(p.name for p in (Path(__file__).parent / "fixtures" / "sysfs").glob("*.tar.bz2"))


@pytest.fixture(scope="module")
def hwloc_topologies(hwloc_roots):
    out = {}
    for tarball in HWLOC_TARBALLS:
        try:
            out[tarball] = topo.discover(hwloc_roots.root(tarball))
        except topo.TopoError as exc:  # discovery is someone else's; a broken fixture is not ours
            out[tarball] = exc
    return out


def test_exclusive_plan_of_every_fixture_validates(hwloc_roots, hwloc_topologies):
    """`topo plan --mode exclusive -o bind.json` on any fixture writes a file that `topo validate`
    (which sees disallowed CPUs and nodes too) accepts."""
    for name, t in hwloc_topologies.items():
        if isinstance(t, Exception) or not (t.allowed_pus & t.pus):
            continue
        data = planners.plan(t, "exclusive").to_json()
        full = topo.discover(hwloc_roots.root(name), include_disallowed=True)
        assert validate_bind(data, full) == [], name
        assert validate_bind(data, full, allow_overlap=False) == [], name


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_on_hwloc_fixtures(hwloc_topologies, mode):
    planned = 0
    for name, t in hwloc_topologies.items():
        if isinstance(t, Exception) or not (t.allowed_pus & t.pus):
            continue
        plan_and_check(t, mode)
        plan_and_check(t, mode, devices=(), nproc=min(3, len(AllowedResources(t).cores)))
        planned += 1
    assert planned >= len(hwloc_topologies) // 2


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    base = tmp_path_factory.mktemp("servers")
    return {name: topo.discover(machines.build(make(), base / name)) for name, make in machines.MACHINES.items()}


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_on_accelerator_servers(servers, mode):
    for name, t in servers.items():
        plan = plan_and_check(t, mode)
        assert len(plan.workers()) == 8, name
        if mode in ("node", "exclusive", "core-complex", "all", "single-unique", "unique-contiguous"):
            # node-local modes keep every process on its device's node
            resources = AllowedResources(t)
            for p in plan.workers():
                home = resources.home_of(p.device)
                assert p.cpus() <= resources.cpus_of_nodes(home), (name, mode, p.key)


# ---- hypothesis: random shapes, random cgroups -------------------------------------------------
shapes = st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 6),
                   st.integers(1, 2))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=shapes, gpus=st.integers(0, 3), hbm=st.booleans(), mode=st.sampled_from(MODES), data=st.data(),
       scatter=st.booleans())
def test_random_machines(shape, gpus, hbm, mode, data, scatter):
    """Random shapes, random cgroups (CPUs and memory nodes), HBM nodes, random options."""
    pack, numa, l3, core, pu = shape
    desc = f"pack:{pack} numa:{numa} l3:{l3} core:{core} pu:{pu}"
    shape_args = {"gpus_per_numa": gpus, "gpu_memory_nodes": hbm, "pu_order": "scatter" if scatter else "compact"}
    full = synthetic(desc, **shape_args)
    allowed = data.draw(st.sets(st.integers(0, full.pus.weight() - 1), min_size=1), label="allowed")
    nodes = data.draw(st.sets(st.integers(0, len(full.numa_nodes) - 1), min_size=1), label="allowed_nodes")
    t = synthetic(desc, allowed=CpuSet(allowed).to_list(), allowed_nodes=CpuSet(nodes).to_list(), **shape_args)
    opts = data.draw(st.fixed_dictionaries({}, optional={
        "scope": st.sampled_from(["node", "socket"]),
        "multithreading": st.sampled_from(["all-logical", "single-logical"]),
        "balanced": st.booleans(),
        "memory": st.sampled_from(["numa", "none"]),
        "msrun_bind": st.sampled_from(["core", "numa"]),
        "share": st.sampled_from(["job", "host"]),
        "spread_nodes": st.booleans(),
        "affinity": st.booleans(),
        "nproc": st.integers(1, 5),
    }), label="options")
    if t.devices and opts.get("nproc", 0) > len(t.devices):
        opts["nproc"] = len(t.devices)
    try:
        plan = planners.plan(t, mode, **opts)
    except UsageError as exc:
        # the only refusals: not enough cores / CPUs / nodes for what was asked, and they say so
        assert any(w in str(exc) for w in ("cores", "CPUs", "no allowed CPU", "NUMA node")), exc
        return
    checked = {k: v for k, v in opts.items() if k in ("multithreading", "balanced", "memory", "scope")}
    if opts.get("msrun_bind") == "numa" and mode == "msrun-auto":
        assert plan.cpu_mode == "numa"
    check_plan(t, mode, plan, **checked)
    assert planners.plan(t, mode, **opts) == plan
