"""topo launch without starting anything: msrun's option values, ranks, environment per role, log
names and the numactl / taskset argv per process."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket

import pytest

from topo.launcher.binding import bind_prefix, device_ids
from topo.launcher.config import LaunchConfig
from topo.launcher.job import MANAGED_VARS, plan_job
from topo.launcher.config import parse_bind_core, parse_bind_numa, parse_literal_bool, parse_tail_worker_log
from topo.launcher.procgroup import exec_argv
from topo.errors import UsageError
from topo.synthetic import synthetic


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "net.py"
    path.write_text("pass\n")
    return str(path)


def live(desc: str, **kw):
    """A synthetic machine the launcher treats as this one (binding refuses other roots)."""
    return dataclasses.replace(synthetic(desc, **kw), root="/")


# 2 packages x 2 NUMA nodes x 8 cores: node n owns CPUs 8n..8n+7; 4 GPUs, one per node
BIG = live("pack:2 numa:2 core:8 pu:1", gpus_per_numa=1)
# the synthetic GPUs have distinct names, i.e. "different models" to CUDA's FASTEST_FIRST order
BUS_ORDER = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def plan(script, *, environ=None, topology=BIG, **kw):
    kw.setdefault("python", "python")
    return plan_job(LaunchConfig.from_flags(script=script, **kw), environ={**BUS_ORDER, **(environ or {})},
                    topology=topology)


def argvs(p):
    return {proc.name: list(proc.argv) for proc in p.processes}


# ------------------------------------------------------------------ option values
@pytest.mark.parametrize("text, value", [("True", True), ("False", False), ("1", True), ("0", False),
                                         ("true", True)])
def test_join_accepts_msrun_literals(text, value):
    assert parse_literal_bool(text, "--join") is value


def test_join_rejects_other_words():
    with pytest.raises(UsageError, match="--join='yes': expected True or False"):
        parse_literal_bool("yes", "--join")


def test_tail_worker_log_values():
    assert parse_tail_worker_log("-1") is None
    assert parse_tail_worker_log("0,3") == (0, 3)
    with pytest.raises(UsageError, match="'abc' is not a rank"):
        parse_tail_worker_log("abc")


def test_bind_core_table_is_parsed_like_msrun():
    assert parse_bind_core("TRUE") is True
    table = parse_bind_core('{"device0": [" 0-3 ", "8"], "scheduler": []}')
    assert table.table and [p.key for p in table.plan.processes] == ["device0", "scheduler"]
    assert table.plan.get("device0").main == "0-3,8"  # joined with commas, as msrun joins them
    assert table.plan.get("scheduler").main is None


def where_json_breaks(text: str) -> str:
    """A pattern of json's account of where `text` breaks, in topo's words (json's own vary with Python's version)."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return re.escape(f"{exc.msg} at line {exc.lineno} column {exc.colno} (character {exc.pos})")
    raise AssertionError(f"{text!r} is JSON")


@pytest.mark.parametrize("text, message", [
    ('{"device0":["1"', "not True, False or a JSON object"),
    ('{"device0": ["0-1"],}', "not True, False or a JSON object: "  # issue 18: where the JSON breaks
                              + where_json_breaks('{"device0": ["0-1"],}')),
    ('{"gpu0":["1"]}', "key 'gpu0' must be 'scheduler' or 'deviceX'"),
    ('{"device0":"1"}', "value of device0 should be a list"),
    ('{"device0":["0-3,5"]}', r"split '0-3,5' into \[\"0-3\", \"5\"\]"),
    ('{"device0":[1]}', "CPU 1 of device0 should be a string"),
    ("1", "should be True, False or a JSON object, not int"),
])
def test_bind_core_rejects_what_msrun_rejects(text, message):
    with pytest.raises(UsageError, match=message):
        parse_bind_core(text)


