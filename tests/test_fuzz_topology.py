"""Fuzzing the readers of saved machines: topology JSON, hwloc XML and corrupted sysfs roots.

Whatever the input, `load_topology` / `discover` return a Topology or raise one of topo's own
errors (a TopoError: one line for the user), each within a time bound. The settings are fixed
here, derandomized, so CI runs the same examples every time. Inputs that once broke something are
kept below as plain regression tests (REGRESSIONS), whatever the fuzzer explores later.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import topo
from sysfs_builder import Cgroup, Machine, Pci, build
from topo.errors import TopoError
from topo.loader import load_topology

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN_JSON = (FIXTURES / "topology-json" / "synthetic-pack2-numa2-gpu.json").read_text()
SMALL_XML = (FIXTURES / "sysfs" / "32amd64-4s2n4c-cgroup2.xml").read_text()  # distances2, cgroup sets
SECONDS = 5  # per input: hang and blow-up protection only, far above the normal few ms

FUZZ = settings(derandomize=True, deadline=None, database=None, max_examples=150,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large])


def only_topo_errors(call):
    """Run `call`; any exception but a TopoError fails the test, and so does a slow answer."""
    start = time.monotonic()
    try:
        result = call()
    except TopoError as exc:
        assert "\n" not in str(exc).strip(), f"a multi-line error: {exc}"
        result = None
    assert time.monotonic() - start < SECONDS
    return result


# ---- topology JSON ---------------------------------------------------------------------------

# Values a hand-edited or corrupted file may hold where the schema expects something else.
WEIRD = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["0-1048575", "0-99999999999", "1-9223372036854775808", "²", "١", "０", "3-1",
                     "0,,1", "0x10", "10de", "10de:20b0:1", ":", "-1", "0-3", ""]),
    st.lists(st.integers(min_value=-3, max_value=10), max_size=4),
    st.dictionaries(st.text(max_size=3), st.integers(min_value=-2, max_value=30), max_size=3),
)


def paths(data, prefix=()):
    """Every (path, value) of a JSON document, containers included."""
    yield prefix, data
    if isinstance(data, dict):
        for k, v in data.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from paths(v, (*prefix, i))


JSON_PATHS = [p for p, _ in paths(json.loads(GOLDEN_JSON)) if p]


def replaced(doc, path, value):
    doc = json.loads(json.dumps(doc))
    target = doc
    for step in path[:-1]:
        target = target[step]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


@FUZZ
@given(edits=st.lists(st.tuples(st.sampled_from(JSON_PATHS), st.one_of(WEIRD, st.just(KeyError))),
                      min_size=1, max_size=3))
def test_topology_json_with_wrong_values(tmp_path, edits):
    doc = json.loads(GOLDEN_JSON)
    for path, value in edits:
        try:
            doc = replaced(doc, path, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed the container
    file = tmp_path / "t.json"
    file.write_text(json.dumps(doc))
    only_topo_errors(lambda: load_topology(file))


@FUZZ
@given(cut=st.integers(min_value=0, max_value=len(GOLDEN_JSON)), junk=st.binary(max_size=40))
def test_topology_json_truncated_or_garbled(tmp_path, cut, junk):
    file = tmp_path / "t.json"
    file.write_bytes(GOLDEN_JSON.encode()[:cut] + junk)
    only_topo_errors(lambda: load_topology(file))


# ---- hwloc XML ---------------------------------------------------------------------------------

XML_ATTRIBUTES = sorted({(i, name) for i, el in enumerate(ET.fromstring(SMALL_XML).iter()) for name in el.attrib})
XML_TEXTS = [i for i, el in enumerate(ET.fromstring(SMALL_XML).iter()) if (el.text or "").strip()]
XML_VALUES = st.one_of(st.text(max_size=12), st.sampled_from([
    "-1", "99999999999999999999", "0x", "0xffffffff,,", "1e9", "nan", "inf", "0xf...f", "18446744073709551616",
    "", " 1", "1 2 3", "10 x 20"]))


@FUZZ
@given(edits=st.lists(st.tuples(st.sampled_from(XML_ATTRIBUTES), XML_VALUES), max_size=4),
       texts=st.lists(st.tuples(st.sampled_from(XML_TEXTS), XML_VALUES), max_size=2),
       drop=st.integers(min_value=0, max_value=60))
def test_hwloc_xml_with_wrong_values(tmp_path, edits, texts, drop):
    root = ET.fromstring(SMALL_XML)
    elements = list(root.iter())
    for (i, name), value in edits:
        elements[i].set(name, value)
    for i, value in texts:  # distances2 indexes and values
        elements[i].text = value
    parents = [(p, c) for p in root.iter() for c in p]
    if drop < len(parents):  # remove one element and what it holds
        parent, child = parents[drop]
        parent.remove(child)
    file = tmp_path / "t.xml"
    file.write_bytes(ET.tostring(root))
    only_topo_errors(lambda: load_topology(file))


@FUZZ
@given(cut=st.integers(min_value=0, max_value=len(SMALL_XML)), junk=st.text(max_size=30))
def test_hwloc_xml_truncated_or_garbled(tmp_path, cut, junk):
    file = tmp_path / "t.xml"
    file.write_text(SMALL_XML[:cut] + junk)
    only_topo_errors(lambda: load_topology(file))


# ---- corrupted sysfs roots -------------------------------------------------------------------


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A small machine with every kind of file discovery reads: caches, nodes, cgroup, PCI."""
    return build(tmp_path_factory.mktemp("template"), Machine(
        packages=2, cores=2, threads=2, cgroup=Cgroup(2, cpus="0-6", mems="0-1"),
        pci=[Pci("0000:07:00.0", "0x030200", numa_node=1, local_cpulist="2-3,6-7")]))


