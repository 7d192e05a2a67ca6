"""Bind JSON texts for the agreement and fuzz tests: every bind JSON the suite writes, and inputs that
once broke topo (hangs, tracebacks, silent merges), kept as regression cases.

Each entry is (name, raw JSON text). Texts, not dicts, so repeated keys stay repeated.
"""

from __future__ import annotations

import json


def _cpu(bind_cpu, memory=None, *, memory_mode="numa", extra=None) -> str:
    data = {"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": memory_mode}, "bind_cpu": bind_cpu}
    if memory is not None:
        data["bind_memory"] = memory
    data.update(extra or {})
    return json.dumps(data)


def _docs() -> list[tuple[str, str]]:
    from test_bind_json import DOC_EXAMPLES

    return [(f"mindspore-doc-example-{i + 1}", json.dumps(d)) for i, (d, _) in enumerate(DOC_EXAMPLES)]


# The bind JSONs other test files write (copied here so the corpus is one list).
SUITE = [
    ("launch-plan-doc-example-1", json.dumps({
        "bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa", "actor_thread_fix_bind": True},
        "bind_cpu": {"scheduler": {"main": "28-31"}, "device0": {"main": "0-4", "runtime": "5-7"},
                     "device_1": {"main": "8-12"}},
        "bind_memory": {"device0": 0, "device1": 1, "scheduler": 3}})),
    ("launch-plan-numa-numa", json.dumps({
        "bind_config": {"bind_cpu_mode": "numa", "bind_memory_mode": "numa"},
        "bind_cpu": {"device0": 0, "device1": 1}, "bind_memory": {"device0": 0, "scheduler": "2-3"}})),
    ("launch-plan-module-only", _cpu({"device0": {"main": "0-4"}, "device1": {"runtime": "8-9"}})),
    ("launch-plan-out-of-range", json.dumps({"bind_config": {"bind_cpu_mode": "cpu"},
                                             "bind_cpu": {"device0": {"main": "60-70"}}})),
    ("launch-plan-inline", _cpu({"device0": {"main": "0-3"}}, memory_mode="none")),
    ("launch-run-verified", _cpu({"scheduler": {"main": "0"}, "device0": {"main": "1"}, "device1": {"main": "0"}},
                                 {"device0": 0, "device1": 0})),
    ("launch-run-dry-run", _cpu({"device0": {"main": "1"}, "device1": {"main": "0"}}, {"device0": 0, "device1": 0})),
    ("bind-cmd-fixture", _cpu({"device0": {"main": "1"}, "device1": {"main": "0"}, "device2": {"main": "0-1"}},
                              {"device1": 0})),
    ("bind-cmd-bad-cpu", json.dumps({"bind_config": {"bind_cpu_mode": "cpu"}, "bind_cpu": {"device0": {"main": "99"}}})),
    ("slurm-tasks", _cpu({"device0": {"main": "0"}, "device1": {"main": "1"}}, memory_mode="none")),
    ("validate-every-problem", json.dumps({
        "bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa"},
        "bind_cpu": {"device0": {"main": "0-3", "runtime": "3-1"}, "device1": {"main": "2-5"},
                     "device2": {"main": "10-13"}, "gpu3": {"main": "0"}, "scheduler": {"main": "1,,2"}},
        "bind_memory": {"device0": 0, "device1": 1, "device2": 7}})),
    ("validate-warnings-only", json.dumps({
        "bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "none", "extra": 1},
        "bind_cpu": {"device0": {"main": "0-1", "bogus": "2"}, "device1": {"main": "1-2"}},
        "comment": "msrun ignores this"})),
    ("validate-not-present", json.dumps({"bind_config": {"bind_cpu_mode": "cpu"},
                                         "bind_cpu": {"device0": {"main": "14-40"}}})),
    ("validate-memory-only-cpunodebind", json.dumps({
        "bind_config": {"bind_cpu_mode": "numa", "bind_memory_mode": "numa"},
        "bind_cpu": {"device0": 4}, "bind_memory": {"device0": 4}})),
    ("bind-json-every-problem", json.dumps({
        "bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa", "bogus": 1},
        "bind_cpu": {"dev0": {"main": "0"}, "device1": {"main": "3-1"}, "device2": {"main": "1,,2"},
                     "device3": {"main": "0-3"}, "device4": {"main": "2-5", "gpu": "7"}, "device5": "0-9"},
        "bind_memory": {"device3": [0]}, "extra": True})),
    ("bind-json-bad-modes", json.dumps({"bind_config": {"bind_cpu_mode": "CPUS", "bind_memory_mode": 3,
                                                        "actor_thread_fix_bind": "true"}})),
    ("bind-json-mixed-case-modes", json.dumps({"bind_config": {"bind_cpu_mode": "NONE", "bind_memory_mode": "Numa"}})),
    ("bind-json-spaces", json.dumps({"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa"},
                                     "bind_cpu": {"device_3": {"main": " 5-6, 4 "}}, "bind_memory": {"device_3": "1, 0"}})),
    ("bind-json-module-types", json.dumps({"bind_config": {"bind_cpu_mode": "cpu"},
                                           "bind_cpu": {"device0": {"main": 5, "runtime": [1]}}})),
    ("bind-json-unparseable", "{not json"),
    ("bind-json-array", "[1, 2]"),
    ("bind-json-config-not-object", '{"bind_config": 3}'),
    ("bind-json-bad-cpu-mode", '{"bind_config": {"bind_cpu_mode": "core"}}'),
]