def test_bind_numa_file_errors(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        parse_bind_numa(str(tmp_path / "nope.json"))
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(UsageError, match="Failed to load bind_numa json file"):
        parse_bind_numa(str(broken))
    bad_mode = tmp_path / "core.json"
    bad_mode.write_text('{"bind_config": {"bind_cpu_mode": "core"}}')
    with pytest.raises(UsageError, match="'bind_cpu_mode' only supports 'cpu'/'numa'/'none'"):
        parse_bind_numa(str(bad_mode))


def test_bind_numa_file_carries_path_and_hash(tmp_path):
    import hashlib

    text = '{"bind_config": {"bind_cpu_mode": "cpu"}, "bind_cpu": {"device0": {"main": "0"}}}'
    f = tmp_path / "b.json"
    f.write_text(text)
    loaded = parse_bind_numa(str(f))
    assert loaded.path == str(f)
    assert loaded.sha256 == hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------ config checks
@pytest.mark.parametrize("kw, message", [
    ({"worker_num": 0}, "--worker_num must be greater than 0"),
    ({"worker_num": 2, "local_worker_num": 3}, "--local_worker_num=3 exceeds --worker_num=2"),
    ({"master_port": 70000}, "--master_port=70000 is outside 1-65535"),
    ({"master_port": 0}, "--master_port=0 is outside 1-65535"),
    ({"worker_num": 4, "local_worker_num": 2, "node_rank": 2}, "gives ranks up to 5, beyond --worker_num=4"),
    ({"grace_period": -1}, r"--grace-period=-1 must be 0 to 604800 seconds"),
    ({"grace_period": float("nan")}, r"--grace-period=nan must be 0 to 604800 seconds"),
    ({"grace_period": float("inf")}, r"--grace-period=inf must be 0 to 604800 seconds"),
])
def test_config_rejects_bad_counts_and_ports(kw, message):
    with pytest.raises(UsageError, match=message):
        LaunchConfig.from_flags(script="x.py", **kw)


def test_missing_script_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="script does not exist, 'nope.py'"):
        plan_job(LaunchConfig.from_flags(script="nope.py"), environ={})


def test_unresolvable_master_is_a_usage_error(script):
    with pytest.raises(UsageError, match="does not resolve"):
        plan(script, master_addr="no.such.host.invalid")


