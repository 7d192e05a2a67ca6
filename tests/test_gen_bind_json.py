"""tools/gen_bind_json.py: MindSpore's options, defaults, messages and its hand-derived example."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from topo.planners.bindcheck import validate_bind
from topo.synthetic import synthetic

TOOLS = Path(__file__).parent.parent / "tools"
sys.path.insert(0, str(TOOLS))
import gen_bind_json  # noqa: E402


def two_nodes():
    # MindSpore's script worked by hand on a host with cpuset 0-63, node0 0-31, node1 32-63, no NPU found
    return synthetic("pack:2 core:32 pu:1")


def run(tmp_path, args, topology, capsys):
    out = tmp_path / "bind.json"
    rc = gen_bind_json.main([*args, "-o", str(out)], topology=topology)
    err = capsys.readouterr().err
    return rc, (json.loads(out.read_text()) if rc == 0 else None), err


def test_hand_derived_example(tmp_path, capsys):
    rc, data, err = run(tmp_path, ["--device-count", "2"], two_nodes(), capsys)
    assert rc == 0
    assert data["bind_config"] == {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa", "actor_thread_fix_bind": True}
    assert data["bind_cpu"] == {
        "device0": {"runtime": "4-8", "minddata": "9-12", "main": "13-19"},
        "device1": {"runtime": "36-40", "minddata": "41-44", "main": "45-51"},
        "scheduler": {"main": "20-23"},
    }
    assert list(data["bind_cpu"]["device0"]) == ["runtime", "minddata", "main"]
    assert data["bind_memory"] == {"device0": 0, "device1": 1}
    assert "free CPU pool insufficient, using global available CPUs." in err
    assert f"Bind JSON generated: {tmp_path / 'bind.json'}" in err
    assert validate_bind(data, two_nodes()) == []


def test_same_as_topo_plan(tmp_path, capsys):
    from topo import planners
    from topo.planners.core import Job

    t = synthetic("pack:2 numa:2 core:24 pu:1", gpus_per_numa=1, device_kind="npu", vendor="huawei")
    rc, data, _ = run(tmp_path, ["--pynative-range", "0-3", "--scheduler-base", "device0"], t, capsys)
    assert rc == 0
    plan = planners.plan(t, "msrun-auto", job=Job((0, 1, 2, 3)), spread_nodes=True, actor_thread_fix_bind=True,
                         modules=(("runtime", 4, 8), ("minddata", 9, 12), ("main", 13, 19), ("pynative", 0, 3)),
                         scheduler_range=(20, 23), scheduler_base="device0")
    assert data == plan.to_json()
    assert data["bind_cpu"]["device2"] == {"runtime": "52-56", "minddata": "57-60", "main": "61-67",
                                           "pynative": "48-51"}
    assert data["bind_cpu"]["scheduler"] == {"main": "20-23"}  # device0's positions 20-23
    assert data["bind_memory"] == {"device0": 0, "device1": 1, "device2": 2, "device3": 3}


def test_devices_sharing_a_node_move_to_free_nodes(tmp_path, capsys):
    # two NPUs on node 0 of four nodes: the second moves to the first device-less node (1)
    t = synthetic("pack:1 numa:4 core:24 pu:1", gpu_nodes=[0, 0, 2], device_kind="npu", vendor="huawei")
    rc, data, _ = run(tmp_path, [], t, capsys)
    assert rc == 0
    assert data["bind_memory"] == {"device0": 0, "device1": 1, "device2": 2}
    assert data["bind_cpu"]["device1"]["runtime"] == "28-32"


def test_more_devices_than_nodes_share_nodes(tmp_path, capsys):
    """MindSpore: --device-count 8 on a 4-NUMA host fails ("not enough NUMA nodes"); we share."""
    t = synthetic("pack:1 numa:4 core:48 pu:1")
    rc, data, _ = run(tmp_path, ["--device-count", "8"], t, capsys)
    assert rc == 0
    assert data["bind_memory"] == {f"device{i}": i % 4 for i in range(8)}
    assert data["bind_cpu"]["device4"]["runtime"] == "28-32"  # the second half of node 0


@pytest.mark.parametrize("args,message", [
    (["--device-ids", ","], "ERROR: --device-ids provided but empty."),
    # int() took ARABIC-INDIC ONE as 1 and "1_0" as 10, and "²" was a ValueError's message
    (["--device-ids", "0,\u0661"], "ERROR: --device-ids: malformed cpulist '0,\u0661': bad element '\u0661'"),
    (["--device-ids", "1_0"], "ERROR: --device-ids: malformed cpulist '1_0'"),
    (["--device-ids", "\u00b2"], "ERROR: --device-ids: malformed cpulist '\u00b2'"),
    (["--device-ids", "99999999999"], "ERROR: --device-ids: malformed cpulist '99999999999': id in"),
    (["--device-count", "0"], "ERROR: --device-count must be >= 1"),
    (["--main-range", "13"], "ERROR: main-range must be in 'start-end' format, got '13'."),
    (["--runtime-range", "8-4"], "ERROR: runtime-range start must be <= end, got '8-4'."),
    (["--device-count", "4"], "ERROR: device0: cpu list length 16 is less than required index 19 for main"),
    ([], "ERROR: Failed to detect devices; use --device-ids or --device-count."),
])
def test_errors(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    rc, _, err = run(tmp_path, args, two_nodes(), capsys)
    assert rc == 1
    assert err.strip().splitlines()[-1].startswith(message)


def test_device_ids_take_ranges_and_counts_ascii_digits(tmp_path, capsys, monkeypatch):
    rc, data, _ = run(tmp_path, ["--device-ids", " 1 , 0 "], two_nodes(), capsys)
    assert rc == 0 and list(data["bind_memory"]) == ["device0", "device1"]
    rc, data, _ = run(tmp_path, ["--device-ids", "0-1"], two_nodes(), capsys)
    assert rc == 0 and list(data["bind_memory"]) == ["device0", "device1"]
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,\u0661")
    rc, _, err = run(tmp_path, [], two_nodes(), capsys)
    assert rc == 1 and err.strip().splitlines()[-1] == (
        "ERROR: ASCEND_RT_VISIBLE_DEVICES: malformed cpulist '0,\u0661': bad element '\u0661'")
    for flag in ("--device-count", "--indent"):
        with pytest.raises(SystemExit) as exit_:
            gen_bind_json.build_parser().parse_args([flag, "\u0661"])
        assert exit_.value.code == 2
        assert f"argument {flag}: '\u0661' is not a whole number (ASCII digits)" in capsys.readouterr().err


def test_ascend_rt_visible_devices_fallback(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "1,0")
    rc, data, err = run(tmp_path, [], two_nodes(), capsys)
    assert rc == 0 and list(data["bind_memory"]) == ["device0", "device1"]
    assert "npu-smi unavailable; using ASCEND_RT_VISIBLE_DEVICES for device ids." in err


def test_defaults_and_help():
    args = gen_bind_json.build_parser().parse_args([])
    assert (args.output, args.device_ids, args.device_count, args.indent) == ("bind_config.json", "", None, 2)
    assert (args.runtime_range, args.minddata_range, args.main_range, args.pynative_range) == ("4-8", "9-12", "13-19", "")
    assert (args.scheduler_range, args.scheduler_base) == ("20-23", "free")


def test_runs_as_a_script(tmp_path, hwloc_roots):
    root = hwloc_roots.root("16em64t-4s2c2t.tar.bz2")
    out = tmp_path / "b.json"
    proc = subprocess.run([sys.executable, str(TOOLS / "gen_bind_json.py"), "--device-count", "1",
                           "--runtime-range", "0-1", "--minddata-range", "2-3", "--main-range", "4-7",
                           "--scheduler-range", "0-1", "--indent", "0", "-o", str(out)], capture_output=True, text=True,
                          env={"TOPO_ROOT": str(root), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert "Bind JSON generated" in proc.stderr
    assert json.loads(out.read_text())["bind_cpu"]["device0"]["main"]
