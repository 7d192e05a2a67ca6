"""Worked examples with exact output: the references' own examples, and every place where a
reference tool breaks and we give the sensible result or a clear error (README "Planners")."""

from __future__ import annotations

import dataclasses

import sys
from pathlib import Path

import pytest

from topo import planners
import topo
from topo.planners.explain import explain
from topo.errors import UsageError
from topo.synthetic import from_nodes, synthetic

sys.path.insert(0, str(Path(__file__).parent))
from sysfs_builder import Cgroup, Machine, build  # noqa: E402


def mains(plan) -> dict[str, str]:
    return {p.key: ",".join(f"{m}={c}" for m, c in p.modules) if len(p.modules) > 1 else
            (p.modules[0][1] if p.modules else "") for p in plan.processes}


def memory(plan) -> dict[str, object]:
    return {p.key: p.memory for p in plan.processes if p.memory is not None}


def dgx_a100():
    # 2x EPYC 7742 NPS4, SMT2 numbered as Linux does; GPU0/1 node 3, 2/3 node 1, 4/5 node 7, 6/7 node 5
    return synthetic("pack:2 numa:4 l3:4 core:4 pu:2", pu_order="scatter", gpu_nodes=[3, 3, 1, 1, 7, 7, 5, 5])


def atlas800():
    # 4x Kunpeng 920, 8 nodes of 24 CPUs, NPUs 0/1 on node 0, 2/3 on 2, 4/5 on 4, 6/7 on 6
    return synthetic("pack:4 numa:2 core:24 pu:1", gpu_nodes=[0, 0, 2, 2, 4, 4, 6, 6], device_kind="npu",
                     vendor="huawei")


# ---- torch (torch.numa.binding) -------------------------------------------------------------------
def test_torch_exclusive_docstring_example():
    """torch's AffinityMode.EXCLUSIVE: "If NUMA node 1 has 16 physical cores and GPUs 2 and 3, then
    the worker whose local rank is 2 will be bound to cores 0-7, and ... 3 to cores 8-15"."""
    t = synthetic("pack:1 numa:2 core:16 pu:1", gpu_nodes=[0, 0, 1, 1])
    plan = planners.plan(t, "exclusive")
    assert mains(plan) == {"device0": "0-7", "device1": "8-15", "device2": "16-23", "device3": "24-31"}
    assert memory(plan) == {"device0": 0, "device1": 0, "device2": 1, "device3": 1}


def test_torch_exclusive_remainder_to_lower_ranks():
    t = from_nodes(["0-4"], gpu_nodes=[0, 0])
    assert mains(planners.plan(t, "exclusive")) == {"device0": "0-2", "device1": "3-4"}


def test_torch_exclusive_too_few_cores_message():
    t = from_nodes(["0-1", "2-9"], gpu_nodes=[0, 0, 0])
    with pytest.raises(UsageError, match=r"There are only 2 physical cores on numa_node_index=0, but there "
                                         r"are 3 GPUs associated with this NUMA node"):
        planners.plan(t, "exclusive")


def test_dgx_a100_torch_modes():
    t = dgx_a100()
    assert mains(planners.plan(t, "node"))["device2"] == "16-31,144-159"
    assert mains(planners.plan(t, "socket"))["device4"] == "64-127,192-255"
    assert mains(planners.plan(t, "exclusive")) == {
        "device0": "48-55,176-183", "device1": "56-63,184-191", "device2": "16-23,144-151",
        "device3": "24-31,152-159", "device4": "112-119,240-247", "device5": "120-127,248-255",
        "device6": "80-87,208-215", "device7": "88-95,216-223"}
    # core-complex: one 4-core CCX (L3) each, node-local
    assert mains(planners.plan(t, "core-complex"))["device0"] == "48-51,176-179"
    assert mains(planners.plan(t, "core-complex"))["device1"] == "52-55,180-183"


def test_core_complex_most_allowed_cpus_first_and_sharing_warning():
    t = from_nodes(["0-11"], caches=["0-3", "4-7", "8-11"], gpu_nodes=[0, 0, 0, 0], allowed="0-2,4-11")
    plan = planners.plan(t, "core-complex")
    # 4-7 and 8-11 have 4 allowed CPUs, 0-3 only 3: most allowed first, the 4th GPU wraps around
    assert mains(plan) == {"device0": "4-7", "device1": "8-11", "device2": "0-2", "device3": "4-7"}
    assert any("share" in w for w in plan.warnings)


