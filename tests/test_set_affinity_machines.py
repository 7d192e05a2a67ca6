"""set_affinity's planning part (`launcher.affinity.plan_affinity`) on captured and synthetic machines:
which device a local rank gets under the visible-device variables, how many processes there are,
agreement with `planners.plan` / `topo plan`, and clear errors where gpu_affinity breaks."""

from __future__ import annotations

import sys

import pytest

import machines
from topo import planners
from test_set_affinity_dgx import nvml_of
from topo.launcher.affinity import AffinityError, plan_affinity
from topo.discovery import discover
from topo.synthetic import synthetic

import fake_pynvml  # noqa: E402  (tests/fakes is on sys.path through test_set_affinity_dgx)

PCI = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


@pytest.fixture(scope="module")
def a100(tmp_path_factory):
    """The generated DGX A100 (GPU0/1 on node 3, 2/3 on 1, 4/5 on 7, 6/7 on 5) with NVML answering."""
    m = machines.dgx_a100()
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "pynvml", fake_pynvml)
        fake_pynvml.load(nvml_of(m))
        return discover(machines.build(m, tmp_path_factory.mktemp("dgx-a100")), live_probes=True)


def test_cuda_visible_devices_indices_pick_the_physical_gpus(a100):
    env = {"CUDA_VISIBLE_DEVICES": "4,5"}
    ranks = [plan_affinity(a100, r, memory="bind", env=env) for r in range(2)]
    assert [r.device for r in ranks] == [4, 5]
    with pytest.raises(AffinityError, match=r"device_id=2 should be smaller than nproc_per_node=2 \(one process per "
                                            r"visible GPU"):
        plan_affinity(a100, 2, env=env)  # one process per visible GPU
    # GPU4 and GPU5 share node 7 (cores 112-127): 8 cores each, with their SMT siblings
    assert [str(r.cpus) for r in ranks] == ["112-119,240-247", "120-127,248-255"]
    assert [(r.memory_policy, str(r.memory_nodes)) for r in ranks] == [("bind", "7"), ("bind", "7")]
    # without memory=, the memory is left alone
    assert plan_affinity(a100, 0, env=env).memory_policy is plan_affinity(a100, 0, env=env).memory_nodes is None
    assert plan_affinity(a100, 0, memory="local", env=env).memory_policy == "local"


def test_cuda_visible_devices_order_is_the_rank_order(a100):
    env = {"CUDA_VISIBLE_DEVICES": "6,0"}
    assert [plan_affinity(a100, r, mode="node", env=env).device for r in range(2)] == [6, 0]
    assert str(plan_affinity(a100, 0, mode="node", env=env).cpus) == "80-95,208-223"


def test_uuid_prefixes_and_legacy_mig_names(a100):
    uuids = [d.uuid for d in sorted(a100.devices, key=lambda d: d.index) if d.kind == "gpu"]
    assert plan_affinity(a100, 0, env={"CUDA_VISIBLE_DEVICES": uuids[3][:9]}).device == 3
    env = {"CUDA_VISIBLE_DEVICES": f"MIG-{uuids[5]}/1/0"}  # an instance runs where its GPU sits
    assert plan_affinity(a100, 0, env=env).device == 5
    with pytest.raises(AffinityError, match=r"CUDA_VISIBLE_DEVICES: 'GPU-000' matches 8 GPUs .*give more of the UUID"):
        plan_affinity(a100, 0, env={"CUDA_VISIBLE_DEVICES": "GPU-000"})