# ------------------------------------------------------------------ processes, ranks, env
def test_single_node_env_per_role(script):
    p = plan(script, worker_num=2, local_worker_num=2, master_port=9000, cluster_time_out=30)
    sched, w0, w1 = p.processes
    assert sched.name == "scheduler" and sched.env == {
        "MS_ROLE": "MS_SCHED", "MS_SCHED_HOST": "127.0.0.1", "MS_SCHED_PORT": "9000", "MS_TOPO_TIMEOUT": "30",
        "MS_WORKER_NUM": "2", "RANK_SIZE": "2", "RANK_ID": "0", "OMP_NUM_THREADS": "1"}
    assert w1.env == {
        "MS_ROLE": "MS_WORKER", "MS_SCHED_HOST": "127.0.0.1", "MS_SCHED_PORT": "9000", "MS_TOPO_TIMEOUT": "30",
        "MS_WORKER_NUM": "2", "RANK_SIZE": "2", "RANK_ID": "1", "MS_NODE_ID": "1", "DEVICE_ID": "1",
        "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
        "GROUP_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "9000", "OMP_NUM_THREADS": "1"}
    assert (w0.rank, w0.local_rank, w1.rank) == (0, 0, 1)
    assert [os.path.basename(x.log_path) for x in p.processes] == ["scheduler.log", "worker_0.log", "worker_1.log"]


def test_second_node_ranks_and_logs(script):
    p = plan(script, worker_num=4, local_worker_num=2, node_rank=1)
    assert [x.name for x in p.processes] == ["rank 2", "rank 3"]  # not the master node: no scheduler
    w = p.processes[1]
    assert {k: w.env[k] for k in ("RANK_ID", "MS_NODE_ID", "DEVICE_ID", "RANK", "LOCAL_RANK", "GROUP_RANK",
                                  "GROUP_WORLD_SIZE", "WORLD_SIZE", "LOCAL_WORLD_SIZE")} == {
        "RANK_ID": "3", "MS_NODE_ID": "3", "DEVICE_ID": "1", "RANK": "3", "LOCAL_RANK": "1", "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}
    assert os.path.basename(w.log_path) == "worker_3.log"


def test_unknown_node_rank_leaves_ranks_to_mindspore(script):
    p = plan(script, worker_num=2, local_worker_num=1)
    sched, worker = p.processes
    assert worker.rank is None
    for var in ("RANK_ID", "MS_NODE_ID", "RANK"):  # msrun leaks the scheduler's RANK_ID=0 here
        assert var not in worker.env
    assert any("--node_rank is not set" in w for w in p.warnings)


def test_scheduler_placement(script):
    assert plan(script, worker_num=1, local_worker_num=1).processes[0].name == "scheduler"
    assert [x.name for x in plan(script, worker_num=1, local_worker_num=1, scheduler=False).processes] == ["rank 0"]
    # not an address of this machine: the scheduler runs elsewhere
    remote = plan(script, worker_num=1, local_worker_num=1, master_addr="192.0.2.1")
    assert [x.name for x in remote.processes] == ["rank 0"]
    assert remote.processes[0].env["MS_SCHED_HOST"] == "192.0.2.1"
    forced = plan(script, worker_num=1, local_worker_num=1, master_addr="192.0.2.1", scheduler=True)
    assert forced.processes[0].name == "scheduler"


def test_inherited_launcher_variables_do_not_leak(script):
    outer = {"RANK_ID": "7", "MSRUN_CPU_LIST": "[9]", "RANK": "5", "MASTER_PORT": "1", "PATH": "/bin"}
    p = plan(script, worker_num=2, local_worker_num=1, environ=outer)
    worker = p.processes[-1]
    env = {**p.base_env, **worker.env}
    assert "RANK_ID" not in env and "MSRUN_CPU_LIST" not in env and "RANK" not in env
    assert env["PATH"] == "/bin" and env["MASTER_PORT"] == "8118"
    assert not set(MANAGED_VARS) & set(p.base_env)


def test_omp_num_threads_rules(script):
    assert "OMP_NUM_THREADS" not in plan(script, worker_num=1, local_worker_num=1, scheduler=False).processes[0].env
    assert plan(script, worker_num=1, local_worker_num=1).processes[1].env["OMP_NUM_THREADS"] == "1"
    preset = plan(script, worker_num=2, local_worker_num=2, environ={"OMP_NUM_THREADS": "4"})
    assert all("OMP_NUM_THREADS" not in x.env for x in preset.processes)
    bound = plan(script, worker_num=2, local_worker_num=2, bind_core='{"device0": ["0-5"], "device1": ["8-9"]}')
    assert [x.env.get("OMP_NUM_THREADS") for x in bound.processes] == ["1", "6", "2"]


def test_omp_num_threads_divides_shared_cpus(script):
    """issue 18: ranks sharing CPUs split them: 2 ranks on node 0's 8 CPUs run 4 threads each, not 8."""
    shared = plan(script, worker_num=2, local_worker_num=2, scheduler=False,
                  bind_numa='{"device0": ["0"], "device1": ["0"]}')
    assert [x.env["OMP_NUM_THREADS"] for x in shared.processes] == ["4", "4"]
    partly = plan(script, worker_num=3, local_worker_num=3, scheduler=False,
                  bind_core='{"device0": ["0-5"], "device1": ["4-7"], "device2": ["8-9"]}')
    assert [x.env["OMP_NUM_THREADS"] for x in partly.processes] == ["3", "2", "2"]
    tight = plan(script, worker_num=3, local_worker_num=3, scheduler=False,
                 bind_core='{"device0": ["0"], "device1": ["0"], "device2": ["0"]}')
    assert [x.env["OMP_NUM_THREADS"] for x in tight.processes] == ["1", "1", "1"]  # at least 1


def test_simulation_has_no_cluster(script):
    p = plan(script, worker_num=2, local_worker_num=2, sim_level=1)
    assert [x.name for x in p.processes] == ["rank 0", "rank 1"]
    env = p.processes[1].env
    assert env["MS_SIMULATION_LEVEL"] == "1" and env["RANK_ID"] == "1"
    assert not {"MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_TOPO_TIMEOUT"} & set(env)
    one = plan(script, worker_num=8, local_worker_num=8, sim_level=1, sim_rank_id=3)
    (only,) = one.processes
    assert (only.env["RANK_ID"], only.env["DEVICE_ID"], "MS_NODE_ID" in only.env) == ("3", "0", False)
    from_env = plan(script, worker_num=8, local_worker_num=8, sim_level=1, environ={"RANK_ID": "5"})
    assert [x.env["RANK_ID"] for x in from_env.processes] == ["5"]
    not_a_rank = plan(script, worker_num=2, local_worker_num=2, sim_level=1, environ={"RANK_ID": "\u00b2"})
    assert len(not_a_rank.processes) == 2  # SUPERSCRIPT TWO is no rank (int() raised ValueError on it)


def test_rank_table_file_is_exported(script):
    p = plan(script, worker_num=1, local_worker_num=1, rank_table_file="/x/rt.json")
    assert all(x.env["RANK_TABLE_FILE"] == "/x/rt.json" for x in p.processes)


def test_interpreter_and_script_args(script):
    p = plan(script, worker_num=1, local_worker_num=1, scheduler=False,
             script_args=("--foo", "bar", "--worker_num=3"))
    assert p.processes[0].argv == ("python", script, "--foo", "bar", "--worker_num=3")
    assert plan_job(LaunchConfig.from_flags(script=script, worker_num=1, local_worker_num=1, scheduler=False),
                    environ={}).processes[0].argv[0] == "python"  # from PATH, as msrun
    for interpreter in ("python", "python3", "pytest"):  # msrun runs these as given
        q = plan(interpreter, worker_num=1, local_worker_num=1, scheduler=False, script_args=(script,))
        assert q.processes[0].argv == (interpreter, script)


def test_worker_log_name(script, tmp_path):
    p = plan(script, worker_num=2, local_worker_num=2, log_dir=str(tmp_path / "logs"),
             worker_log_name="w_{ip}_{hostname}")
    names = [os.path.basename(x.log_path) for x in p.processes]
    assert names == ["scheduler.log", f"w_127.0.0.1_{socket.gethostname()}_0.log",
                     f"w_127.0.0.1_{socket.gethostname()}_1.log"]
    assert os.path.dirname(p.processes[0].log_path) == str(tmp_path / "logs")


def test_worker_log_name_takes_the_host_name_literally(script, tmp_path, monkeypatch):
    monkeypatch.setattr(socket, "gethostname", lambda: "node\\1\\g<0>")  # re.sub's group references
    p = plan(script, worker_num=1, local_worker_num=1, scheduler=False, log_dir=str(tmp_path),
             worker_log_name="{hostname}_w")
    assert os.path.basename(p.processes[0].log_path) == "node\\1\\g<0>_w_0.log"


def test_tail_worker_log_picks_ranks(script):
    p = plan(script, worker_num=2, local_worker_num=2, join=True, tail_worker_log="1,5")
    assert [x.tail for x in p.processes] == [False, False, True]
    assert any("rank(s) 5 do not run on this node" in w for w in p.warnings)
    assert not any(x.tail for x in plan(script, worker_num=2, local_worker_num=2).processes)  # join=False


# ------------------------------------------------------------------ binding prefixes
def test_bind_prefix_rule():
    assert bind_prefix(cpus="0-9", memory="0") == ("numactl", "--membind", "0", "--physcpubind", "0-9")
    assert bind_prefix(cpu_nodes="1,2", memory="1,2") == ("numactl", "--membind", "1,2", "--cpunodebind", "1,2")
    assert bind_prefix(cpus="20-29,40-49") == ("taskset", "-c", "20-29,40-49")
    assert bind_prefix(cpu_nodes="0") == ("numactl", "--cpunodebind", "0")
    assert bind_prefix(memory="2-3,4") == ("numactl", "--membind", "2-3,4")
    assert bind_prefix(memory="1", memory_policy="preferred") == ("numactl", "--preferred", "1")
    assert bind_prefix(cpus="0-3", memory="1", memory_policy="preferred") == (
        "numactl", "--preferred", "1", "--physcpubind", "0-3")
    assert bind_prefix() == ()


def test_msrun_table_forms_give_msrun_argv(script):
    """msrun's own outputs for its table forms (run with msrun 2.10), on a 4-node machine."""
    core = '{"scheduler":["0-3"],"device0":["8-11"],"device1":["16-19","24-25"]}'
    numa = '{"scheduler":["0"],"device0":["1,2"],"device1":["3"]}'
    kw = dict(worker_num=2, local_worker_num=2)
    assert argvs(plan(script, bind_core=core, **kw)) == {
        "scheduler": ["taskset", "-c", "0-3", "python", script],
        "rank 0": ["taskset", "-c", "8-11", "python", script],
        "rank 1": ["taskset", "-c", "16-19,24-25", "python", script]}
    assert argvs(plan(script, bind_numa=numa, **kw)) == {
        "scheduler": ["numactl", "--membind", "0", "--cpunodebind", "0", "python", script],
        "rank 0": ["numactl", "--membind", "1,2", "--cpunodebind", "1,2", "python", script],
        "rank 1": ["numactl", "--membind", "3", "--cpunodebind", "3", "python", script]}
    both = plan(script, bind_core=core, bind_numa=numa, **kw)
    assert argvs(both)["rank 1"] == ["numactl", "--membind", "3", "--physcpubind", "16-19,24-25", "python", script]
    assert both.processes[2].binding.cpus.to_list() == "16-19,24-25"


def test_table_is_read_by_position_as_msrun_does(script):
    p = plan(script, worker_num=2, local_worker_num=2, bind_core='{"device1": ["8-9"]}')
    assert all(x.argv[0] == "python" for x in p.processes)  # msrun's documented "wrong example"
    assert any("entry #0 is device1" in w for w in p.warnings)
    assert any("no entry for local rank 1" in w for w in p.warnings)


def test_visible_devices_map_local_ranks_to_device_keys(script):
    assert device_ids(BIG, 2, {**BUS_ORDER, "CUDA_VISIBLE_DEVICES": "2,0"}) == [2, 0]
    assert device_ids(BIG, 6, BUS_ORDER) == [0, 1, 2, 3, 4, 5]  # ranks beyond the GPUs: keyed by local rank
    npus = live("pack:1 numa:2 core:4 pu:1", gpus_per_numa=2, device_kind="npu", vendor="huawei")
    assert device_ids(npus, 2, {"ASCEND_RT_VISIBLE_DEVICES": "3,1"}) == [1, 3]  # sorted, as msrun
    assert device_ids(live("pack:1 core:2 pu:1"), 2, {"CUDA_VISIBLE_DEVICES": "1"}) == [0, 1]  # no GPUs
    p = plan(script, worker_num=1, local_worker_num=1, scheduler=False, environ={"CUDA_VISIBLE_DEVICES": "2"},
             bind_core='{"device2": ["16-23"]}')
    assert p.processes[0].argv[:3] == ("taskset", "-c", "16-23")


def test_unavailable_ids_are_refused_before_start(script):
    with pytest.raises(UsageError, match="--bind_core: CPUs 32-33 of device0 are not available: "
                                         "this machine allows CPUs 0-31"):
        plan(script, worker_num=1, local_worker_num=1, bind_core='{"device0": ["30-33"]}')
    with pytest.raises(UsageError, match="--bind_numa: NUMA 7 of device0 is not available"):
        plan(script, worker_num=1, local_worker_num=1, bind_numa='{"device0": ["7"]}')
    restricted = live("pack:1 numa:2 core:4 pu:1", allowed="0-3", allowed_nodes="0")
    with pytest.raises(UsageError, match="CPU 4 of device0 is not available: this machine allows CPUs 0-3"):
        plan(script, worker_num=1, local_worker_num=1, bind_core='{"device0": ["4"]}', topology=restricted)


def test_binding_refuses_a_topology_of_another_machine(script):
    with pytest.raises(UsageError, match="not this machine"):
        plan(script, worker_num=1, local_worker_num=1, bind_core="True",
             topology=synthetic("pack:1 core:2 pu:1"))


def unified(tmp_path, data):
    path = tmp_path / "bind.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_unified_json_doc_example_1(script, tmp_path):
    """Example 1 of MindSpore's bind JSON documentation: cpu + numa memory, scheduler included."""
    f = unified(tmp_path, {
        "bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa", "actor_thread_fix_bind": True},
        "bind_cpu": {"scheduler": {"main": "28-31"}, "device0": {"main": "0-4", "runtime": "5-7"},
                     "device_1": {"main": "8-12"}},
        "bind_memory": {"device0": 0, "device1": 1, "scheduler": 3}})
    p = plan(script, worker_num=2, local_worker_num=2, bind_numa=f, bind_core="True", script_args=("--a",))
    assert argvs(p) == {
        "scheduler": ["numactl", "--membind", "3", "--physcpubind", "28-31", "python", script, "--a"],
        "rank 0": ["numactl", "--membind", "0", "--physcpubind", "0-4", "python", script, "--a"],
        "rank 1": ["numactl", "--membind", "1", "--physcpubind", "8-12", "python", script, "--a"]}
    assert any("--bind_core is ignored" in w for w in p.warnings)
    for proc in p.processes:
        assert proc.env["MSRUN_BIND_FILE"] == f and len(proc.env["MSRUN_BIND_FILE_HASH"]) == 64
        assert "MSRUN_CPU_LIST" not in proc.env


def test_unified_json_numa_and_memory_only_modes(script, tmp_path):
    numa = unified(tmp_path, {"bind_config": {"bind_cpu_mode": "numa", "bind_memory_mode": "numa"},
                              "bind_cpu": {"device0": 0, "device1": 1}, "bind_memory": {"device0": 0, "scheduler": "2-3"}})
    assert argvs(plan(script, worker_num=2, local_worker_num=2, bind_numa=numa)) == {
        "scheduler": ["numactl", "--membind", "2-3", "python", script],
        "rank 0": ["numactl", "--membind", "0", "--cpunodebind", "0", "python", script],
        "rank 1": ["numactl", "--cpunodebind", "1", "python", script]}
    cpu_only = unified(tmp_path, {"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa"},
                                  "bind_cpu": {"device0": {"main": "0-4"}, "device1": {"runtime": "8-9"}}})
    p = plan(script, worker_num=2, local_worker_num=2, bind_numa=cpu_only)
    assert argvs(p)["rank 0"] == ["taskset", "-c", "0-4", "python", script]
    assert argvs(p)["rank 1"] == ["python", script]  # module-only entries bind threads, not the process


