"""Strings from a machine or a file never reach the terminal raw: a CPU model name that clears the
screen or sets the window title, bidi overrides, control characters in the names and keys of a
loaded topology, in every text output and error message."""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

import topo
from lstopo_oracle import LSTOPO
from sysfs_builder import Machine, Pci, build
from topo.text import printable
from topo.cli import main as cli

TITLE = "\x1b]0;title\x07"
CLEAR = "\x1b[2J"
EVIL_MODEL = f"{TITLE}Evil{CLEAR} CPU \u202eRLO\u2066 \x9b2J"
RAW = ("\x1b", "\x07", "\r", "\u202e", "\u2066", "\x9b", "\x7f")


def clean(text: str) -> bool:
    return not any(c in text for c in RAW)


@pytest.mark.parametrize("text, shown", [
    (TITLE, "\\x1b]0;title\\x07"),
    (CLEAR, "\\x1b[2J"),
    ("a\rb\x00c\x7fd\x9be\x85f", "a\\x0db\\x00c\\x7fd\\x9be\\x85f"),
    ("\u202eabc\u202c \u2067x\u2069 \u200f\u061c", "\\u202eabc\\u202c \\u2067x\\u2069 \\u200f\\u061c"),
    ("one\ntwo\tthree", "one\\x0atwo\\x09three"),
    ("Intel(R) Xeon(R) é ü 世界 \\x1b", "Intel(R) Xeon(R) é ü 世界 \\x1b"),  # printable text is kept
])
def test_printable_escapes_controls_and_bidi_marks(text, shown):
    assert printable(text) == shown


def test_printable_keeps_newlines_of_a_report_when_asked():
    assert printable(f"a{CLEAR}\nb\r\n", lines=True) == "a\\x1b[2J\nb\\x0d\n"


@pytest.fixture(scope="module")
def evil_root(tmp_path_factory):
    return str(build(tmp_path_factory.mktemp("evil"), Machine(packages=2, cores=2, model=EVIL_MODEL)))


@pytest.mark.parametrize("args", [[], ["-p"], ["--long"], ["--json"], ["--of", "console"]])
def test_cpu_model_name_with_terminal_commands_is_escaped(evil_root, args):
    result = CliRunner().invoke(cli, ["show", "--root", evil_root, *args])
    assert result.exit_code == 0, result.output
    assert clean(result.output)
    if "--long" in args:
        assert "\\x1b]0;title\\x07Evil\\x1b[2J CPU \\u202eRLO\\u2066 \\x9b2J" in result.output
    if "--json" in args:
        models = {p["model"] for p in json.loads(result.output)["packages"]}
        assert models == {EVIL_MODEL}  # the data itself is kept, JSON-escaped


def test_written_text_file_is_escaped_too(evil_root, tmp_path):
    assert CliRunner().invoke(cli, ["show", "--root", evil_root, "--long", str(tmp_path / "m.txt")]).exit_code == 0
    assert clean((tmp_path / "m.txt").read_text())


def test_plan_explain_on_that_machine_is_clean(evil_root):
    result = CliRunner().invoke(cli, ["plan", "--root", evil_root, "--mode", "exclusive", "--devices", "none",
                                      "--explain"])
    assert result.exit_code == 0, result.output
    assert clean(result.output)


def test_loaded_file_names_keys_and_values_are_escaped(evil_root, tmp_path):
    data = json.loads(CliRunner().invoke(cli, ["show", "--root", evil_root, "--json"]).output)
    data["source"]["probes"][f"probe{CLEAR}"] = f"ok{TITLE}"
    data["info"] = {"hostname": f"host{CLEAR}\u202e\r", "architecture": f"x86{TITLE}"}
    data["numa_nodes"][0]["subtype"] = f"HBM{CLEAR}"
    saved = tmp_path / "m.json"
    saved.write_text(json.dumps(data))
    for args in ([], ["--long"], ["-l"]):
        result = CliRunner().invoke(cli, ["show", "--from", str(saved), *args])
        assert result.exit_code == 0, result.output
        assert clean(result.output), args
    console = CliRunner().invoke(cli, ["show", "--from", str(saved)]).output
    assert "NUMANode(HBM\\x1b[2J) L#0" in console
    long = CliRunner().invoke(cli, ["show", "--from", str(saved), "--long"]).output
    assert "host\\x1b[2J\\u202e\\x0d" in long and "probe\\x1b[2J: ok\\x1b]0;title\\x07" in long


