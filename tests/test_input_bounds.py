"""Reading a topology file (hwloc XML, topology JSON) or a bind JSON costs memory in proportion to
the file: what once cost 25 to 120 times the file (an internal entity expanded, millions of empty
elements or empty lists) is refused at its first sign, before it is built. Each reproduction is read
in a fresh interpreter (tests/hostile_inputs.py) and its resident peak compared, in bytes, with the
file's size and with the same file at twice the size: what grows is the file's own copies only."""

from __future__ import annotations

import pytest

import hostile_inputs as hostile
from topo.errors import ProbeError
from topo.loader import MAX_JSON_CONTAINERS, load_topology
from topo.probes.hwloc_xml import MAX_ATTRIBUTES, MAX_ELEMENTS, MAX_NAMES, MAX_TAG, parse_hwloc_xml

MiB = 1 << 20
COPIES = 3  # the file's bytes, its text and the chunk being parsed: what reading a file costs at least
BIND_HEAD = '{"bind_config": {"bind_cpu_mode": "cpu"}, "bind_cpu": ['


def read_twice(tmp_path, build, reader="topology"):
    """The reader's result on a 4 MiB and an 8 MiB file made by build(path, size)."""
    return [(size, hostile.measure(build(tmp_path / f"{size}", size), reader)) for size in (4 * MiB, 8 * MiB)]


@pytest.mark.parametrize("name, build, reader, words", [
    # an entity repeated inside expat's amplification cap: 80 times the file before
    ("entity", hostile.entity_xml, "topology", "a DOCTYPE topology with declarations (entities"),
    # 1 and 2 million empty elements: 22 times the file before
    ("elements", hostile.empty_elements_xml, "topology", f"more than {MAX_ELEMENTS} elements"),
    # 1.4 and 2.8 million empty lists: 22 times the file before
    ("lists", hostile.empty_lists_json, "topology", f"more than {MAX_JSON_CONTAINERS} arrays and objects"),
    ("bind", lambda path, size: hostile.empty_lists_json(path, size, BIND_HEAD), "bind",
     f"more than {MAX_JSON_CONTAINERS} arrays and objects"),
])
def test_reproduction_is_refused_with_memory_in_proportion_to_the_file(tmp_path, name, build, reader, words):
    (small, first), (large, second) = read_twice(tmp_path, build, reader)
    for size, result in ((small, first), (large, second)):
        assert words in result["error"] and "\n" not in result["error"], result["error"]
        assert result["growth"] < COPIES * size + 32 * MiB, (size, result)  # the tree, at most 262144 small elements
    assert second["growth"] - first["growth"] < COPIES * (large - small), (first, second)


def test_worst_legal_shapes_cost_what_a_real_export_does(tmp_path):
    """Many small attributes and many distinct JSON keys: the costliest legal inputs found, about
    16 times their size (a real export: 5 to 15), nowhere near the 25 to 120 of the reproductions."""
    for build in (hostile.attributes_xml, hostile.unique_keys_json):
        result = hostile.measure(build(tmp_path / build.__name__, 4 * MiB))
        assert result["growth"] < 21 * 4 * MiB, (build.__name__, result)


HEAD, TAIL = hostile.HEAD, hostile.TAIL


@pytest.mark.parametrize("text, words", [
    (HEAD + "<object>" * 130 + "</object>" * 130 + TAIL, "elements nested more than 128 deep"),
    (HEAD + "".join(f"<n{i}/>" for i in range(MAX_NAMES)) + TAIL, f"more than {MAX_NAMES} names"),
    (HEAD + f'<info name="{"x" * (MAX_TAG + (2 << 20))}"/>' + TAIL, f"a tag or comment longer than {MAX_TAG >> 20} MiB"),
    (HEAD + f"<!-- {'x' * (MAX_TAG + (2 << 20))} -->" + TAIL, f"a tag or comment longer than {MAX_TAG >> 20} MiB"),
    (HEAD + ("<i " + " ".join(f'a{i}=""' for i in range(64)) + "/>") * (MAX_ATTRIBUTES // 64 + 1) + TAIL,
     f"more than {MAX_ATTRIBUTES} attributes"),
    (HEAD + '<object type="PU" os_index="0" cpuset="' + "0x1," * 40000 + '0x1"/>' + TAIL,
     "has bits above 1048575"),
    ('<?xml version="1.0"?><!DOCTYPE topology [<!ELEMENT topology ANY>]>' + HEAD[HEAD.index("<topology"):] + TAIL,
     "a DOCTYPE topology with declarations"),
])
def test_what_no_hwloc_export_holds_is_refused_with_one_line(text, words):
    with pytest.raises(ProbeError) as err:
        parse_hwloc_xml(text, "bad.xml")
    assert words in str(err.value) and str(err.value).startswith("bad.xml: ") and "\n" not in str(err.value)
    assert len(str(err.value)) < 300  # the input is excerpted, never the message


def test_hwloc_doctype_without_declarations_still_reads(tmp_path):
    """What hwloc writes: `<!DOCTYPE topology SYSTEM "hwloc2.dtd">` (the DTD is never fetched)."""
    path = tmp_path / "m.xml"
    path.write_text(hostile.REPO.joinpath("tests/fixtures/hwloc-v1/16ia64-8n2s.xml").read_text())
    assert "<!DOCTYPE topology SYSTEM" in path.read_text()
    assert len(load_topology(path).pus) == 16
