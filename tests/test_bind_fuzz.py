"""Fuzzing the bind model's entry points: cpulists, bind JSON objects and texts, msrun's tables.

Whatever goes in, only topo's own errors (TopoError subclasses) come out, each input is judged within a
time bound, and `topo validate`'s verdict is the launcher's (read_plan + check_plan). Every run tries
the same examples (tests/conftest.py loads its derandomized "ci" profile); the inputs that once broke
something are kept as regression tests below and in tests/bind_corpus.py.
"""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bind_corpus import REGRESSIONS
from topo.launcher.binding import resolve_bindings
from topo.planners.bindcheck import check_plan, read_plan, validate_bind
from topo.planners.bindload import LoadedBind, load_bind, load_table
from topo.cpuset import MAX_ID, CpuSet
from topo.errors import ParseError, TopoError
from topo.synthetic import synthetic

MACHINE = synthetic("pack:2 numa:2 core:8 pu:1", gpus_per_numa=1, gpu_memory_nodes=True, allowed="0-27",
                    allowed_nodes="0-2,4")
LIVE = dataclasses.replace(MACHINE, root="/")
ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
SECONDS = 5.0  # per input: generous, for hang / quadratic-time protection only
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---- range text -----------------------------------------------------------------------------
NUMBERS = st.one_of(st.integers(0, 40).map(str), st.integers(0, 2 * MAX_ID).map(str),
                    st.sampled_from(["99999999", "9999999999", "9223372036854775808", "99999999999999999999",
                                     "0" * 30 + "7", "1" * 5000]))
ODD = st.sampled_from(["\u00b2", "\u0661", "\uff10", "\u0663-\u0665", " ", "\t", "\n", "-", ",", "", "0x3", "+1",
                       "1.5", "a", "\u00a0", "\u2003", "\x00"])
SEGMENTS = st.one_of(NUMBERS, st.tuples(NUMBERS, NUMBERS).map("-".join), ODD)
RANGE_TEXT = st.one_of(st.lists(SEGMENTS, max_size=12).map(",".join), st.text(max_size=40))


def parse_msrun(text):
    return CpuSet.parse(text, msrun=True)


def bounded(call, *args):
    """call(*args): its value, or the TopoError it raised; anything else fails the test. Time-bounded."""
    start = time.monotonic()
    try:
        result = call(*args)
    except TopoError as exc:
        result = exc
    assert time.monotonic() - start < SECONDS, (call.__name__, args)
    return result


@FUZZ
@given(RANGE_TEXT)
def test_range_text_gives_a_set_or_a_parse_error(text):
    for parse in (CpuSet.parse, parse_msrun):
        result = bounded(parse, text)
        assert isinstance(result, (CpuSet, ParseError))
        if isinstance(result, CpuSet):
            assert result.last() <= MAX_ID
            assert all(c in "0123456789,- \t\n\r\x0b\x0c" or c.isspace() for c in text)
        else:
            assert str(result)  # a message, naming the text


@FUZZ
@given(st.lists(st.tuples(st.integers(0, MAX_ID), st.integers(0, 3000)), max_size=60), st.randoms())
def test_msrun_parse_is_the_union_of_its_ranges(ranges, rnd):
    parts = [f"{lo}-{min(lo + n, MAX_ID)}" if n else str(lo) for lo, n in ranges]
    rnd.shuffle(parts)
    text = ", ".join(parts)
    expected = 0
    for lo, n in ranges:
        hi = min(lo + n, MAX_ID)
        expected |= ((1 << (hi - lo + 1)) - 1) << lo
    assert CpuSet.parse(text, msrun=True).mask == expected == CpuSet.parse(text).mask


# ---- bind JSON objects ----------------------------------------------------------------------
KEYS = st.sampled_from(["bind_config", "bind_cpu", "bind_memory", "topo", "bind_cpu_mode", "bind_memory_mode",
                        "actor_thread_fix_bind", "device0", "device1", "device_1", "device01", "device2", "scheduler",
                        "main", "runtime", "minddata", "pynative", "other", "memory_policy", "shared_cpus",
                        "local_ranks", "warnings", "device\u0661", "dev0", ""])
MODES = st.sampled_from(["cpu", "numa", "none", "CPU", "Numa", "preferred", "bind", "interleave", "core"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 40), st.integers(), RANGE_TEXT, MODES,
                    st.floats(allow_nan=False))
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(KEYS, inner, max_size=5)),
                           max_leaves=25)
ENTRY = st.one_of(st.none(), RANGE_TEXT, st.integers(-2, 12),
                  st.dictionaries(st.sampled_from(["main", "runtime", "minddata", "pynative", "other"]),
                                  st.one_of(RANGE_TEXT, st.integers(0, 40), JSON_VALUES), max_size=4))
SECTION = st.dictionaries(st.sampled_from(["device0", "device1", "device_1", "device01", "device3", "scheduler",
                                           "device\u0661", "gpu0"]), ENTRY, max_size=5)
# shaped like a bind JSON, with random values in range positions
BIND_JSON = st.fixed_dictionaries(
    {"bind_config": st.one_of(st.fixed_dictionaries({"bind_cpu_mode": MODES, "bind_memory_mode": MODES}),
                              JSON_VALUES)},
    optional={"bind_cpu": st.one_of(SECTION, JSON_VALUES), "bind_memory": st.one_of(SECTION, JSON_VALUES),
              "topo": st.one_of(st.fixed_dictionaries({}, optional={"memory_policy": MODES,
                                                                    "shared_cpus": st.booleans()}), JSON_VALUES)})
