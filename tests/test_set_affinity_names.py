"""A device named the way its caller knows it: set_affinity and `topo plan --devices` take a GPU or
MIG UUID (with or without its prefix, or torch's uuid object) or a PCI bus id in any of its forms,
and get that GPU's CPUs whatever CUDA_VISIBLE_DEVICES says. On the generated DGX A100 and H100 of
tests/machines.py, their GPUs reported by the stand-in NVML with UUIDs shaped as NVML's."""

from __future__ import annotations

import json
import sys
import uuid

import pytest
from click.testing import CliRunner

import machines
from topo.launcher.affinity import AffinityError, plan_affinity
from test_set_affinity_dgx import nvml_of
from topo.discovery import discover
from topo.cli.machine import REPLAY_ENV
from topo.cli import main as cli

import fake_pynvml  # noqa: E402  (tests/fakes is on sys.path through test_set_affinity_dgx)

PCI = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def described(m: machines.Machine) -> dict:
    """nvml_of(m) with NVML-shaped UUIDs, and two MIG instances on the last GPU."""
    nvml = nvml_of(m)
    for i, gpu in enumerate(nvml["gpus"]):
        gpu["uuid"] = f"GPU-{i:08x}-aaaa-bbbb-cccc-{i:012x}"
    nvml["gpus"][-1]["mig"] = [f"MIG-{j:08x}-dddd-eeee-ffff-{j:012x}" for j in (1, 2)]
    return nvml


@pytest.fixture(scope="module")
def dgx(tmp_path_factory):
    """name -> (root, nvml description, topology) for the DGX A100 and H100."""
    built = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(REPLAY_ENV, "1")
        mp.setitem(sys.modules, "pynvml", fake_pynvml)
        for name, make in (("dgxa100", machines.dgx_a100), ("dgxh100", machines.dgx_h100)):
            m = make()
            root = machines.build(m, tmp_path_factory.mktemp(name))
            nvml = described(m)
            fake_pynvml.load(nvml)
            built[name] = (root, nvml, discover(root, live_probes=True))
    return built


def gpu(topology, index):
    return next(d for d in topology.devices if d.kind == "gpu" and d.index == index)


@pytest.mark.parametrize("name", ["dgxa100", "dgxh100"])
def test_every_form_of_a_gpus_name_gives_its_local_rank(dgx, name):
    _, _, t = dgx[name]
    for index in range(8):
        device = gpu(t, index)
        bare = device.uuid.removeprefix("GPU-")
        bus = device.busid  # 0000:bb:dd.f
        forms = [device.uuid, device.uuid[:13], bare, bare.upper(), uuid.UUID(bare), bus, bus[5:],
                 "0000" + bus.upper(), f" {bus} "]
        by_index = plan_affinity(t, index, memory="bind", env=PCI)
        for form in forms:
            got = plan_affinity(t, form, memory="bind", env=PCI)
            assert (got.device, got.cpus, got.memory_nodes) == (index, by_index.cpus, by_index.memory_nodes), form


def test_a_name_finds_its_gpu_whatever_cuda_visible_devices_says(dgx):
    _, _, t = dgx["dgxa100"]
    g1, g3, g6 = gpu(t, 1), gpu(t, 3), gpu(t, 6)
    # Ray without isolation: every worker sees "0,1"; index 0 would be GPU0 for both, a UUID is not
    shared = {**PCI, "CUDA_VISIBLE_DEVICES": "0,1"}
    assert plan_affinity(t, 0, env=shared).device == 0
    got = plan_affinity(t, g1.uuid, env=shared)
    assert (got.device, got.cpus) == (1, plan_affinity(t, 1, env=shared).cpus)
    # isolated: the worker sees only its GPU, and is the one process on it
    alone = plan_affinity(t, g3.busid, env={**PCI, "CUDA_VISIBLE_DEVICES": "3"})
    assert (alone.device, alone.cpus) == (3, plan_affinity(t, 0, env={**PCI, "CUDA_VISIBLE_DEVICES": "3"}).cpus)
    # isolated, but 8 workers share the machine: the plan is the machine's, this GPU is rank 3
    eight = plan_affinity(t, g3.uuid, 8, env={**PCI, "CUDA_VISIBLE_DEVICES": "3"})
    assert (eight.device, eight.cpus) == (3, plan_affinity(t, 3, 8, env=PCI).cpus)
    # a GPU the variables do not list at all: placed among every GPU of the machine
    hidden = plan_affinity(t, g6.uuid, env=shared)
    assert (hidden.device, hidden.cpus) == (6, plan_affinity(t, 6, env=PCI).cpus)