def test_a_captured_topology_ignores_this_shell(a100, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert plan_affinity(a100, 0).device == 0 and plan_affinity(a100, 7).device == 7


def test_local_world_size_sets_the_process_count(a100):
    ranks = [plan_affinity(a100, r, env={"LOCAL_WORLD_SIZE": "4"}) for r in range(4)]
    assert [r.device for r in ranks] == [0, 1, 2, 3]
    with pytest.raises(AffinityError, match=r"nproc_per_node=9 \(from LOCAL_WORLD_SIZE\) but 8 GPUs are visible: "
                                            "set_affinity places one process per GPU"):
        plan_affinity(a100, 0, env={"LOCAL_WORLD_SIZE": "9"})
    with pytest.raises(AffinityError, match=r"nproc_per_node=3 but 2 GPUs are visible "
                                            r"\(CUDA_VISIBLE_DEVICES='0,1'\)"):
        plan_affinity(a100, 0, 3, env={"CUDA_VISIBLE_DEVICES": "0,1"})
    with pytest.raises(AffinityError, match=r"device_id=2 should be smaller than nproc_per_node=2 "
                                            r"\(one process per visible GPU \(CUDA_VISIBLE_DEVICES='0,1'\)\)"):
        plan_affinity(a100, 2, env={"CUDA_VISIBLE_DEVICES": "0,1"})


@pytest.mark.parametrize("mode", sorted(planners.modes()))
@pytest.mark.parametrize("scope", ["node", "socket"])
def test_agrees_with_topo_plan_for_every_mode(a100, mode, scope):
    env = {"CUDA_VISIBLE_DEVICES": "2,3,4,5"}
    plan = planners.plan(a100, mode, devices=(2, 3, 4, 5), scope=scope)
    for rank, device in enumerate((2, 3, 4, 5)):
        mine = plan_affinity(a100, rank, mode=mode, scope=scope, memory="preferred", env=env)
        theirs = plan.get(f"device{device}")
        assert mine.device == device
        assert mine.cpus == theirs.cpus("main")
        assert mine.memory_nodes == theirs.memory_nodes


def test_unique_modes_give_disjoint_sets_on_the_whole_machine(a100):
    for mode in ("unique_contiguous", "unique_interleaved", "single_unique", "exclusive", "msrun-auto"):
        sets = [plan_affinity(a100, r, mode=mode, env={}).cpus for r in range(8)]
        for a, b in zip(sets, sets[1:]):
            assert not a & b, mode


def test_npus_follow_ascend_rt_visible_devices_sorted_as_msrun_does():
    t = synthetic("pack:2 numa:2 l3:1 core:12 pu:1", gpus_per_numa=2, device_kind="npu", vendor="huawei")
    env = {"ASCEND_RT_VISIBLE_DEVICES": "3,1"}
    ranks = [plan_affinity(t, r, mode="exclusive", env=env) for r in range(2)]
    assert [r.device for r in ranks] == [1, 3]
    with pytest.raises(AffinityError, match="ASCEND_RT_VISIBLE_DEVICES=3,9 names NPU 9"):
        plan_affinity(t, 0, env={"ASCEND_RT_VISIBLE_DEVICES": "3,9"})


def test_cpu_only_machine_splits_the_allowed_cpus_as_devices_none():
    t = synthetic("pack:2 numa:1 l3:1 core:4 pu:2")
    assert plan_affinity(t, 1, env={}).cpus  # one process per NUMA node: ranks 0 and 1
    for n in (2, 3, 4):
        plan = planners.plan(t, "unique-contiguous", devices=(), nproc=n)
        ranks = [plan_affinity(t, r, env={"LOCAL_WORLD_SIZE": str(n)}) for r in range(n)]
        assert [r.device for r in ranks] == [None] * n
        assert [r.cpus for r in ranks] == [plan.get(f"device{r}").cpus("main") for r in range(n)]
        assert all(r.cpus for r in ranks) and not any(a.cpus & b.cpus for a, b in zip(ranks, ranks[1:]))
    with pytest.raises(AffinityError, match=r"device_id=2 should be smaller than nproc_per_node=2 \(one process per "
                                            "NUMA node: this machine has no accelerator\\)"):
        plan_affinity(t, 2, env={})


def test_where_gpu_affinity_breaks_topo_says_why():
    """gpu_affinity raises IndexError when GPUs outnumber cores in single_unique, and crashes in
    sched_setaffinity when a GPU has no CPU affinity; topo plans or says what to change."""
    three_on_two = synthetic("pack:1 numa:1 core:2 pu:1", gpus_per_numa=3)
    with pytest.raises(AffinityError, match="single-unique needs one physical core per process, but 3 processes "
                                            "share 2 allowed cores; use mode single"):
        plan_affinity(three_on_two, 0, mode="single_unique", env=PCI)
    assert str(plan_affinity(three_on_two, 2, mode="single", env=PCI).cpus) == "0"
    # a GPU without NUMA information is placed on the first node, with a warning
    from dataclasses import replace

    t = synthetic("pack:2 numa:2 l3:1 core:4 pu:1", gpus_per_numa=1)
    lost = replace(t, devices=tuple(replace(d, numa_node=None, local_cpus=type(d.local_cpus)())
                                    if d.index == 1 else d for d in t.devices))
    with pytest.warns(UserWarning, match="no NUMA node or local CPUs known"):
        got = plan_affinity(lost, 1, mode="node", env=PCI)
    assert got.cpus


def test_a_plug_in_mode_that_binds_whole_nodes(monkeypatch):
    """A plug-in planner may bind NUMA nodes (bind_cpu_mode "numa"): the rank gets its nodes' allowed
    CPUs, and its memory on them. One that leaves a rank out is an error naming the rank."""
    from topo.planners.bindplan import BindPlan, ProcessBinding

    def by_node(topology, job, options):
        nodes = range(min(job.nproc, len(topology.numa_nodes)))  # one process per node, at most
        return BindPlan.build([ProcessBinding(job.key(r), cpu_nodes=r, memory=r) for r in nodes], cpu_mode="numa")

    t = synthetic("pack:2 numa:1 core:4 pu:1", allowed="0-6")  # node 0: CPUs 0-3, node 1: 4-7 (7 not allowed)
    monkeypatch.setattr(planners, "_registry", {**planners.BUILTIN, "by-node": planners.Planner("by-node", "", by_node)})
    got = plan_affinity(t, 1, 2, mode="by-node", memory="bind", env={})
    assert (str(got.cpus), str(got.memory_nodes)) == ("4-6", "1")
    with pytest.raises(AffinityError, match=r"^mode 'by-node' planned no binding for device2 \(local rank 2\)"):
        plan_affinity(t, 0, 3, mode="by-node", env={})
