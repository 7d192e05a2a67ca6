"""The `topo` command as a whole: every command documented with an example, one error format."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import machines
from topo.cli import COMMANDS, main


@pytest.mark.parametrize("command", [[]] + [[name] for name in sorted(COMMANDS)])
def test_every_help_has_a_working_example(command):
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example" in result.output
    # the examples name the command they document
    assert (f"topo {command[0]}" if command else "topo ") in result.output


@pytest.mark.parametrize("args", [
    ["show", "--bogus"],
    ["plan", "--mode"],
    ["validate"],
    ["launch", "--worker_num=x", "net.py"],
    ["nosuchcommand"],
])
def test_usage_errors_are_one_topo_error_line(args):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("topo: error: "), result.output
    assert "--help" in lines[0]


def test_library_errors_use_the_same_format(tmp_path):
    missing = tmp_path / "nope.json"
    result = CliRunner().invoke(main, ["show", "--topology", str(missing)])
    assert result.exit_code != 0
    assert result.output.startswith("topo: error: ") and len(result.output.strip().splitlines()) == 1


# The commands whose examples run here, in the order they produce each other's files; launch, bind,
# run and stop start processes (their examples run in their own tests).
RUNNABLE = ("show", "capture", "plan", "validate")


def examples(command: str) -> list[str]:
    """The `topo ...` lines of a command's --help examples, without their comments."""
    text = CliRunner().invoke(main, [command, "--help"]).output.split("Examples:", 1)[1]
    lines = (line.split("  #")[0].strip() for line in text.splitlines())
    return [line for line in lines if line.startswith("topo ")]


def test_the_examples_of_show_capture_plan_and_validate_work(tmp_path, monkeypatch):
    import shlex
    import shutil

    from conftest import SYSFS

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TOPO_ROOT", raising=False)
    # the inputs the examples name and nothing else produces: a captured directory, an hwloc XML
    # export, another host's JSON (written once `topo show --json > machine.json` has run)
    captured = machines.build(machines.dgx_a100(), tmp_path / "captured")
    shutil.copy(SYSFS / "16em64t-4s2c2t-xml.xml", tmp_path / "machine.xml")
    ran = []
    for command in RUNNABLE:
        for line in examples(command):
            args = shlex.split(line.replace("/tmp/captured", str(captured)))[1:]
            if args[0] not in RUNNABLE:  # e.g. plan's `topo launch ...`: a launcher example
                continue
            redirect = args.index(">") if ">" in args else None
            result = CliRunner().invoke(main, args[:redirect])
            assert result.exit_code == 0, (line, result.output)
            if redirect is not None:
                (tmp_path / args[redirect + 1]).write_text(result.stdout)
            if not (tmp_path / "other-host.json").exists() and (tmp_path / "machine.json").exists():
                shutil.copy(tmp_path / "machine.json", tmp_path / "other-host.json")
            ran.append(args[0])
    assert set(ran) == set(RUNNABLE), ran
    assert (tmp_path / "bind.json").exists() and (tmp_path / "plan.html").exists()


def test_an_output_file_in_a_missing_directory_is_refused_and_nothing_is_created(tmp_path):
    # as lstopo does: the directory of an output file must exist
    target = tmp_path / "missing" / "m.txt"
    result = CliRunner().invoke(main, ["show", "--output", str(target)])
    assert result.exit_code != 0
    assert result.output.startswith("topo: error: cannot write ") and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "missing").exists()