def test_error_messages_quoting_such_strings_are_escaped(evil_root, tmp_path):
    name = tmp_path / f"m{CLEAR}{TITLE}.txt"
    name.write_text("")
    result = CliRunner().invoke(cli, ["show", "--root", evil_root, str(name)])
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert clean(result.output) and "m\\x1b[2J\\x1b]0;title\\x07.txt: File exists" in result.output
    bind = tmp_path / "bind.json"
    bind.write_text(json.dumps({"bind_config": {"bind_cpu_mode": "cpu"},
                                "bind_cpu": {f"device0{CLEAR}": {"main": "0"}}}))
    result = CliRunner().invoke(cli, ["validate", str(bind), "--root", evil_root])
    assert result.exit_code == 1 and clean(result.output) and "\\x1b[2J" in result.output


# ---- what topo writes: XML, SVG and HTML stay valid, whatever the strings ----------------------
XML_FORBIDDEN = "\x00\x01\x1b\x07\ufffe"
RAW_CONTROLS = ("\x1b", "\x07", "\x00", "\x01")


@pytest.fixture(scope="module")
def hostile_root(tmp_path_factory):
    """A machine whose CPU model holds C0 controls and U+FFFE, with a network function whose
    interface name has a byte that is not UTF-8 (0xff) and an ESC, and whose driver a BEL."""
    root = build(tmp_path_factory.mktemp("hostile"), Machine(
        packages=1, cores=2, model=f"Bad{XML_FORBIDDEN}CPU", pci=[Pci("0000:01:00.0", "0x020000", numa_node=0)]))
    name = b"eth\xff\x1b0"
    os.makedirs(os.path.join(bytes(root), b"sys/class/net"), exist_ok=True)
    os.symlink(b"../../devices/pci0000:00/0000:01:00.0/net/" + name, os.path.join(bytes(root), b"sys/class/net", name))
    os.symlink("../../../bus/pci/drivers/ev\x07il", root / "sys/bus/pci/devices/0000:01:00.0/driver")
    return str(root)


def hostile_json(tmp_path, root) -> str:
    """The same machine saved as JSON, with lone surrogates (`"\\ud800"`) and NUL in its strings."""
    data = json.loads(CliRunner().invoke(cli, ["show", "--root", root, "--json"]).output)
    data["info"] = {"hostname": "host\ud800\x00\ufffe", "architecture": "x86\udcff"}
    data["packages"][0]["model"] = "CPU\ud800\x1b"
    saved = tmp_path / "m.json"
    saved.write_text(json.dumps(data))  # JSON escapes them: \ud800, \u0000
    return str(saved)


@pytest.mark.parametrize("source", ["root", "json"])
def test_xml_svg_and_html_of_hostile_strings_are_valid_and_read_back(hostile_root, tmp_path, source):
    machine = ["--root", hostile_root] if source == "root" else ["--from", hostile_json(tmp_path, hostile_root)]
    for suffix in (".xml", ".svg", ".html"):
        out = tmp_path / f"m{suffix}"
        result = CliRunner().invoke(cli, ["show", *machine, "--whole-io", "-o", str(out)])
        assert result.exit_code == 0, result.output
        text = out.read_text(encoding="utf-8")
        assert not any(c in text for c in RAW_CONTROLS) and "\ufffe" not in text, suffix
        if suffix != ".html":
            ET.fromstring(text.encode())  # well-formed XML
    back = topo.load_topology(tmp_path / "m.xml")  # topo reads back what it wrote
    assert len(back.cores) == 2
    if source == "root":
        assert [o.name for o in back.os_devices] == ["eth\\xff\\x1b0"]  # shown escaped, as printable does
        assert back.packages[0].model == "Bad\\x00\\x01\\x1b\\x07\\ufffeCPU"
    if LSTOPO is not None:
        lstopo = subprocess.run([LSTOPO, "-i", str(tmp_path / "m.xml")], capture_output=True, text=True, timeout=60)
        assert lstopo.returncode == 0 and lstopo.stdout.startswith("Machine"), lstopo.stderr


@pytest.mark.parametrize("args", [[], ["--long"], ["-v"], ["--of", "ascii"], ["--only", "os"], ["--json"]])
def test_text_forms_of_names_that_are_not_utf8_are_escaped(hostile_root, tmp_path, args):
    for machine in (["--root", hostile_root], ["--from", hostile_json(tmp_path, hostile_root)]):
        result = CliRunner().invoke(cli, ["show", *machine, "--whole-io", *args])
        assert result.exit_code == 0, result.output  # no UnicodeEncodeError
        assert not any(c in result.output for c in RAW_CONTROLS) and "\ud800" not in result.output
    if args == ["--only", "os"]:
        assert 'Net "eth\\xff\\x1b0"' in result.output
