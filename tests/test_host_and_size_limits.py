"""Host names DNS would refuse (--master_addr=a..b, a 64-character label, such a first host in
SLURM_JOB_NODELIST) and bind JSON files over the size limit: one line naming the value and the
fix, never a UnicodeError or MemoryError traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from topo.launcher.network import check_host, resolve_master
from topo.launcher.slurm import launch_defaults, run_defaults, task_env
from topo.planners.bindload import BIND_JSON_LIMIT, load_bind
from topo.errors import ParseError, UsageError

LONG = "x" * 64
ENV = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}


@pytest.mark.parametrize("name, words", [
    ("a..b", "has an empty label (two dots in a row, or a leading dot)"),
    (".a", "has an empty label"),
    (LONG, "has a label of 64 characters, more than 63"),
    (f"ok.{LONG}.example", "has a label of 64 characters"),
    ("a." * 127 + "b", "is 255 characters long, more than the 253 of a host name"),
    ("", "is empty"),
    ("\u00e9" * 60, "is not a host name IDNA can encode"),  # its punycode label is over 63 octets
])
def test_names_dns_would_refuse_are_one_line(name, words):
    with pytest.raises(UsageError) as err:
        resolve_master(name)
    text = str(err.value)
    assert text.startswith("--master_addr=") and words in text and "\n" not in text
    assert text.endswith("give an IP address or a host name of dot-separated labels of 1 to 63 characters")


@pytest.mark.parametrize("name", ["localhost", "a", "x" * 63, "node-1.cluster.example.", "127.0.0.1", "[::1]"])
def test_names_within_the_limits_pass_the_check(name):
    check_host(name.strip("[]"))


def topo(*args, env=None):
    return subprocess.run([sys.executable, "-m", "topo", *args], capture_output=True, text=True, timeout=60,
                          env=env or ENV)


def test_launch_with_a_bad_master_addr_is_one_line(tmp_path):
    script = tmp_path / "x.py"
    script.write_text("")
    for value in ("a..b", LONG):
        r = topo("launch", f"--master_addr={value}", "--dry-run", str(script))
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith(f"topo: error: --master_addr={value[:60]!r}"[:40]) and "Traceback" not in r.stderr


SLURM = {"SLURM_JOB_ID": "5", "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "1"}


@pytest.mark.parametrize("nodelist, words", [
    ("a..b,c", "starts with host 'a..b', which has an empty label"),
    (f"{LONG}[1-2],c", "which has a label of 65 characters, more than 63"),
])
def test_a_bad_first_host_from_slurm_is_one_line(nodelist, words):
    environ = {**SLURM, "SLURM_JOB_NODELIST": nodelist}
    for defaults in (launch_defaults, run_defaults):
        with pytest.raises(UsageError) as err:
            defaults(environ, {})
        assert words in str(err.value) and "give the master address yourself" in str(err.value)
    # the flag given, Slurm's host is not needed and not checked
    assert "master_addr" not in launch_defaults(environ, {"master_addr": "127.0.0.1"}).values
    # topo bind under srun: MASTER_ADDR set, Slurm's host is not needed either
    task = {**environ, "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}
    with pytest.raises(UsageError):
        task_env(task)
    assert "MASTER_ADDR" not in task_env({**task, "MASTER_ADDR": "10.0.0.1"})


def test_topo_run_under_slurm_with_a_bad_node_list_is_one_line(tmp_path):
    script = tmp_path / "x.py"
    script.write_text("")
    r = topo("run", "--dry-run", str(script), env={**ENV, **SLURM, "SLURM_JOB_NODELIST": "a..b,c"})
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "Slurm's node list 'a..b,c' starts with host 'a..b'" in r.stderr and "Traceback" not in r.stderr


# ------------------------------------------------------------------ bind JSON size
@pytest.fixture
def huge_bind(tmp_path):
    path = tmp_path / "huge.json"
    with open(path, "wb") as fh:
        fh.truncate(3 << 30)  # 3 GB, sparse: no disk, and no memory unless something reads it
    return path


def test_a_bind_json_over_the_limit_is_refused_by_its_size(huge_bind):
    with pytest.raises(ParseError) as err:
        load_bind(str(huge_bind))
    assert f"it is {3 << 30} bytes, more than the {BIND_JSON_LIMIT} a bind JSON can be" in str(err.value)


def test_a_bind_json_at_the_limit_is_read(tmp_path):
    path = tmp_path / "padded.json"
    body = b'{"bind_config": {"bind_cpu_mode": "none"}}'
    path.write_bytes(body + b" " * (BIND_JSON_LIMIT - len(body)))
    assert load_bind(str(path)).path == str(path)


def test_validate_bind_and_launch_refuse_it_alike(huge_bind, tmp_path):
    script = tmp_path / "x.py"
    script.write_text("")
    words = f"Failed to load bind_numa json file: {huge_bind}. (it is {3 << 30} bytes, more than the {BIND_JSON_LIMIT}"
    for args in (["validate", str(huge_bind)], ["bind", "--bind-file", str(huge_bind), "--", "true"],
                 ["launch", f"--bind_numa={huge_bind}", "--dry-run", str(script)]):
        r = topo(*args)
        assert r.returncode in (1, 2) and words in r.stderr + r.stdout, (args, r.stderr, r.stdout)
        assert "MemoryError" not in r.stderr and "Traceback" not in r.stderr
