"""gpu_affinity's own DGX cases, through `topo.set_affinity` with a stand-in NVML.

The expected CPU sets are copied from NVIDIA/gpu_affinity `tests/test_dgx.py` at commit
d1f4fbe547a52201c5d2dda60ab65904dcb767db (Copyright (c) 2020-2023, NVIDIA CORPORATION, Apache
License 2.0): DGX-1V, DGX-2H, DGX A100 and DGX H100, every mode, both scopes, balanced or not,
all or single logical CPU per core. As there, each GPU's call starts from every CPU allowed and
`os.sched_setaffinity`/`os.sched_getaffinity` are stood in for (this machine has two CPUs).

Here the machine is not a list of NVML answers but a generated sysfs root (tests/machines.py)
whose GPUs the fake pynvml reports with their NODE and SOCKET affinities; topo discovers it and
plans; set_affinity applies the plan with the same calls as on a real machine.
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest

import machines
from topo.launcher import affinity
from topo.discovery import discover

sys.path.insert(0, str(Path(__file__).parent / "fakes"))
import fake_pynvml  # noqa: E402

MODES = ("all", "single", "single_unique", "unique_contiguous", "unique_interleaved")


def cores_set(start, stop, step=1, offset=None):
    """gpu_affinity's helper: range(start, stop, step), plus the same shifted by the SMT offset."""
    the_list = list(range(start, stop, step))
    if offset is not None:
        the_list += list(range(start + offset, stop + offset, step))
    return set(the_list)


# ---- the machines ------------------------------------------------------------------------------


def two_socket(name: str, cores: int, gpus: int) -> machines.Machine:
    """One NUMA node per socket, SMT2 numbered as Linux does (sibling of CPU c is c + cores), the
    first half of the GPUs on socket 0 (DGX-1V: 2x20 cores, 8 GPUs; DGX-2H: 2x24 cores, 16 GPUs)."""
    half = cores // 2
    complexes = [machines.Complex(f"0000:{0x10 + 8 * i:02x}", i * 2 // gpus,
                                  machines.Switch((machines.gpu(f"0000:{0x12 + 8 * i:02x}:00.0", "1db5"),)))
                 for i in range(gpus)]
    return machines.Machine(name, lambda c: ((c % cores) // half, c % half, (c % cores) // half), 2 * cores, 2,
                            machines._smt(cores), "Intel(R) Xeon(R) CPU", complexes)


MACHINES = {
    "dgx1v": (lambda: two_socket("dgx-1v", 40, 8), 8, 40),
    "dgx2h": (lambda: two_socket("dgx-2h", 48, 16), 16, 48),
    "dgxa100": (machines.dgx_a100, 8, 128),
    "dgxh100": (machines.dgx_h100, 8, 112),
}


def nvml_of(m: machines.Machine) -> dict:
    """What NVML says of each GPU: its NUMA node, and the CPUs of that node and of its socket."""
    def cpus(where):
        return machines._cpulist([c for c in range(m.ncpus) if where(m.cpu(c))])

    gpus = []
    for cx in sorted(m.complexes, key=lambda cx: cx.host):
        for ep in machines.endpoints(cx.child):
            if ep.vendor != "10de":
                continue
            package = next(m.cpu(c)[0] for c in range(m.ncpus) if m.cpu(c)[2] == cx.numa_node)
            gpus.append({"busid": ep.busid, "uuid": f"GPU-{len(gpus):04d}-{ep.busid[5:7]}", "name": m.name,
                         "numa_node": cx.numa_node, "node_cpus": cpus(lambda t: t[2] == cx.numa_node),
                         "socket_cpus": cpus(lambda t: t[0] == package)})
    return {"gpus": sorted(gpus, key=lambda g: g["busid"])}


@pytest.fixture(scope="module")
def topologies(tmp_path_factory):
    """Each machine discovered once, with the fake pynvml answering for its GPUs."""
    built = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "pynvml", fake_pynvml)
        for name, (make, _, _) in MACHINES.items():
            m = make()
            root = machines.build(m, tmp_path_factory.mktemp(name))
            fake_pynvml.load(nvml_of(m))
            built[name] = discover(root, live_probes=True)
    return built