# well-formed files with small ids, so the resource checks and the prefixes are reached too
SMALL_LIST = st.lists(st.tuples(st.integers(0, 36), st.integers(0, 6)), min_size=1, max_size=3).map(
    lambda rs: ",".join(f"{lo}-{lo + n}" if n else str(lo) for lo, n in rs))
NODE = st.one_of(st.integers(0, 8), st.sampled_from(["0-1", "2", "1,4", "3-4"]))
DEVICES = st.sampled_from(["device0", "device1", "device2", "device3", "scheduler"])
WELL_FORMED = st.one_of(
    st.fixed_dictionaries({
        "bind_config": st.fixed_dictionaries({"bind_cpu_mode": st.just("cpu"),
                                              "bind_memory_mode": st.sampled_from(["numa", "none"])}),
        "bind_cpu": st.dictionaries(DEVICES, st.dictionaries(st.sampled_from(["main", "runtime"]), SMALL_LIST,
                                                             max_size=2), max_size=4),
        "bind_memory": st.dictionaries(DEVICES, NODE, max_size=4)},
        optional={"topo": st.fixed_dictionaries({}, optional={"memory_policy": st.sampled_from(["preferred", "bind"]),
                                                              "shared_cpus": st.booleans()})}),
    st.fixed_dictionaries({
        "bind_config": st.fixed_dictionaries({"bind_cpu_mode": st.just("numa"),
                                              "bind_memory_mode": st.sampled_from(["numa", "none"])}),
        "bind_cpu": st.dictionaries(DEVICES, NODE, max_size=4),
        "bind_memory": st.dictionaries(DEVICES, NODE, max_size=4)}))
ANY_JSON = st.one_of(BIND_JSON, JSON_VALUES, WELL_FORMED)


@FUZZ
@given(st.one_of(WELL_FORMED, ANY_JSON))
def test_validate_and_launch_agree_on_any_object(data):
    problems = bounded(validate_bind, data, MACHINE)
    assert isinstance(problems, list), problems
    rejected = any(p.severity == "error" for p in problems)
    plan, schema = bounded(read_plan, data)
    launch_rejects = plan is None or any(p.severity == "error" for p in bounded(check_plan, plan, MACHINE))
    assert rejected == launch_rejects, problems
    if plan is not None:
        result = bounded(lambda: resolve_bindings(False, LoadedBind(plan), local_worker_num=2, topology=LIVE,
                                                  environ=ENV))
        assert not isinstance(result, TopoError) or rejected, result
        if not rejected:
            assert plan.to_json()["bind_config"]["bind_cpu_mode"] == plan.cpu_mode


@FUZZ
@given(st.one_of(ANY_JSON.map(json.dumps), st.text(max_size=60), st.binary(max_size=60)))
def test_any_file_loads_or_is_a_parse_error(tmp_path_factory, content):
    path = tmp_path_factory.mktemp("fuzz") / "bind.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
    result = bounded(load_bind, str(path))
    assert isinstance(result, (LoadedBind, ParseError))


@FUZZ
@given(st.dictionaries(st.one_of(KEYS, st.text(max_size=8)),
                       st.one_of(st.lists(st.one_of(RANGE_TEXT, st.integers(), st.none()), max_size=4), JSON_VALUES),
                       max_size=5),
       st.sampled_from(["--bind_core", "--bind_numa"]))
def test_any_table_loads_or_is_a_parse_error(table, flag):
    result = bounded(load_table, table, flag)
    assert isinstance(result, (LoadedBind, ParseError))
    if isinstance(result, LoadedBind):
        bounded(lambda: resolve_bindings(result if flag == "--bind_core" else False,  # a binding or a TopoError
                                         result if flag == "--bind_numa" else False,
                                         local_worker_num=2, topology=LIVE, environ=ENV))


def test_fuzzing_is_derandomized_unless_another_profile_is_asked_for(request):
    if request.config.getoption("hypothesis_profile", None) in (None, "ci"):
        assert FUZZ.derandomize and settings().derandomize  # .ci/run sets no CI variable


# ---- regressions ----------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["0-99999999", "0-4999999", "0-9999999999", "1-9223372036854775808",
                                  "99999999999999999999", "\u00b2", "\u0661", "\uff10", "1" * 100_000,
                                  ",".join(["0-1048575"] * 100_000), ",".join(["1048575"] * 100_000)])
def test_range_text_that_once_hung_or_crashed(text):
    for parse in (CpuSet.parse, parse_msrun):
        result = bounded(parse, text)
        if text.startswith("0-1048575,") or text.startswith("1048575,"):
            assert isinstance(result, CpuSet) and result.last() == MAX_ID
        else:
            assert isinstance(result, ParseError) and (text[:20] in str(result))


@pytest.mark.parametrize("name,text", REGRESSIONS, ids=[n for n, _ in REGRESSIONS])
def test_bind_json_that_once_hung_or_crashed(name, text, tmp_path):
    path = tmp_path / "bind.json"
    path.write_text(text, encoding="utf-8")
    result = bounded(load_bind, str(path))
    if isinstance(result, LoadedBind):
        bounded(lambda: resolve_bindings(False, result, local_worker_num=2, topology=LIVE, environ=ENV))