def test_unified_json_checked_against_topology(script, tmp_path):
    f = unified(tmp_path, {"bind_config": {"bind_cpu_mode": "cpu"}, "bind_cpu": {"device0": {"main": "60-70"}}})
    with pytest.raises(UsageError, match=r"bind_cpu\.device0\.main: CPU id 60"):
        plan(script, worker_num=1, local_worker_num=1, bind_numa=f)


def test_auto_forms_use_the_msrun_auto_planner(script):
    p = plan(script, worker_num=4, local_worker_num=4, bind_core="True")
    assert [x.argv[:3] for x in p.workers] == [("taskset", "-c", f"{8 * i}-{8 * i + 7}") for i in range(4)]
    assert p.processes[0].argv[0] == "python"  # True never binds the scheduler
    assert p.workers[1].env["MSRUN_CPU_LIST"] == str(list(range(8, 16)))
    n = plan(script, worker_num=4, local_worker_num=4, bind_numa="True")
    assert [x.argv[:5] for x in n.workers] == [("numactl", "--membind", str(i), "--cpunodebind", str(i))
                                               for i in range(4)]
    assert n.workers[3].env["MSRUN_CPU_LIST"] == str(list(range(24, 32)))


def test_inline_unified_json_sets_no_file_variables(script):
    inline = json.dumps({"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "none"},
                         "bind_cpu": {"device0": {"main": "0-3"}}})
    p = plan(script, worker_num=1, local_worker_num=1, scheduler=False, bind_numa=inline)
    assert p.processes[0].argv[:3] == ("taskset", "-c", "0-3")
    assert "MSRUN_BIND_FILE" not in p.processes[0].env