class MockAffinity:
    """os.sched_getaffinity / os.sched_setaffinity of a process with `num_cores` CPUs allowed."""

    def __init__(self, num_cores):
        self.cpus = set(range(num_cores))

    def get(self, pid):
        return set(self.cpus)

    def set(self, pid, mask):
        if pid == 0:
            self.cpus = set(mask)


@pytest.fixture
def on(topologies, monkeypatch):
    """set_affinity on machine `name`: returns the call, with gpu_affinity's test conditions."""
    for var in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)

    def machine(name):
        topology = topologies[name]
        monkeypatch.setattr(affinity, "this_machine", lambda: topology)

        def call(gpu_id, nproc_per_node, **params):
            mock = MockAffinity(len(topology.allowed_pus))
            monkeypatch.setattr(os, "sched_getaffinity", mock.get)
            monkeypatch.setattr(os, "sched_setaffinity", mock.set)
            return affinity.set_affinity(gpu_id, nproc_per_node, **params)
        return call
    return machine


def execute(call, num_gpus, sibling_offset, modes, scopes, build_reference, **limits):
    """gpu_affinity's DGX*.execute: every combination, every GPU, against the reference."""
    for mode, scope, balanced, multithreading in itertools.product(
            modes, scopes, (True, False), ("all_logical", "single_logical")):
        offset = sibling_offset if multithreading == "all_logical" else None
        reference = build_reference(offset)
        for gpu_id in range(num_gpus):
            got = call(gpu_id, num_gpus, mode=mode, scope=scope, balanced=balanced, multithreading=multithreading,
                       **limits)
            assert got == reference[gpu_id], (mode, scope, balanced, multithreading, gpu_id)


BOTH = ("node", "socket")

# machine -> [(modes, scopes, reference(offset) -> {gpu: set}, limits)], as in test_dgx.py
CASES = {
    "dgx1v": [
        (["all"], BOTH, lambda o: {i: cores_set(0, 20, offset=o) if i < 4 else cores_set(20, 40, offset=o)
                                   for i in range(8)}, {}),
        (["single"], BOTH, lambda o: {i: cores_set(0, 1, offset=o) if i < 4 else cores_set(20, 21, offset=o)
                                      for i in range(8)}, {}),
        (["single_unique"], BOTH, lambda o: {i: cores_set(i, i + 1, offset=o) if i < 4
                                             else cores_set(16 + i, 17 + i, offset=o) for i in range(8)}, {}),
        (["unique_contiguous"], BOTH, lambda o: {i: cores_set(5 * i, 5 * i + 5, offset=o) for i in range(8)}, {}),
        (["unique_interleaved"], BOTH, lambda o: {i: cores_set(i, 20, 4, offset=o) if i < 4
                                                  else cores_set(16 + i, 40, 4, offset=o) for i in range(8)}, {}),
    ],
    "dgx2h": [
        (["all"], BOTH, lambda o: {i: cores_set(0, 24, offset=o) if i < 8 else cores_set(24, 48, offset=o)
                                   for i in range(16)}, {}),
        (["single"], BOTH, lambda o: {i: cores_set(0, 1, offset=o) if i < 8 else cores_set(24, 25, offset=o)
                                      for i in range(16)}, {}),
        (["single_unique"], BOTH, lambda o: {i: cores_set(i, i + 1, offset=o) if i < 8
                                             else cores_set(16 + i, 17 + i, offset=o) for i in range(16)}, {}),
        (["unique_contiguous"], BOTH, lambda o: {i: cores_set(3 * i, 3 * i + 3, offset=o) for i in range(16)}, {}),
        (["unique_interleaved"], BOTH, lambda o: {i: cores_set(i, 24, 8, offset=o) if i < 8
                                                  else cores_set(16 + i, 48, 8, offset=o) for i in range(16)}, {}),
    ],
    "dgxh100": [
        (["all"], BOTH, lambda o: {i: cores_set(0, 56, offset=o) if i < 4 else cores_set(56, 112, offset=o)
                                   for i in range(8)}, {}),
        (["single"], BOTH, lambda o: {i: cores_set(0, 1, offset=o) if i < 4 else cores_set(56, 57, offset=o)
                                      for i in range(8)}, {}),
        (["single_unique"], BOTH, lambda o: {i: cores_set(i, i + 1, offset=o) if i < 4
                                             else cores_set(52 + i, 53 + i, offset=o) for i in range(8)}, {}),
        (["unique_contiguous"], BOTH, lambda o: {i: cores_set(14 * i, 14 * i + 14, offset=o) for i in range(8)}, {}),
        (["unique_interleaved"], BOTH, lambda o: {i: cores_set(i, 56, 4, offset=o) if i < 4
                                                  else cores_set(52 + i, 112, 4, offset=o) for i in range(8)}, {}),
    ],
}