def test_torch_socket_on_cpu_less_and_excluded_nodes():
    """torch's socket mode calls min() on every node of the socket: a memory-only node (GPU HBM)
    or a node the cgroup excludes crashes it. We use the socket's allowed CPUs."""
    t = from_nodes(["0-7", "8-15"], memory_only={2: 0}, gpu_nodes=[0], allowed="0-7")
    plan = planners.plan(t, "socket")
    assert mains(plan) == {"device0": "0-7"}


# ---- gpu_affinity (NVIDIA gpu_affinity) --------------------------------------------------------
def test_gpu_affinity_socket_scope_keeps_every_core():
    """gpu_affinity ran: socket 0-9, node 0-2 => unique/socket gives 0-8, CPU 9 lost (zip truncates)."""
    t = from_nodes(["0-2", "3-9"], gpu_nodes=[0])
    for mode in ("unique-contiguous", "unique-interleaved", "all"):
        assert mains(planners.plan(t, mode, scope="socket")) == {"device0": "0-9"}, mode
    assert mains(planners.plan(t, "unique-contiguous", scope="node")) == {"device0": "0-2"}


def test_gpu_affinity_socket_scope_groups_extra_cores_by_node():
    # two GPUs on node 0 (0-3) of socket 0-7: the 4 device-less cores are dealt to node cores 0..3
    t = from_nodes(["0-3", "4-7"], gpu_nodes=[0, 0])
    plan = planners.plan(t, "unique-contiguous", scope="socket")
    # groups (0,4) (1,5) (2,6) (3,7): each device gets two groups, read column by column
    assert mains(plan) == {"device0": "0-1,4-5", "device1": "2-3,6-7"}
    plan = planners.plan(t, "unique-interleaved", scope="socket")
    assert mains(plan) == {"device0": "0,2,4,6", "device1": "1,3,5,7"}


def test_single_unique_more_devices_than_node_cores():
    """gpu_affinity: 3 GPUs sharing 2 cores -> IndexError for GPU 2. We give it a free core of the
    socket, with a warning; and a clear error when no core is free at all."""
    t = from_nodes(["0-1", "2-3"], gpu_nodes=[0, 0, 0])
    plan = planners.plan(t, "single-unique")
    assert mains(plan) == {"device0": "0", "device1": "1", "device2": "2"}
    assert any("device2" in w and "taken" in w for w in plan.warnings)
    with pytest.raises(UsageError, match="single-unique needs one physical core per process, but 3 processes "
                                         "share 2 allowed cores"):
        planners.plan(from_nodes(["0-1"], gpu_nodes=[0, 0, 0]), "single-unique")


def test_single_ignores_min_max_and_takes_first_core():
    t = from_nodes(["0-7"], threads_per_core=2, gpu_nodes=[0, 0])
    plan = planners.plan(t, "single", min_physical_cores=3, max_physical_cores=3)
    assert mains(plan) == {"device0": "0-1", "device1": "0-1"}
    plan = planners.plan(t, "single", multithreading="single-logical")
    assert mains(plan) == {"device0": "0", "device1": "0"}


def test_unique_balanced_and_unbalanced():
    t = from_nodes(["0-4", "5-10"], packages=["0-4", "5-10"], gpu_nodes=[0, 0, 1, 1])
    # balanced: k = min(5//2, 6//2) = 2 cores for everyone
    assert mains(planners.plan(t, "unique-contiguous")) == {
        "device0": "0-1", "device1": "2-3", "device2": "5-6", "device3": "7-8"}
    assert mains(planners.plan(t, "unique-interleaved")) == {
        "device0": "0,2", "device1": "1,3", "device2": "5,7", "device3": "6,8"}
    # unbalanced, as gpu_affinity: contiguous cuts groups // devices and leaves the remainder (core 4)
    # unused; interleaved hands it to the lower rank
    assert mains(planners.plan(t, "unique-contiguous", balanced=False)) == {
        "device0": "0-1", "device1": "2-3", "device2": "5-7", "device3": "8-10"}
    assert mains(planners.plan(t, "unique-interleaved", balanced=False)) == {
        "device0": "0,2,4", "device1": "1,3", "device2": "5,7,9", "device3": "6,8,10"}