def test_missing_binding_tool_is_applied_directly(script, tmp_path):
    environ = {"PATH": str(tmp_path)}  # neither numactl nor taskset
    numa = plan(script, worker_num=1, local_worker_num=1, scheduler=False, bind_numa='{"device0": ["0"]}',
                environ=environ).processes[0]
    assert numa.argv == ("numactl", "--membind", "0", "--cpunodebind", "0", "python", script)  # msrun's
    assert exec_argv(numa, numa.binding) == ("python", script)
    assert (sorted(numa.binding.cpus), numa.binding.memory_policy, str(numa.binding.memory_nodes), numa.binding.direct,
            numa.binding.note) == (list(range(8)), "bind", "0", True, "numactl not found")
    core = plan(script, worker_num=1, local_worker_num=1, scheduler=False, bind_core='{"device0": ["0"]}',
                environ=environ).processes[0]
    assert (sorted(core.binding.cpus), core.binding.memory_policy, core.binding.direct, core.binding.note) == (
        [0], None, True, "taskset not found")
    (tmp_path / "taskset").write_text("#!/bin/sh\n")
    (tmp_path / "taskset").chmod(0o755)
    assert plan(script, worker_num=1, local_worker_num=1, scheduler=False, bind_core='{"device0": ["0"]}',
                environ=environ).processes[0].binding.applied_by == "taskset"  # the tool is there: msrun's argv runs


