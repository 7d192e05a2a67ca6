"""Output files of `topo show` and `topo plan`: never overwritten without --force, never a FIFO or
device, never through a planted link, written whole or not at all."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from topo.cli import main as cli

TWO_CORE = FIXTURES / "console" / "2arm-2c.txt"


@pytest.fixture(scope="module")
def root(hwloc_roots):
    return str(hwloc_roots.root("2arm-2c.tar.bz2"))


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def one_error(result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.output.startswith("topo: error: ") and result.output.count("\n") == 1, result.output
    for word in words:
        assert word in result.output, (word, result.output)


def test_positional_file_and_output_write_the_format_their_name_names(root, tmp_path):
    assert run("show", "--root", root, str(tmp_path / "m.txt")).exit_code == 0
    assert (tmp_path / "m.txt").read_text() == TWO_CORE.read_text()
    assert run("show", "--root", root, "-o", str(tmp_path / "m.json")).exit_code == 0
    assert json.loads((tmp_path / "m.json").read_text())["pus"] == "0-1"
    # --of names the format whatever the name, as lstopo's
    assert run("show", "--root", root, "--of", "json", str(tmp_path / "m.out")).exit_code == 0
    assert json.loads((tmp_path / "m.out").read_text())["pus"] == "0-1"
    assert run("show", "--root", root, "--of", "console", "-p", str(tmp_path / "p.out")).exit_code == 0
    assert (tmp_path / "p.out").read_text() == (FIXTURES / "console" / "2arm-2c-p.txt").read_text()
    result = run("show", "--root", root, "-")
    assert result.exit_code == 0 and result.output == TWO_CORE.read_text()
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind


def test_created_file_has_the_umask_mode(root, tmp_path):
    old = os.umask(0o027)
    try:
        assert run("show", "--root", root, str(tmp_path / "m.txt")).exit_code == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "m.txt").stat().st_mode) == 0o640


def test_existing_file_is_kept_without_force(root, tmp_path):
    target = tmp_path / "m.txt"
    target.write_text("mine\n")
    one_error(run("show", "--root", root, str(target)), "File exists", "--force")
    assert target.read_text() == "mine\n"
    for force in ("-f", "--force"):
        target.write_text("mine\n")
        assert run("show", "--root", root, str(target), force).exit_code == 0
        assert target.read_text() == TWO_CORE.read_text()


def test_a_planted_link_is_replaced_not_followed(root, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "m.txt"
    link.symlink_to(victim)
    one_error(run("show", "--root", root, str(link)), "File exists")
    assert run("show", "--root", root, str(link), "--force").exit_code == 0
    assert victim.read_text() == "precious\n"
    assert not link.is_symlink() and link.read_text() == TWO_CORE.read_text()
    dangling = tmp_path / "d.txt"
    dangling.symlink_to(tmp_path / "would-be-created")
    one_error(run("show", "--root", root, str(dangling)), "File exists")
    assert not (tmp_path / "would-be-created").exists()


def special_files(tmp_path):
    fifo = tmp_path / "fifo.txt"
    os.mkfifo(fifo)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock.txt"))
    return {"a FIFO": fifo, "a socket": tmp_path / "sock.txt", "a character device": "/dev/null",
            "a directory": tmp_path}, sock


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_fifo_socket_device_or_directory_is_refused_without_blocking(root, tmp_path, force):
    targets, sock = special_files(tmp_path)
    try:
        for what, target in targets.items():
            # a subprocess with a timeout: a regression would block on the FIFO
            for args in (["show", "--root", root, "--of", "console", str(target)],
                         ["plan", "--root", root, "--mode", "exclusive", "--devices", "none", "-o", str(target)]):
                out = subprocess.run([sys.executable, "-m", "topo", *args, *force], capture_output=True,
                                     text=True, timeout=60)
                assert out.returncode == 2 and out.stdout == "", (what, out.stderr)
                assert out.stderr == f"topo: error: cannot write {target}: it is {what}, not a regular file; " \
                                     "name a file to write\n"
    finally:
        sock.close()


def test_plan_refuses_before_writing_anything(root, tmp_path):
    bind, picture = tmp_path / "bind.json", tmp_path / "plan.svg"
    picture.write_text("old picture")
    result = run("plan", "--root", root, "--mode", "exclusive", "--devices", "none", "-o", str(bind),
                 "--picture", str(picture))
    one_error(result, str(picture), "File exists")
    assert not bind.exists() and picture.read_text() == "old picture"
    result = run("plan", "--root", root, "--mode", "exclusive", "--devices", "none", "-o", str(bind),
                 "--picture", str(picture), "-f")
    assert result.exit_code == 0, result.output
    assert json.loads(bind.read_text())["bind_config"] and picture.read_text().startswith("<svg")
    one_error(run("plan", "--root", root, "--mode", "exclusive", "--devices", "none", "-o", str(bind)),
              str(bind), "File exists")
    one_error(run("plan", "--root", root, "--mode", "exclusive", "--devices", "none", "-o", str(picture),
                  "--picture", str(picture), "-f"), "same file")


def test_bad_names_are_refused_before_the_machine_is_read(tmp_path):
    absent = str(tmp_path / "absent")
    one_error(run("show", "--root", absent, str(tmp_path / "noext")), "unknown format '(no extension)'", "--of")
    one_error(run("show", "--root", absent, str(tmp_path / "a.txt"), "-o", str(tmp_path / "b.txt")),
              "give one of them")
    one_error(run("show", "--root", absent, "--of", "png"), "png")
    one_error(run("show", "--root", absent, str(tmp_path / "no" / "a.txt")), "cannot write", "no directory")
    assert not list(tmp_path.iterdir())


def test_a_file_made_between_the_check_and_the_write_is_kept(tmp_path, monkeypatch):
    from topo.errors import UsageError
    from topo.cli import machine

    target = tmp_path / "m.txt"

    def racing_check(path, force=False):
        target.write_text("theirs\n")  # another writer takes the name after the check

    monkeypatch.setattr(machine, "check_output", racing_check)
    with pytest.raises(UsageError, match="File exists"):
        machine.write_text(str(target), "ours\n")
    assert target.read_text() == "theirs\n" and sorted(tmp_path.iterdir()) == [target]
    machine.write_text(str(target), "ours\n", force=True)
    assert target.read_text() == "ours\n" and sorted(tmp_path.iterdir()) == [target]
