"""The click layer of topo launch / topo bind: spellings, SCRIPT ARGS boundary, help, errors."""

from __future__ import annotations

from click.testing import CliRunner

from livehost import path_with_python
from topo.cli import main
from topo.cli.launch import bind, launch
from topo.cli.stop import stop

ENV = {"PATH": path_with_python()}  # `python` on PATH, which --dry-run checks too, is this interpreter


def dry_run(*args):
    return CliRunner().invoke(main, ["launch", "--dry-run", "--python", "python", *args], env=ENV)


def test_underscore_and_dash_spellings_mean_the_same(tmp_path):
    script = tmp_path / "net.py"
    script.write_text("")
    a = dry_run("--worker_num=2", "--local_worker_num=2", "--master_port=9001", "--log_dir", str(tmp_path),
                "--cluster_time_out=5", str(script))
    b = dry_run("--worker-num=2", "--local-worker-num", "2", "--master-port=9001", f"--log-dir={tmp_path}",
                "--cluster-time-out=5", str(script))
    assert a.exit_code == b.exit_code == 0, a.output + b.output
    assert a.output == b.output
    assert "MS_TOPO_TIMEOUT=5" in a.output and "MS_SCHED_PORT=9001" in a.output


def test_options_after_the_script_belong_to_it(tmp_path):
    script = tmp_path / "net.py"
    script.write_text("")
    r = dry_run("--worker_num=1", "--local_worker_num=1", "--no-scheduler", str(script), "--join=True", "--dry-run")
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0] == f"rank 0, DEVICE_ID=0: python {script} --join=True --dry-run"


def test_unknown_launcher_option_is_rejected(tmp_path):
    r = dry_run("--worker_nums=2", "x.py")
    assert r.exit_code == 2 and "No such option '--worker_nums'" in r.output


def test_usage_errors_are_one_line_and_exit_2(tmp_path):
    r = CliRunner().invoke(main, ["launch", "--bind_core=maybe", "x.py"])
    assert r.exit_code == 2
    assert r.output == ("topo: error: --bind_core='maybe': not True, False or a JSON object: Expecting value at "
                        "line 1 column 1 (character 0)\n")


def test_grace_period_takes_ascii_decimal_seconds_only(tmp_path):
    """click's FLOAT took "١" as 1, "1_0" as 10, and "inf" and "nan"; the one-line error names the flag."""
    script = tmp_path / "net.py"
    script.write_text("")
    for odd in ("\u0661", "1_0", "1e3", "inf", "nan", "-1", "\u00b2", "604801", "9" * 5000):
        for command in (["launch", "--dry-run", "--python", "python"], ["stop"]):
            r = CliRunner().invoke(main, [*command, f"--grace-period={odd}", str(script if command[0] == "launch"
                                                                                    else tmp_path)], env=ENV)
            assert r.exit_code == 2, r.output
            assert "--grace-period" in r.output and "is not a number of seconds (ASCII digits, optionally a point " \
                "and decimals, at most 604800)" in r.output, r.output
            assert len(r.output.splitlines()) == 1
    r = dry_run("--worker_num=1", "--local_worker_num=1", "--grace-period=0.5", str(script))
    assert r.exit_code == 0, r.output


def test_commands_have_help_with_examples():
    for command in (launch, bind, stop):
        assert "Examples:" in command.help
    r = CliRunner().invoke(main, ["launch", "--help"])
    assert r.exit_code == 0 and "--bind_numa, --bind-numa" in r.output


def test_the_interpreter_is_python_from_path_as_msrun(tmp_path):
    script = tmp_path / "net.py"
    script.write_text("")
    r = CliRunner().invoke(main, ["launch", "--dry-run", "--worker_num=1", "--local_worker_num=1", "--no-scheduler",
                                  str(script)], env=ENV)
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0] == f"rank 0, DEVICE_ID=0: python {script}"
    r = CliRunner().invoke(main, ["launch", "--dry-run", "--python", "/no/such/python", str(script)])
    assert (r.exit_code, r.output) == (2, "topo: error: interpreter does not exist, --python=/no/such/python: "
                                          "give an interpreter that runs, e.g. --python python3\n")