def test_all_node_local_first_and_min_max():
    t = from_nodes(["0-3", "4-7"], gpu_nodes=[1])
    plan = planners.plan(t, "all", scope="socket", max_physical_cores=5)
    assert mains(plan) == {"device0": "0,4-7"}  # node 1's cores 4-7 first, then 0
    with pytest.raises(UsageError, match=r"Number of available physical cores for GPU 0 is less the predefinied "
                                         r"minimum, min_physical_cores=5, available physical cores: 4-7 \(count=4\)"):
        planners.plan(t, "all", min_physical_cores=5)


def test_multithreading_single_logical():
    t = dgx_a100()
    plan = planners.plan(t, "unique-contiguous", multithreading="single-logical")
    assert mains(plan)["device0"] == "48-55"
    assert mains(plan)["device1"] == "56-63"


# ---- msrun (--bind_core / --bind_numa) --------------------------------------------------------------
def test_msrun_bind_core_affinity_pool_then_non_affinity_pool():
    # the msrun-auto docstring example: two devices on node 0, node 1 device-less
    t = synthetic("pack:1 numa:2 core:32 pu:1", gpu_nodes=[0, 0], device_kind="npu", vendor="huawei")
    plan = planners.plan(t, "msrun-auto")
    assert mains(plan) == {"device0": "0-31", "device1": "32-63"}


def test_msrun_bind_core_atlas800():
    plan = planners.plan(atlas800(), "msrun-auto")
    assert mains(plan) == {f"device{i}": f"{24 * i}-{24 * i + 23}" for i in range(8)}
    # --bind_core=True --bind_numa=True: an odd device finds its node taken and is moved, memory
    # included, to the next free node, where its CPUs are
    assert memory(plan) == {f"device{i}": i for i in range(8)}


def test_msrun_bind_numa_atlas800():
    plan = planners.plan(atlas800(), "msrun-auto", msrun_bind="numa")
    data = plan.to_json()
    assert data["bind_config"] == {"bind_cpu_mode": "numa", "bind_memory_mode": "numa"}
    assert data["bind_cpu"] == {f"device{i}": i for i in range(8)}
    assert data["bind_memory"] == data["bind_cpu"]


def test_msrun_bind_numa_out_of_nodes_shares_instead_of_stopiteration():
    """msrun ran: devices {0:0, 1:0, 2:0} with nodes [0, 1] -> uncaught StopIteration."""
    t = synthetic("pack:1 numa:2 core:4 pu:1", gpu_nodes=[0, 0, 0])
    plan = planners.plan(t, "msrun-auto", msrun_bind="numa")
    assert plan.to_json()["bind_cpu"] == {"device0": 0, "device1": 1, "device2": 0}
    assert any("StopIteration" in w for w in plan.warnings)
    assert any("only 2 NUMA nodes" in w for w in plan.warnings)


def test_msrun_partial_job_divides_by_job_not_host():
    """msrun divides the CPUs by every NPU of the host even for a 4-NPU job, leaving half idle;
    share='host' keeps that (no overlap between concurrent jobs), the default uses every CPU."""
    t = atlas800()
    host = planners.plan(t, "msrun-auto", devices=[0, 1, 2, 3], share="host")
    assert mains(host) == {"device0": "0-23", "device1": "24-47", "device2": "48-71", "device3": "72-95"}
    job = planners.plan(t, "msrun-auto", devices=[0, 1, 2, 3])
    cpus = [p.cpus() for p in job.workers()]
    assert [c.weight() for c in cpus] == [48] * 4
    assert sum(c.weight() for c in cpus) == 192
    assert mains(job)["device0"] == "0-47"  # own node, then the nearest device-less node
    assert mains(job)["device2"].startswith("48-71")


def test_msrun_cpu_list_from_cgroup_v2(tmp_path):
    """msrun reads only cgroup v1's cpuset.cpus (absent on cgroup v2 hosts: binding silently off).
    We plan from the allowed CPUs, v1 or v2."""
    root = build(tmp_path, Machine(packages=2, cores=4, threads=1, cgroup=Cgroup(2, cpus="2-5")))
    t = topo.discover(root)
    plan = planners.plan(t, "msrun-auto", nproc=2)
    assert mains(plan) == {"device0": "2-3", "device1": "4-5"}
    assert memory(plan) == {"device0": 0, "device1": 1}