def root_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not p.is_symlink())


CORRUPTIONS = ["truncate", "garble", "empty", "huge-number", "huge-range", "directory", "dangling", "remove",
               "nul", "fifo"]


@settings(FUZZ, max_examples=40)  # each example copies a root and runs discovery: ~0.1 s
@given(data=st.data())
def test_corrupted_sysfs_root(template, tmp_path_factory, data):
    root = tmp_path_factory.mktemp("root") / "machine"
    shutil.copytree(template, root, symlinks=True)
    files = root_files(root)
    for _ in range(data.draw(st.integers(min_value=1, max_value=3), label="count")):
        rel = data.draw(st.sampled_from(files), label="file")
        how = data.draw(st.sampled_from(CORRUPTIONS), label="how")
        corrupt(root / rel, how, data)
    only_topo_errors(lambda: topo.discover(root, probes=()))


def corrupt(path: Path, how: str, data) -> None:
    if not path.is_file() or path.is_symlink():
        return  # an earlier corruption replaced it
    text = path.read_bytes()
    if how == "truncate":
        path.write_bytes(text[:data.draw(st.integers(min_value=0, max_value=max(len(text) - 1, 0)))])
    elif how == "garble":
        path.write_bytes(data.draw(st.binary(min_size=1, max_size=30)))
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "huge-number":
        path.write_text("99999999999999999999999999999\n")
    elif how == "huge-range":
        path.write_text("0-99999999\n")
    elif how == "nul":
        path.write_bytes(b"\x00" * 8)
    else:
        path.unlink()
        if how == "directory":
            path.mkdir()
        elif how == "dangling":
            path.symlink_to(path.parent / "nowhere")
        elif how == "fifo":
            os.mkfifo(path)


# ---- inputs that once broke something ---------------------------------------------------------


def _golden_with(**top) -> str:
    return json.dumps({**json.loads(GOLDEN_JSON), **top})


def _pci_id_int() -> str:
    doc = json.loads((FIXTURES / "topology-json" / "discovered-dgx-a100-nvml.json").read_text())
    doc["pci_devices"][0]["id"] = 4318
    return json.dumps(doc)


V1_LATENCY_WITHOUT_VALUE = (
    '<?xml version="1.0"?><topology><object type="Machine" os_index="0" cpuset="0x00000003">'
    '<object type="NUMANode" os_index="0" cpuset="0x00000001" local_memory="1">'
    '<object type="PU" os_index="0" cpuset="0x00000001"/></object>'
    '<object type="NUMANode" os_index="1" cpuset="0x00000002" local_memory="1">'
    '<object type="PU" os_index="1" cpuset="0x00000002"/></object>'
    '<distances nbobjs="2" relative_depth="1" latency_base="10.0"><latency/><latency value="2.1"/>'
    '<latency value="2.1"/><latency value="1"/></distances></object></topology>'
)
MILLION = "0-1048575"
REGRESSIONS = {
    # file name: (contents, words of the one-line error)
    "binary.json": (b"{\x00\xff\xfe" + bytes(range(256)), "not a text file"),
    "distances2.xml": ((FIXTURES / "sysfs" / "40intel64-2g2n4c+pcilocality.xml").read_text()
                       .replace('<u64values length="30">10 20', '<u64values length="30">1x0 20', 1).encode(),
                       "distances2 value='1x0' is not a non-negative integer"),
    "latency.xml": (V1_LATENCY_WITHOUT_VALUE.encode(), "a <latency/> without a value"),
    "os_index.xml": (SMALL_XML.replace('type="PU" os_index="0"', 'type="PU" os_index="99999999999999999999"', 1)
                     .encode(), "exceeds 1048575"),
    "pci-id.json": (_pci_id_int().encode(), "pci_devices[0].id: expected a string, found 4318"),
    "million.json": (_golden_with(pus=MILLION, allowed_pus=MILLION, online_pus=MILLION, complete_pus=MILLION,
                                  cores=[], packages=[], caches=[]).encode(), "1048576 PUs, more than the 65536"),
    "deep.json": (b'{"schema":' + b"[" * 100000 + b"]" * 100000 + b"}", "nested too deep"),
    "digits.json": (b'{"schema": ' + b"9" * 5000 + b"}", "not a topology JSON (a number thousands of digits long)"),
    "deep.xml": (b'<topology version="2.0"><object type="Machine">' + b'<object type="Group">' * 5000
                 + b"</object>" * 5001 + b"</topology>", "nested more than 128 deep"),
}


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_input_that_once_broke_the_reader(tmp_path, name):
    contents, words = REGRESSIONS[name]
    file = tmp_path / name
    file.write_bytes(contents)
    start = time.monotonic()
    with pytest.raises(TopoError) as err:
        load_topology(file)
    assert time.monotonic() - start < SECONDS
    assert words in str(err.value) and str(file) in str(err.value)
    assert "\n" not in str(err.value)
    assert "`topo show --json" in str(err.value) or "`lstopo --of xml" in str(err.value)  # and says how to fix it


def test_fifo_given_as_a_topology_file_does_not_block(tmp_path):
    fifo = tmp_path / "machine.json"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(TopoError, match="not a regular file"):
        load_topology(fifo)
    assert time.monotonic() - start < SECONDS