def test_auto_binding_with_too_few_cpus_is_refused(script):
    tiny = live("pack:1 core:2 pu:1")
    with pytest.raises(UsageError, match="2 allowed CPUs for 4 processes"):
        plan(script, worker_num=4, local_worker_num=4, bind_core="True", topology=tiny)


def test_sharers_counts_the_busiest_cpu_of_each_process():
    """Per CPU, so 65536 processes (the bound per node) cost linear time, not 65536 squared."""
    from topo.launcher.environ import sharers
    from topo.binding import Binding
    from topo.cpuset import CpuSet

    many = [Binding(CpuSet([i % 64])) for i in range(65536)]
    assert set(sharers(many)) == {1024}
    mixed = [Binding(CpuSet.parse("0-5")), Binding(CpuSet.parse("4-7")), Binding(CpuSet.parse("8-9")), Binding()]
    assert sharers(mixed) == [2, 2, 1, 1]


def test_launch_config_is_typed_and_from_flags_reads_msruns_text(script):
    """issue 18: no field changes type after construction; msrun's text goes through from_flags."""
    with pytest.raises(TypeError, match="from_flags"):
        LaunchConfig(script, bind_core="True")
    with pytest.raises(TypeError, match="from_flags"):
        LaunchConfig(script, join="True")
    config = LaunchConfig.from_flags(script, join="True", bind_core="True", tail_worker_log="0,3")
    assert (config.join, config.bind_core, config.tail_worker_log) == (True, True, (0, 3))
    assert LaunchConfig(script, bind_numa="bind.json").bind_numa == "bind.json"  # a file: read when planned
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.join = False
