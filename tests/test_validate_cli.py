"""`topo validate FILE`: every problem with its JSON path and a fix, exit 1."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from topo.planners.bindcheck import validate_bind
from topo.cli import main
from topo.synthetic import synthetic


@pytest.fixture
def machine(tmp_path):
    # 2 nodes: 0 = CPUs 0-7, 1 = 8-15; the cgroup allows CPUs 0-11 and node 0 only; node 2 is HBM
    t = synthetic("pack:1 numa:2 core:8 pu:1", gpu_nodes=[0, 1], gpu_memory_nodes=False,
                  allowed="0-11", allowed_nodes="0")
    path = tmp_path / "topo.json"
    path.write_text(json.dumps(t.to_dict()))
    return t, str(path)


def write(tmp_path, data, name="bind.json"):
    p = tmp_path / name
    p.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(p)


def test_every_problem_listed_with_path_and_fix(machine, tmp_path):
    t, topo_file = machine
    data = {
        "bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa"},
        "bind_cpu": {
            "device0": {"main": "0-3", "runtime": "3-1"},
            "device1": {"main": "2-5"},
            "device2": {"main": "10-13"},
            "gpu3": {"main": "0"},
            "scheduler": {"main": "1,,2"},
        },
        "bind_memory": {"device0": 0, "device1": 1, "device2": 7},
    }
    f = write(tmp_path, data)
    result = CliRunner().invoke(main, ["validate", f, "--topology", topo_file])
    assert result.exit_code == 1
    out = result.output
    # overlapping main sets are a warning: msrun runs such a file, it only costs speed
    assert out.startswith(f"{f}: 6 problems, 1 warning\n")
    for path, text in [
        ("bind_cpu.device0.runtime", "CPU range '3-1' start should not exceed end."),
        ("bind_cpu.gpu3", "Invalid key 'gpu3'. Only 'deviceX', 'device_X' (where X is a number), and 'scheduler'"),
        ("bind_cpu.scheduler.main", "CPU range '1,,2' is invalid due to empty segment."),
        ("bind_cpu.device2.main", "CPUs 12-13 are not allowed by the cgroup"),
        ("bind_memory.device1", "NUMA id 1 in 1 for device1 is not available: not allowed by the cgroup"),
        ("bind_memory.device2", "NUMA id 7 in 7 for device2 is not available: no such NUMA node."),
        ("bind_cpu.device1.main", "warning: main CPUs 2-3 of device1 overlap those of device0."),
    ]:
        assert any(line.startswith(f"  {path}: ") and text in line for line in out.splitlines()), (path, out)
    assert out.count("    fix: ") == 7


def test_warnings_alone_pass(machine, tmp_path):
    _, topo_file = machine
    data = {"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "none", "extra": 1},
            "bind_cpu": {"device0": {"main": "0-1", "bogus": "2"}, "device1": {"main": "1-2"}},
            "comment": "msrun ignores this"}
    result = CliRunner().invoke(main, ["validate", write(tmp_path, data), "--topology", topo_file])
    assert result.exit_code == 0, result.output
    assert ": ok (2 processes), 4 warnings\n" in result.output
    assert "  comment: warning: unknown top-level key 'comment'." in result.output


def test_cpu_not_present(machine):
    t, _ = machine
    problems = validate_bind({"bind_config": {"bind_cpu_mode": "cpu"}, "bind_cpu": {"device0": {"main": "14-20"}}}, t)
    assert [p.path for p in problems] == ["bind_cpu.device0.main", "bind_cpu.device0.main"]
    assert "CPUs 16-20 are not present" in problems[0].message
    assert "CPUs 14-15 are not allowed" in problems[1].message


def test_numa_cpu_mode_on_memory_only_node(tmp_path):
    t = synthetic("pack:1 numa:1 core:4 pu:1", gpus_per_numa=1, gpu_memory_nodes=True)
    data = {"bind_config": {"bind_cpu_mode": "numa", "bind_memory_mode": "numa"},
            "bind_cpu": {"device0": 1}, "bind_memory": {"device0": 1}}
    problems = validate_bind(data, t)
    # membind to HBM is legal, cpunodebind to it is not
    assert [p.path for p in problems] == ["bind_cpu.device0"]
    assert "memory-only" in problems[0].message and "0" in problems[0].fix


@pytest.mark.parametrize("content,message", [
    ("{oops", "Failed to load bind_numa json file: {f}."),
    ("[]", "bind_numa json file '{f}' should be a json object."),
    ('{"bind_config": {"bind_cpu_mode": "cores"}}', "'bind_cpu_mode' only supports 'cpu'/'numa'/'none'."),
])
def test_unloadable_files(machine, tmp_path, content, message):
    _, topo_file = machine
    f = write(tmp_path, content)
    result = CliRunner().invoke(main, ["validate", f, "--topology", topo_file])
    assert result.exit_code == 1
    assert f"  (file): {message.format(f=f)}" in result.output


def test_missing_file(tmp_path):
    f = str(tmp_path / "none.json")
    result = CliRunner().invoke(main, ["validate", f])
    assert result.exit_code == 1
    assert f"bind_numa json file '{f}' does not exist." in result.output


def test_our_shared_mode_files_validate(machine, tmp_path):
    t, topo_file = machine
    out = tmp_path / "node.json"
    assert CliRunner().invoke(main, ["plan", "--mode", "node", "--topology", topo_file, "-o", str(out)]).exit_code == 0
    assert CliRunner().invoke(main, ["validate", str(out), "--topology", topo_file]).exit_code == 0
    # the same file without our notes: the overlap is reported
    data = json.loads(out.read_text())
    del data["topo"]
    f = write(tmp_path, data, "bare.json")
    assert "overlap" in CliRunner().invoke(main, ["validate", f, "--topology", topo_file]).output


def test_msdoc_examples_validate_against_a_machine_that_has_them(tmp_path):
    import test_bind_json

    t = synthetic("pack:1 numa:5 core:10 pu:1")  # CPUs 0-49, nodes 0-4
    for data, _ in test_bind_json.DOC_EXAMPLES:
        assert validate_bind(data, t) == [], data