def test_a_mig_instance_runs_where_its_gpu_sits(dgx):
    _, nvml, t = dgx["dgxa100"]
    last = gpu(t, 7)
    mig = nvml["gpus"][-1]["mig"][0]
    assert plan_affinity(t, mig, env=PCI).device == last.index
    assert plan_affinity(t, mig.removeprefix("MIG-"), env=PCI).device == last.index
    # two instances of one GPU listed: the name does not say which rank this process is
    both = {**PCI, "CUDA_VISIBLE_DEVICES": ",".join(nvml["gpus"][-1]["mig"])}
    with pytest.raises(AffinityError, match=r"device 'MIG-00000001.*': 2 visible MIG instances share GPU 7 "
                                            r"\(CUDA_VISIBLE_DEVICES=.*\); pass the local index"):
        plan_affinity(t, mig, env=both)


def test_names_that_match_nothing_say_so_and_how_to_name_a_device(dgx):
    _, _, t = dgx["dgxa100"]
    with pytest.raises(AffinityError, match=r"^device '99:00.0': no accelerator at PCI bus id 0000:99:00.0 "
                                            r"\(this machine's: 0000:.*\); name the device as a local index, a "
                                            r"GPU-/MIG- UUID"):
        plan_affinity(t, "99:00.0", env=PCI)
    with pytest.raises(AffinityError, match=r"^device 'GPU-ffff': no GPU UUID starts with 'GPU-ffff' \(known: GPU-0"):
        plan_affinity(t, "GPU-ffff", env=PCI)
    with pytest.raises(AffinityError, match=r"^device '12345678-1234-1234-1234-123456789abc': no GPU or MIG instance "
                                            r"has this UUID \(known: GPU-0"):
        plan_affinity(t, "12345678-1234-1234-1234-123456789abc", env=PCI)
    with pytest.raises(AffinityError, match=r"device 'GPU-00000006-aaaa-bbbb-cccc-000000000006' is GPU 6 "
                                            r"\(0000:.*\), local rank 6, past the nproc_per_node=4 devices the job "
                                            r"uses; pass nproc_per_node=8 or name one of the job's devices"):
        plan_affinity(t, gpu(t, 6).uuid, 4, env=PCI)
    with pytest.raises(AffinityError, match=r"device 'gpu0' is not a device name: give a local index"):
        plan_affinity(t, "gpu0", env=PCI)


def plan_cli(root, nvml, *args):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(REPLAY_ENV, "1")
        mp.setitem(sys.modules, "pynvml", fake_pynvml)
        fake_pynvml.load(nvml)
        return CliRunner().invoke(cli, ["plan", "--root", str(root), *args], catch_exceptions=False)


def test_topo_plan_devices_takes_uuids_and_bus_ids(dgx):
    root, nvml, t = dgx["dgxh100"]
    g2, g5 = gpu(t, 2), gpu(t, 5)
    by_id = plan_cli(root, nvml, "--mode", "exclusive", "--devices", "5,2")
    assert by_id.exit_code == 0, by_id.output
    for names in (f"{g5.uuid},{g2.busid}", f"{g5.busid[5:]},{g2.uuid.removeprefix('GPU-')}",
                  f"5,00000000:{g2.busid[5:].upper()}"):
        got = plan_cli(root, nvml, "--mode", "exclusive", "--devices", names)
        assert got.exit_code == 0, got.output
        assert json.loads(got.output) == json.loads(by_id.output), names
    bad = plan_cli(root, nvml, "--mode", "exclusive", "--devices", "0,GPU-ffff")
    assert bad.exit_code == 2
    assert "--devices '0,GPU-ffff': device 'GPU-ffff': no GPU UUID starts with 'GPU-ffff'" in bad.output
