"""Strings from a machine or a file never reach the terminal raw: a CPU model name that clears the
screen or sets the window title, bidi overrides, control characters in the names and keys of a
loaded topology, in every text output and error message."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sysfs_builder import Machine, build
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