def test_msrun_cpu_only_equal_split_last_gets_remainder():
    t = from_nodes(["0-9"])
    plan = planners.plan(t, "msrun-auto", nproc=3)
    assert mains(plan) == {"device0": "0-2", "device1": "3-5", "device2": "6-9"}


def test_msrun_no_affinity_fallback_average_distribution():
    t = atlas800()
    plan = planners.plan(t, "msrun-auto", affinity=False, devices=[0, 1])
    assert mains(plan) == {"device0": "0-95", "device1": "96-191"}


def test_modules_layout_and_scheduler():
    t = synthetic("pack:1 numa:2 core:32 pu:1", gpu_nodes=[0, 1])
    plan = planners.plan(t, "msrun-auto", modules=(("runtime", 4, 8), ("minddata", 9, 12), ("main", 13, 19)),
                         scheduler_range=(20, 23), scheduler_base="global")
    data = plan.to_json()
    assert data["bind_cpu"] == {
        "device0": {"runtime": "4-8", "minddata": "9-12", "main": "13-19"},
        "device1": {"runtime": "36-40", "minddata": "41-44", "main": "45-51"},
        "scheduler": {"main": "20-23"},
    }
    assert data["bind_memory"] == {"device0": 0, "device1": 1}
    with pytest.raises(UsageError, match=r"device0: cpu list length 32 is less than required index 40 for main"):
        planners.plan(t, "msrun-auto", modules=(("main", 13, 40),))


# ---- locality: memory-only nodes, cgroups --------------------------------------------------------
def test_device_on_memory_only_node_planned_on_nearest_cpu_node():
    """GH200/GB200: a GPU's HBM is a CPU-less NUMA node; its processes go to the nearest node with
    CPUs by distance, and memory is bound there, never to a CPU-less node."""
    t = synthetic("pack:4 numa:1 core:18 pu:1", gpus_per_numa=1, gpu_memory_nodes=True)
    assert [d.numa_node for d in t.devices] == [4, 5, 6, 7]
    plan = planners.plan(t, "node")
    assert mains(plan) == {"device0": "0-17", "device1": "18-35", "device2": "36-53", "device3": "54-71"}
    assert memory(plan) == {"device0": 0, "device1": 1, "device2": 2, "device3": 3}
    numa = planners.plan(t, "msrun-auto", msrun_bind="numa").to_json()
    assert numa["bind_cpu"] == {"device0": 0, "device1": 1, "device2": 2, "device3": 3}
    text = explain(t, plan)
    assert "4>0" in text  # device node 4 (HBM) planned on node 0, and a note says so
    assert ("note: NODE 4>0: device 0's node 4 has no allowed CPUs (memory-only, or outside the cgroup); "
            "planned on the nearest node with them, 0") in text.splitlines()


def test_explain_says_what_a_device_without_a_node_means():
    # the captured H200 VM: one node, the GPU's sysfs numa_node -1
    t = from_nodes(["0-15"], gpu_nodes=[0])
    t = dataclasses.replace(t, devices=tuple(dataclasses.replace(d, numa_node=None) for d in t.devices))
    lines = explain(t, planners.plan(t, "node")).splitlines()
    assert lines[2].split()[3] == "?>0"
    assert ("note: NODE ?>0: sysfs gives device 0 no NUMA node (numa_node -1, as on one-node machines and most "
            "VMs); planned on node 0, that of its local CPUs (the first node when they are unknown)") in lines


def test_only_allowed_cpus_and_nodes():
    # the cgroup allows node 0 and half of node 1; GPU1's node 2 is not allowed at all
    t = synthetic("pack:1 numa:3 core:4 pu:1", gpu_nodes=[0, 1, 2], allowed="0-5", allowed_nodes="0-1")
    plan = planners.plan(t, "node")
    assert mains(plan) == {"device0": "0-3", "device1": "4-5", "device2": "0-3"}
    assert memory(plan) == {"device0": 0, "device1": 1, "device2": 0}
    assert any("device 2" in w and "not allowed" in w for w in plan.warnings)


