"""The bind model (planners.bindplan), its loader (bindload) and checks (bindcheck): MindSpore's unified
bind JSON, msrun's checks and the prefixes the launcher builds from it (launcher.binding)."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topo.launcher.binding import binding_of
from topo.planners.bindcheck import validate_bind
from topo.planners.bindload import load_bind, load_table, parse_json, plan_from_json
from topo.planners.bindplan import BindPlan, ProcessBinding
from topo.cpuset import CpuSet
from topo.errors import ParseError
from topo.synthetic import synthetic

MACHINE = synthetic("pack:1 numa:5 core:10 pu:1")  # CPUs 0-49, nodes 0-4


def prefixes(plan: BindPlan, keys=("scheduler", "device0", "device1")) -> list[str]:
    return [" ".join(binding_of(plan.get(k), MACHINE, memory_policy=plan.memory_policy).prefix) for k in keys]

# The examples of MindSpore's documentation of the unified bind JSON -> the prefix msrun builds per
# process: scheduler, device0, device1
DOC_EXAMPLES = [
    ({"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa", "actor_thread_fix_bind": True},
      "bind_cpu": {"device0": {"main": "0-4", "runtime": "5-9", "pynative": "10-14", "minddata": "15-19"},
                   "device1": {"main": "20-24", "runtime": "25-29", "pynative": "30-34", "minddata": "35-39"},
                   "scheduler": {"main": "40-45"}},
      "bind_memory": {"device0": 0, "device1": 1, "scheduler": 2}},
     ["numactl --membind 2 --physcpubind 40-45", "numactl --membind 0 --physcpubind 0-4",
      "numactl --membind 1 --physcpubind 20-24"]),
    ({"bind_config": {"bind_cpu_mode": "numa", "bind_memory_mode": "numa"},
      "bind_cpu": {"device0": 0, "device1": 1},
      "bind_memory": {"device0": 0, "device1": 1, "scheduler": "2-3,4"}},
     ["numactl --membind 2-3,4", "numactl --membind 0 --cpunodebind 0", "numactl --membind 1 --cpunodebind 1"]),
    ({"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "none", "actor_thread_fix_bind": False},
      "bind_cpu": {"scheduler": {"main": "40-45"}, "device0": {"main": "0-4", "runtime": "5-9"},
                   "device1": {"main": "20-24"}}},
     ["taskset -c 40-45", "taskset -c 0-4", "taskset -c 20-24"]),
    ({"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa"},
      "bind_cpu": {"device0": {"main": "0-4"}, "device1": {"main": "20-24"}}},
     ["", "taskset -c 0-4", "taskset -c 20-24"]),
    ({"bind_config": {"bind_cpu_mode": "numa", "bind_memory_mode": "none"},
      "bind_cpu": {"device0": 0, "device1": 1}},
     ["", "numactl --cpunodebind 0", "numactl --cpunodebind 1"]),
    ({"bind_config": {"bind_cpu_mode": "none", "bind_memory_mode": "numa"},
      "bind_memory": {"device0": 0, "device1": 1}},
     ["", "numactl --membind 0", "numactl --membind 1"]),
    ({"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "none"},
      "bind_cpu": {"device0": {"runtime": "5-9", "minddata": "15-19"}, "device1": {"runtime": "25-29"}}},
     ["", "", ""]),
]


@pytest.mark.parametrize("data,expected", DOC_EXAMPLES, ids=[f"doc-example-{i + 1}" for i in range(7)])
def test_msdoc_examples_prefixes(data, expected):
    assert validate_bind(data) == []
    plan = plan_from_json(data)
    assert prefixes(plan) == expected
    # and through a JSON round trip the prefixes stay the same
    assert prefixes(plan_from_json(plan.to_json())) == expected


@pytest.mark.parametrize("data", [d for d, _ in DOC_EXAMPLES])
def test_round_trip(data):
    plan = plan_from_json(data)
    assert plan_from_json(plan.to_json()) == plan
    out = plan.to_json()
    assert out["bind_config"] == data["bind_config"]
    for section in ("bind_cpu", "bind_memory"):
        assert out.get(section, {}) == data.get(section, {})


def test_strings_kept_as_written_spaces_removed():
    data = {"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa"},
            "bind_cpu": {"device_3": {"main": " 5-6, 4 "}}, "bind_memory": {"device_3": "1, 0"}}
    p = plan_from_json(data).get("device3")
    assert (p.key, p.main, p.memory) == ("device3", "5-6,4", "1,0")
    assert binding_of(p, MACHINE).prefix == ("numactl", "--membind", "1,0", "--physcpubind", "5-6,4")
    # the sets are parsed once, when the entry is read
    assert p.cpus() == CpuSet.parse("4-6") and p.memory_nodes == CpuSet.parse("0-1")


def test_msrun_range_messages():
    assert list(CpuSet.parse("0-2, 5", msrun=True)) == [0, 1, 2, 5]
    with pytest.raises(ParseError, match=r"^CPU range '3-1' start should not exceed end\.$"):
        CpuSet.parse("3-1", msrun=True)
    with pytest.raises(ParseError, match=r"^CPU range '1,,2' is invalid due to empty segment\.$"):
        CpuSet.parse("1,,2", msrun=True)
    with pytest.raises(ParseError, match=r"^CPU range 'a-2' is invalid\.$"):
        CpuSet.parse("0,a-2", msrun=True)


def test_validate_lists_every_problem_with_paths():
    data = {"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa", "bogus": 1},
            "bind_cpu": {"dev0": {"main": "0"}, "device1": {"main": "3-1"}, "device2": {"main": "1,,2"},
                         "device3": {"main": "0-3"}, "device4": {"main": "2-5", "gpu": "7"},
                         "device5": "0-9"},
            "bind_memory": {"device3": [0]}, "extra": True}
    problems = validate_bind(data)
    paths = [p.path for p in problems]
    assert paths == ["extra", "bind_config.bogus", "bind_cpu.dev0", "bind_cpu.device1.main",
                     "bind_cpu.device2.main", "bind_cpu.device4.gpu", "bind_cpu.device5",
                     "bind_memory.device3", "bind_cpu.device4.main"]
    assert all(p.fix for p in problems)
    assert "overlap" in problems[-1].message
    assert problems[6].message == ("'bind_cpu_mode' is 'cpu', in 'bind_cpu', type of value for device5:0-9 "
                                   "should be dict, but got <class 'str'>.")


def test_validate_bad_modes():
    problems = validate_bind({"bind_config": {"bind_cpu_mode": "CPUS", "bind_memory_mode": 3,
                                              "actor_thread_fix_bind": "true"}})
    assert [p.message for p in problems] == [
        "'bind_cpu_mode' only supports 'cpu'/'numa'/'none'.",
        "'bind_memory_mode' only supports 'numa'/'none'.",
        "'actor_thread_fix_bind' only supports bool type True/False.",
    ]
    # modes are compared lower-case, as msrun does
    assert validate_bind({"bind_config": {"bind_cpu_mode": "NONE", "bind_memory_mode": "Numa"}}) == []


def test_duplicate_key_after_rename():
    problems = validate_bind({"bind_config": {"bind_cpu_mode": "cpu"},
                              "bind_cpu": {"device1": {"main": "0"}, "device_1": {"main": "1"}}})
    assert [p.path for p in problems] == ["bind_cpu.device_1"]


def test_plan_from_json_rejects_bad_schema():
    with pytest.raises(ParseError, match="bind_cpu.device0.main"):
        plan_from_json({"bind_config": {"bind_cpu_mode": "cpu"}, "bind_cpu": {"device0": {"main": "2-1"}}})


def test_plan_is_immutable_and_hashable():
    plan = BindPlan.build([ProcessBinding("device0", (("main", "0-3"),), memory=0, local_rank=0)],
                          meta={"mode": "node"}, warnings=["w"])
    with pytest.raises(AttributeError):
        plan.cpu_mode = "numa"
    assert hash(plan) == hash(plan_from_json(plan.to_json()))
    assert plan.to_json()["topo"] == {"mode": "node", "warnings": ["w"], "local_ranks": {"device0": 0}}
    assert plan_from_json(plan.to_json()).get("device0").local_rank == 0


# ---- loading, msrun's argparse-time checks ------------------------------------------------------
def test_load_missing_json_file(tmp_path):
    p = tmp_path / "nope.json"
    with pytest.raises(ParseError, match=rf"^bind_numa json file '{p}' does not exist\.$"):
        load_bind(str(p))


def test_load_directory(tmp_path):
    d = tmp_path / "dir.json"
    d.mkdir()
    with pytest.raises(ParseError, match=r"is not a file\.$"):
        load_bind(str(d))


@pytest.mark.parametrize("text,message", [
    ("{not json", "Failed to load bind_numa json file: {p}. (Expecting property name enclosed in double "
                  "quotes: line 1 column 2 (char 1); fix the file or write a new one with `topo plan -o FILE`)"),
    ("[1, 2]", "bind_numa json file '{p}' should be a json object."),
    ('{"bind_config": 3}', "bind_config must be a json object."),
    ('{"bind_config": {"bind_cpu_mode": "core"}}', "'bind_cpu_mode' only supports 'cpu'/'numa'/'none'."),
    ('{"bind_config": {"bind_memory_mode": "cpu"}}', "'bind_memory_mode' only supports 'numa'/'none'."),
])
def test_load_file_errors(tmp_path, text, message):
    p = tmp_path / "bind.txt"  # any extension is read once the file exists
    p.write_text(text)
    with pytest.raises(ParseError) as exc:
        load_bind(str(p))
    assert str(exc.value) == message.format(p=p)


def test_load_file_and_inline(tmp_path):
    import hashlib
    data = DOC_EXAMPLES[0][0]
    text = json.dumps(data)
    p = tmp_path / "bind.json"
    p.write_text(text)
    loaded = load_bind(str(p))
    assert loaded.plan == plan_from_json(data) and loaded.path == str(p.resolve())
    assert loaded.sha256 == hashlib.sha256(text.encode()).hexdigest()
    inline = load_bind(text)
    assert inline.plan == loaded.plan and inline.path is None and inline.sha256 is None
    with pytest.raises(ParseError, match="neither an existing file nor JSON"):
        load_bind("nope")


def test_module_values_must_be_strings():
    problems = validate_bind({"bind_config": {"bind_cpu_mode": "cpu"},
                              "bind_cpu": {"device0": {"main": 5, "runtime": [1]}}})
    assert [(p.path, p.message) for p in problems] == [
        ("bind_cpu.device0.main", "CPU range 5 for device0 should be a string."),
        ("bind_cpu.device0.runtime", "CPU range [1] for device0 should be a string."),
    ]
    assert problems[0].fix == 'write a cpulist string such as "5"'


def test_overlaps_name_every_earlier_owner_once_per_process():
    data = {"bind_config": {"bind_cpu_mode": "cpu"},
            "bind_cpu": {"device0": {"main": "0-3"}, "device1": {"main": "4-7"}, "device2": {"main": "2-5,9"},
                         "device3": {"main": "8-9"}, "device4": {"main": "10"}}}
    assert [(p.path, p.message, p.severity) for p in validate_bind(data)] == [
        ("bind_cpu.device2.main", "main CPUs 2-5 of device2 overlap those of device0, device1.", "warning"),
        ("bind_cpu.device3.main", "main CPUs 9 of device3 overlap those of device2.", "warning")]
    data["topo"] = {"shared_cpus": True}  # a mode that shares CPUs by design
    assert validate_bind(data) == []
    assert [p.path for p in validate_bind(data, allow_overlap=False)] == ["bind_cpu.device2.main",
                                                                         "bind_cpu.device3.main"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.frozensets(st.one_of(st.integers(0, 40), st.integers(1020, 1100)), min_size=1, max_size=30),
                min_size=1, max_size=8))
def test_overlap_owners_match_a_cpu_by_cpu_reference(mains):
    data = {"bind_config": {"bind_cpu_mode": "cpu"},
            "bind_cpu": {f"device{i}": {"main": CpuSet(m).to_list()} for i, m in enumerate(mains)}}
    owner_of: dict[int, str] = {}
    expected = []
    for i, main in enumerate(mains):
        key = f"device{i}"
        shared = sorted(c for c in main if c in owner_of)
        if shared:
            owners = list(dict.fromkeys(owner_of[c] for c in shared))[:4]
            names = ", ".join(owners[:3]) + (" and others" if len(owners) > 3 else "")
            expected.append(f"main CPUs {CpuSet(shared)} of {key} overlap those of {names}.")
        for c in main:
            owner_of.setdefault(c, key)
    assert [p.message for p in validate_bind(data)] == expected


def test_table_forms_load_as_positional_plans():
    core = load_table({"device1": ["0-3", " 8"], "scheduler": ["9"], "device0": []}, "--bind_core")
    assert core.table and [p.key for p in core.plan.processes] == ["device1", "scheduler", "device0"]
    assert [p.main for p in core.plan.workers()] == ["0-3,8", None]
    numa = load_table({"device0": ["1,2"]}, "--bind_numa")
    p = numa.plan.get("device0")
    assert (p.cpu_nodes, p.memory, p.cpu_node_set, p.memory_nodes) == ("1,2", "1,2", CpuSet([1, 2]), CpuSet([1, 2]))
    for table, message in [({"device0": ["1"], "device00": ["2"]}, "name the same device"),
                           (parse_json('{"device0": ["1"], "device0": ["2"]}'), "'device0' appears more than once"),
                           ({"device\u0661": ["1"]}, "must be 'scheduler' or 'deviceX'"),
                           ({"device0": ["\u0661"]}, "should look like 'cpuidX'"),
                           ({"device0": ["0-99999999"]}, "ids above 1048575")]:
        with pytest.raises(ParseError, match=message):
            load_table(table, "--bind_core")


def test_a_refusal_names_the_first_error_and_counts_the_rest():
    from topo.launcher.binding import check_loaded
    from topo.planners.bindload import LoadedBind
    from topo.errors import UsageError

    bad = {"bind_config": {"bind_cpu_mode": "cpu"}, "bind_cpu": {"device0": {"main": "2-1"}, "device1": {"main": "x"}}}
    with pytest.raises(ParseError) as err:
        plan_from_json(bad, where="b.json")
    assert str(err.value) == ("b.json: bind_cpu.device0.main: CPU range '2-1' start should not exceed end. Fix: "
                              'write a cpulist such as "0-4,8" (ranges ascending) (and 1 more; run `topo validate`)')
    absent = plan_from_json({"bind_config": {"bind_cpu_mode": "cpu"},
                             "bind_cpu": {"device0": {"main": "60"}, "device1": {"main": "70"}}})
    with pytest.raises(UsageError, match=r"^--bind_numa inline bind JSON: bind_cpu\.device0\.main: CPU id 60 .*"
                                         r"\(and 1 more; run `topo validate`\)$"):
        check_loaded(LoadedBind(absent), MACHINE, "--bind_numa", [])


def test_a_section_its_mode_turns_off_is_a_warning():
    """msrun reads bind_cpu only when bind_cpu_mode is cpu or numa, bind_memory only in numa mode: a
    file whose sections are all off runs unbound, which validate says instead of a bare "ok"."""
    problems = validate_bind({"bind_cpu": {"device0": {"main": "0-99999999"}}})
    assert [(p.path, p.message, p.severity) for p in problems] == [
        ("bind_cpu", "ignored, because bind_cpu_mode is 'none' (the default).", "warning")]
    cpu_only = {"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "none"},
                "bind_cpu": {"device0": {"main": "0"}}, "bind_memory": {"device0": 0}}
    assert [(p.path, p.message) for p in validate_bind(cpu_only)] == [
        ("bind_memory", "ignored, because bind_memory_mode is 'none'.")]
    # a preferred plan writes its nodes under bind_memory_mode "none" for msrun: topo applies them
    assert validate_bind({**cpu_only, "topo": {"memory_policy": "preferred"}}) == []
    # a mode that is wrong is one error, not also an ignored section
    assert [p.severity for p in validate_bind({"bind_config": {"bind_cpu_mode": "core"},
                                               "bind_cpu": {"device0": {"main": "0"}}})] == ["error"]