# DGX A100: GPU i's NUMA node starts at core A100_NODE[i]; the GPU-less node below it on the same
# socket starts 16 cores lower.
A100_NODE = {0: 48, 1: 48, 2: 16, 3: 16, 4: 112, 5: 112, 6: 80, 7: 80}


def _a100(per_gpu):
    return lambda o: {i: per_gpu(A100_NODE[i], i % 2, o) for i in range(8)}


def _socket(i, o, lo0, hi0, lo1, hi1):
    return cores_set(lo0, hi0, offset=o) if i < 4 else cores_set(lo1, hi1, offset=o)


CASES["dgxa100"] = [
    (["all"], ("node",), _a100(lambda b, j, o: cores_set(b, b + 16, offset=o)), {}),
    (["all"], ("socket",), lambda o: {i: _socket(i, o, 0, 64, 64, 128) for i in range(8)}, {}),
    (["all"], ("socket",), lambda o: {i: (cores_set(0, 47, offset=o) | cores_set(48, 64, offset=o)) if i < 4
                                      else (cores_set(64, 111, offset=o) | cores_set(112, 128, offset=o))
                                      for i in range(8)}, {"max_physical_cores": 63}),
    (["single"], BOTH, _a100(lambda b, j, o: cores_set(b, b + 1, offset=o)), {}),
    (["single_unique"], BOTH, _a100(lambda b, j, o: cores_set(b + j, b + j + 1, offset=o)), {}),
    (["unique_contiguous"], ("node",), _a100(lambda b, j, o: cores_set(b + 8 * j, b + 8 * j + 8, offset=o)), {}),
    (["unique_contiguous"], ("socket",), _a100(lambda b, j, o: cores_set(b + 8 * j, b + 8 * j + 8, offset=o)
                                               | cores_set(b - 16 + 8 * j, b - 8 + 8 * j, offset=o)), {}),
    (["unique_interleaved"], ("node",), _a100(lambda b, j, o: cores_set(b + j, b + 16, 2, offset=o)), {}),
    (["unique_interleaved"], ("socket",), _a100(lambda b, j, o: cores_set(b + j, b + 16, 2, offset=o)
                                                | cores_set(b - 16 + j, b, 2, offset=o)), {}),
]

PARAMS = [pytest.param(name, i, id=f"{name}-{'+'.join(case[0])}-{'+'.join(case[1])}"
                       f"{'-max' + str(case[3]['max_physical_cores']) if case[3] else ''}")
          for name, cases in CASES.items() for i, case in enumerate(cases)]


@pytest.mark.parametrize("name, case", PARAMS)
def test_gpu_affinity_dgx_reference(on, name, case):
    modes, scopes, build_reference, limits = CASES[name][case]
    _, num_gpus, sibling_offset = MACHINES[name]
    execute(on(name), num_gpus, sibling_offset, modes, scopes, build_reference, **limits)


def test_every_mode_is_covered():
    for cases in CASES.values():
        assert {m for c in cases for m in c[0]} == set(MODES)


def test_the_stand_in_nvml_placed_the_gpus(topologies):
    """The cases test planning only if discovery saw the GPUs where NVML puts them."""
    a100 = topologies["dgxa100"]
    gpus = sorted((d for d in a100.devices if d.kind == "gpu"), key=lambda d: d.index)
    assert [(g.numa_node, g.source) for g in gpus] == [(3, "nvml"), (3, "nvml"), (1, "nvml"), (1, "nvml"),
                                                        (7, "nvml"), (7, "nvml"), (5, "nvml"), (5, "nvml")]
    assert str(gpus[0].local_cpus) == "48-63,176-191" and str(gpus[0].socket_cpus) == "0-63,128-191"
    assert len([d for d in topologies["dgx2h"].devices if d.kind == "gpu"]) == 16