def test_explain_reads_well_on_dgx_a100():
    t = dgx_a100()
    text = explain(t, planners.plan(t, "exclusive"))
    lines = text.splitlines()
    assert lines[0].startswith("mode exclusive: 8 processes on 2 packages, 8 NUMA nodes, 128 cores, 256 PUs, 8 GPUs")
    assert lines[1].split() == ["RANK", "KEY", "DEVICE", "NODE", "CPUS", "CORES", "L3", "MEM", "LOCAL"]
    assert lines[2].split() == ["0", "device0", "0", "3", "48-55,176-183", "8", "(16", "PUs)", "L3#12-13", "3",
                                "yes"]
    assert "warning" not in text
    # msrun-auto puts half of the processes on remote nodes: said so
    text = explain(t, planners.plan(t, "msrun-auto"))
    assert "warning: device1: CPUs 0-15,128-143 are remote from device 1" in text


def test_explain_warns_about_split_smt_siblings_and_missing_cores():
    t = from_nodes(["0-7"], threads_per_core=2, gpu_nodes=[0, 0])
    plan = planners.plan(t, "msrun-auto", nproc=2, devices=[0, 1])
    assert "SMT" not in explain(t, plan)
    t3 = from_nodes(["0-5"], threads_per_core=2, gpu_nodes=[0, 0])
    plan = planners.plan(t3, "msrun-auto", modules=None, devices=[0, 1])  # 3 PUs each: splits core 2-3
    assert "SMT siblings of core 2-3 are split across processes device0, device1" in explain(t3, plan)
    plan = planners.plan(t, "unique-contiguous", max_physical_cores=3)
    assert "2 physical cores, fewer than the 3 asked" in explain(t, plan)


def test_msrun_bind_numa_moves_a_duplicate_to_the_nearest_free_node():
    """msrun moves a device whose node is taken to the lowest free node, across sockets if need
    be; we take the nearest free node (the same choice when all distances are equal)."""
    plan = planners.plan(dgx_a100(), "msrun-auto", msrun_bind="numa", devices=[4, 5])
    assert plan.to_json()["bind_cpu"] == {"device4": 7, "device5": 4}  # msrun: device5 -> node 0
    assert planners.plan(atlas800(), "msrun-auto", msrun_bind="numa").to_json()["bind_cpu"]["device1"] == 1


def test_gpu_affinity_uses_nvml_socket_scope_when_known():
    import dataclasses

    from topo.cpuset import CpuSet

    t = from_nodes(["0-3", "4-7", "8-11"], gpu_nodes=[0])  # one package: socket = 0-11
    assert mains(planners.plan(t, "all", scope="socket")) == {"device0": "0-11"}
    nvml = t.with_devices([dataclasses.replace(t.devices[0], socket_cpus=CpuSet.parse("0-7"))])
    assert mains(planners.plan(nvml, "all", scope="socket")) == {"device0": "0-7"}


def test_unique_contiguous_unbalanced_leaves_the_remainder_unused():
    """gpu_affinity's grouped[j*cpd:(j+1)*cpd]: a cgroup leaving 51 cores for 4 GPUs gives 12 each and
    3 cores to nobody (interleaved hands the remainder to the lower ranks, as gpu_affinity does)."""
    t = synthetic("pack:1 core:64 pu:1", gpu_nodes=[0, 0, 0, 0], allowed="0-50")
    plan = planners.plan(t, "unique-contiguous", balanced=False)
    assert mains(plan) == {"device0": "0-11", "device1": "12-23", "device2": "24-35", "device3": "36-47"}
    plan = planners.plan(t, "unique-interleaved", balanced=False)
    assert [p.cpus().weight() for p in plan.workers()] == [13, 13, 13, 12]


@pytest.mark.parametrize("machine", [dgx_a100, atlas800,
                                     lambda: synthetic("pack:1 numa:4 core:8 pu:1", gpu_nodes=[0, 0, 0, 2, 2])])
def test_msrun_auto_memory_is_the_node_bind_numa_assigns(machine):
    """msrun-auto with memory numa is `msrun --bind_core=True --bind_numa=True`: numactl --membind gets
    the node --bind_numa=True gives the device (its own node unless taken, then a free one)."""
    t = machine()
    cores = planners.plan(t, "msrun-auto")
    nodes = planners.plan(t, "msrun-auto", msrun_bind="numa")
    assert memory(cores) == {p.key: p.cpu_nodes for p in nodes.workers()}
    assert len(set(memory(cores).values())) > len({d.numa_node for d in t.devices})  # some moved
