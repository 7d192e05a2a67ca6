"""`priority_cores`: every rank's first CPU on a priority core (the most efficient CPU kind) of
its home, a distinct one per rank, on a generated DGX B300-like host (2 packages, priority cores
0-1 of each, SMT2), through `topo plan --priority-cores` and `set_affinity(priority_cores=True)`."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace

import pytest
from click.testing import CliRunner

import machines_2026
from sysfs_builder import Machine, build
from topo import planners
from topo.cli import main
from topo.cpuset import CpuSet
from topo.discovery import discover
from topo.launcher import affinity
from topo.model import Device

PRIORITY = CpuSet.parse("0-1,8-9,16-17,24-25")


@pytest.fixture(scope="module")
def b300(tmp_path_factory):
    t = discover(build(tmp_path_factory.mktemp("b300"), machines_2026.priority_cores(), "b300"))
    gpus = [Device("gpu", "nvidia", g, f"0000:{0x10 + g:02x}:00.0", g // 2, t.numa_node(g // 2).cpuset)
            for g in range(4)]  # two GPUs per package
    return replace(t, devices=tuple(gpus))


@pytest.mark.parametrize("mode", ["node", "socket", "all", "unique-contiguous", "unique-interleaved", "exclusive",
                                  "single-unique", "core-complex"])
def test_each_rank_first_cpu_is_its_own_priority_core(b300, mode):
    plan = planners.plan(b300, mode, priority_cores=True)
    firsts = plan.meta["priority_cores"]
    assert sorted(firsts) == [f"device{g}" for g in range(4)]
    assert not [w for w in plan.warnings if "priority" in w]
    assert len({f for f in firsts.values()}) == 4  # fairly: one each
    for p in plan.workers():
        first = firsts[p.key]
        home = b300.numa_node(int(p.key.removeprefix("device")) // 2).cpuset
        assert first in PRIORITY & home and first in p.cpus("main")
    unique = mode not in ("node", "socket", "all", "core-complex")
    if unique:  # the swap keeps the sets disjoint and their sizes
        plain = planners.plan(b300, mode)
        sets = [p.cpus("main") for p in plan.workers()]
        assert all(not a.intersects(b) for i, a in enumerate(sets) for b in sets[i + 1:])
        assert [s.weight() for s in sets] == [p.cpus("main").weight() for p in plain.workers()]


def test_off_by_default_and_said_where_there_is_no_kind(b300, tmp_path):
    assert "priority_cores" not in planners.plan(b300, "unique-contiguous").meta
    plain = discover(build(tmp_path, Machine(packages=1, cores=4), "plain"))
    plan = planners.plan(plain, "node", devices=(), priority_cores=True)
    assert "priority_cores" not in plan.meta
    assert plan.warnings == ("priority cores asked for, but this machine has no CPU kind above the others "
                             "(topo show --cpukinds): each rank's CPUs are as planned",)


def test_more_ranks_than_priority_cores_are_named(b300):
    plan = planners.plan(b300, "unique-contiguous", devices=(), nproc=6, priority_cores=True)
    assert len(plan.meta["priority_cores"]) == 4
    assert plan.warnings == ("no priority core left in the home of device2, device5: their first CPU is an ordinary core",)


def test_topo_plan_and_set_affinity_take_it(b300, monkeypatch):
    monkeypatch.setattr("topo.discovery.discover", lambda *a, **k: b300)
    result = CliRunner().invoke(main, ["plan", "--mode", "unique-contiguous", "--priority-cores"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["topo"]["priority_cores"] == {"device0": 0, "device1": 1, "device2": 8,
                                                                   "device3": 9}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = [affinity.plan_affinity(b300, r, 4, priority_cores=True, env={}).cpus for r in range(4)]
        plain = [affinity.plan_affinity(b300, r, 4, env={}).cpus for r in range(4)]
    assert all(cpus.intersects(PRIORITY) for cpus in got)
    assert not all(cpus.intersects(PRIORITY) for cpus in plain)


def test_topo_run_takes_it(b300, monkeypatch, tmp_path):
    from topo.launcher.torchrun import plan_run
    from topo.launcher.torchrun_flags import RunConfig

    for var in ("CUDA_VISIBLE_DEVICES", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    script = tmp_path / "train.py"
    script.write_text("")
    here = replace(b300, root="/")  # read as this machine, as topo run binds only there

    def firsts(**flags):
        config = RunConfig(str(script), nproc_per_node=4, numa_binding="unique-contiguous", **flags)
        return [p.binding.cpus for p in plan_run(config, environ={"PATH": ""}, topology=here).processes]

    assert all(cpus.intersects(PRIORITY) for cpus in firsts(priority_cores=True))
    assert not all(cpus.intersects(PRIORITY) for cpus in firsts())


def test_topo_launch_takes_it(b300, tmp_path):
    from topo.errors import UsageError
    from topo.launcher.config import LaunchConfig
    from topo.launcher.job import plan_job

    script = tmp_path / "net.py"
    script.write_text("")
    here = replace(b300, root="/")

    def workers(**flags):
        config = LaunchConfig.from_flags(str(script), worker_num=4, local_worker_num=4, scheduler=False,
                                         bind_core="True", **flags)
        return plan_job(config, environ={"PATH": "", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, topology=here).workers

    # msrun's split gives ranks 0 and 1 the two threads of the same cores (PUs 0 and 16 are one core);
    # with the flag each rank's own priority core comes first in MSRUN_CPU_LIST, where MindSpore binds
    # its main thread
    assert [json.loads(p.env["MSRUN_CPU_LIST"])[0] for p in workers()] == [0, 16, 8, 24]
    assert [json.loads(p.env["MSRUN_CPU_LIST"])[0] for p in workers(priority_cores=True)] == [0, 17, 8, 25]
    with pytest.raises(UsageError, match="--priority-cores places topo's automatic CPU split: add --bind_core=True"):
        LaunchConfig.from_flags(str(script), priority_cores=True)