# Inputs that once hung topo, raised a traceback, or were silently merged.
REGRESSIONS = [
    ("range-0-99999999", _cpu({"device0": {"main": "0-99999999"}})),  # hung (quadratic)
    ("range-0-99999999-no-config", '{"bind_cpu":{"device0":{"main":"0-99999999"}}}'),
    ("range-0-4999999", _cpu({"device0": {"main": "0-4999999"}})),  # took 106 s
    ("range-0-9999999999", _cpu({"device0": {"main": "0-9999999999"}})),  # MemoryError
    ("range-int64-overflow", _cpu({"device0": {"main": "1-9223372036854775808"}})),  # OverflowError
    ("memory-node-huge-int", _cpu({"device0": {"main": "0"}}, {"device0": 99999999999999999999})),  # OverflowError
    ("memory-node-huge-string", _cpu({"device0": {"main": "0"}}, {"device0": "99999999999999999999"})),
    ("superscript-two", _cpu({"device0": {"main": "\u00b2"}})),  # ValueError
    ("arabic-indic-one", _cpu({"device0": {"main": "\u0661"}})),  # passed validate, failed launch
    ("fullwidth-zero", _cpu({"device0": {"main": "\uff10"}})),  # passed validate, failed launch
    ("arabic-indic-memory", _cpu({"device0": {"main": "0"}}, {"device0": "\u0661"})),
    ("arabic-indic-key", _cpu({"device\u0661": {"main": "0"}})),
    ("unknown-module-list", _cpu({"device0": {"main": "0", "other": ["1"]}})),  # TypeError at launch
    ("device0-and-device_0", _cpu({"device0": {"main": "0"}, "device_0": {"main": "1"}})),  # merged
    ("device0-and-device00", _cpu({"device0": {"main": "0"}, "device00": {"main": "1"}})),
    ("memory-device0-and-device_0", _cpu({"device0": {"main": "0"}}, {"device0": 0, "device_0": 1})),
    ("repeated-device-key", '{"bind_config": {"bind_cpu_mode": "cpu"}, '
                            '"bind_cpu": {"device0": {"main": "0"}, "device0": {"main": "1"}}}'),
    ("repeated-module-key", '{"bind_config": {"bind_cpu_mode": "cpu"}, "bind_cpu": {"device0": {"main": "0", "main": "1"}}}'),
    ("repeated-section", '{"bind_config": {"bind_cpu_mode": "cpu"}, "bind_cpu": {"device0": {"main": "0"}}, '
                         '"bind_cpu": {"device1": {"main": "1"}}}'),
    ("repeated-mode", '{"bind_config": {"bind_cpu_mode": "cpu", "bind_cpu_mode": "none"}, '
                      '"bind_cpu": {"device0": {"main": "0"}}}'),
    ("huge-device-number", _cpu({"device" + "9" * 40: {"main": "0"}})),
    ("bool-memory", _cpu({"device0": {"main": "0"}}, {"device0": True})),
    ("negative-memory", _cpu({"device0": {"main": "0"}}, {"device0": -1})),
    ("null-entry", _cpu({"device0": None, "device1": {"main": "8"}})),
    ("deep-nesting", '{"bind_config": {"bind_cpu_mode": "cpu"}, "bind_cpu": ' + "[" * 5000 + "]" * 5000 + "}"),
    ("many-ranges", _cpu({"device0": {"main": ",".join(["0-31"] * 20000)}})),
]

# A preferred memory policy: what `topo plan --memory preferred` writes, and how it can be wrong.
PREFERRED = [
    ("preferred-ok", _cpu({"device0": {"main": "0-3"}, "device1": {"main": "8-11"}}, {"device0": 0, "device1": 1},
                          memory_mode="none", extra={"topo": {"memory_policy": "preferred"}})),
    ("preferred-with-numa-mode", _cpu({"device0": {"main": "0-3"}}, {"device0": 0},
                                      extra={"topo": {"memory_policy": "preferred"}})),
    ("preferred-two-nodes", _cpu({"device0": {"main": "0-3"}}, {"device0": "0-1"}, memory_mode="none",
                                 extra={"topo": {"memory_policy": "preferred"}})),
    ("preferred-unknown-policy", _cpu({"device0": {"main": "0-3"}}, {"device0": 0}, memory_mode="none",
                                      extra={"topo": {"memory_policy": "interleave"}})),
    ("preferred-disallowed-node", _cpu({"device0": {"main": "0-3"}}, {"device0": 3}, memory_mode="none",
                                       extra={"topo": {"memory_policy": "preferred"}})),
]

# Files that fit the agreement tests' machine and should be accepted everywhere.
FITTING = [
    ("fits-cpu-numa", _cpu({"scheduler": {"main": "24-27"}, "device0": {"main": "0-3", "runtime": "4-5"},
                            "device1": {"main": "8-11"}}, {"device0": 0, "device1": 1, "scheduler": 2})),
    ("fits-numa-none", json.dumps({"bind_config": {"bind_cpu_mode": "numa", "bind_memory_mode": "none"},
                                   "bind_cpu": {"device0": 0, "device1": "1"}})),
    ("fits-memory-only", json.dumps({"bind_config": {"bind_cpu_mode": "none", "bind_memory_mode": "numa"},
                                     "bind_memory": {"device0": 0, "device1": "0-1"}})),
    ("fits-overlap-warning", _cpu({"device0": {"main": "0-3"}, "device1": {"main": "2-5"}}, memory_mode="none")),
    ("fits-shared-cpus", _cpu({"device0": {"main": "0-7"}, "device1": {"main": "0-7"}}, {"device0": 0, "device1": 0},
                              extra={"topo": {"shared_cpus": True, "mode": "node"}})),
    ("fits-hbm-membind", json.dumps({"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa"},
                                     "bind_cpu": {"device0": {"main": "0-3"}}, "bind_memory": {"device0": 4}})),
]


def corpus() -> list[tuple[str, str]]:
    return [*_docs(), *SUITE, *REGRESSIONS, *PREFERRED, *FITTING]
