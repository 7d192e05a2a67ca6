"""The `topo` command as a whole: every command documented with an example, one error format."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from topo_cli import COMMANDS, main


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
