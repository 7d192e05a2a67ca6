"""gpu_affinity's own DGX test cases, run against topo's gpu_affinity modes.

Source of the expected values: NVIDIA/gpu_affinity, tests/test_dgx.py (commit d1f4fbe), Copyright (c)
2020-2023 NVIDIA CORPORATION, Apache License 2.0. Each case there mocks NVML's NODE and SOCKET affinity
and the SMT sibling pairs of a DGX-1V, DGX-2H, DGX A100 (NPS4: four NUMA nodes per socket, only half
of them next to a GPU) and DGX H100, then checks every GPU's CPUs for every combination of scope,
balanced and multithreading. The same machines are built here with `topo.synthetic` (Linux's
numbering: core c's sibling is c + cores), and the references are copied as (start, stop, step)
ranges of physical cores, doubled with their siblings for all-logical.

Every case of that file is here and matches: none of them is one where gpu_affinity crashes or
drops CPUs (those keep topo's own result; see test_plan_examples).
"""

from __future__ import annotations

import itertools

import pytest

from topo import planners
from topo.cpuset import CpuSet
from topo.synthetic import synthetic

# (description, GPU -> NUMA node, cores per machine) of each DGX, as gpu_affinity's mocks describe it
MACHINES = {
    "dgx1v": ("pack:2 core:20 pu:2", [0] * 4 + [1] * 4, 40),
    "dgx2h": ("pack:2 core:24 pu:2", [0] * 8 + [1] * 8, 48),
    "dgxa100": ("pack:2 numa:4 core:16 pu:2", [3, 3, 1, 1, 7, 7, 5, 5], 128),
    "dgxh100": ("pack:2 core:56 pu:2", [0] * 4 + [1] * 4, 112),
}


def per_gpu(*groups):
    """[(gpus, [(start, stop, step), ...]), ...] -> {gpu: [ranges]}"""
    return {g: list(spans) for gpus, spans in groups for g in gpus}


def shifted(gpus, first, stop, step):
    """GPU gpus[i] gets range(first + i, stop, step): gpu_affinity's interleaved references."""
    return [((g,), [(first + i, stop, step)]) for i, g in enumerate(gpus)]


def each(gpus, first, width):
    """GPU gpus[i] gets cores first + i*width .. + width: the contiguous and single references."""
    return [((g,), [(first + i * width, first + (i + 1) * width, 1)]) for i, g in enumerate(gpus)]


NODE, SOCKET, BOTH = ("node",), ("socket",), ("node", "socket")
A, B = range(0, 4), range(4, 8)

CASES = [
    # system, test name in gpu_affinity, mode, scopes, reference, max_physical_cores
    ("dgx1v", "test_all", "all", BOTH, per_gpu((A, [(0, 20, 1)]), (B, [(20, 40, 1)])), None),
    ("dgx1v", "test_single", "single", BOTH, per_gpu((A, [(0, 1, 1)]), (B, [(20, 21, 1)])), None),
    ("dgx1v", "test_single_unique", "single-unique", BOTH, per_gpu(*each(A, 0, 1), *each(B, 20, 1)), None),
    ("dgx1v", "test_unique_contiguous", "unique-contiguous", BOTH, per_gpu(*each(range(8), 0, 5)), None),
    ("dgx1v", "test_unique_interleaved", "unique-interleaved", BOTH,
     per_gpu(*shifted(A, 0, 20, 4), *shifted(B, 20, 40, 4)), None),

    ("dgx2h", "test_all", "all", BOTH, per_gpu((range(8), [(0, 24, 1)]), (range(8, 16), [(24, 48, 1)])), None),
    ("dgx2h", "test_single", "single", BOTH, per_gpu((range(8), [(0, 1, 1)]), (range(8, 16), [(24, 25, 1)])),
     None),
    ("dgx2h", "test_single_unique", "single-unique", BOTH,
     per_gpu(*each(range(8), 0, 1), *each(range(8, 16), 24, 1)), None),
    ("dgx2h", "test_unique_contiguous", "unique-contiguous", BOTH, per_gpu(*each(range(16), 0, 3)), None),
    ("dgx2h", "test_unique_interleaved", "unique-interleaved", BOTH,
     per_gpu(*shifted(range(8), 0, 24, 8), *shifted(range(8, 16), 24, 48, 8)), None),

    ("dgxa100", "test_all_node", "all", NODE,
     per_gpu(((0, 1), [(48, 64, 1)]), ((2, 3), [(16, 32, 1)]), ((4, 5), [(112, 128, 1)]), ((6, 7), [(80, 96, 1)])),
     None),
    ("dgxa100", "test_all_socket", "all", SOCKET, per_gpu((A, [(0, 64, 1)]), (B, [(64, 128, 1)])), None),
    ("dgxa100", "test_all_socket_max63", "all", SOCKET,
     per_gpu((A, [(0, 47, 1), (48, 64, 1)]), (B, [(64, 111, 1), (112, 128, 1)])), 63),
    ("dgxa100", "test_single", "single", BOTH,
     per_gpu(((0, 1), [(48, 49, 1)]), ((2, 3), [(16, 17, 1)]), ((4, 5), [(112, 113, 1)]), ((6, 7), [(80, 81, 1)])),
     None),
    ("dgxa100", "test_single_unique", "single-unique", BOTH,
     per_gpu(*each((0, 1), 48, 1), *each((2, 3), 16, 1), *each((4, 5), 112, 1), *each((6, 7), 80, 1)), None),
    ("dgxa100", "test_unique_contiguous_node", "unique-contiguous", NODE,
     per_gpu(*each((0, 1), 48, 8), *each((2, 3), 16, 8), *each((4, 5), 112, 8), *each((6, 7), 80, 8)), None),
    # NPS4, scope socket: each GPU's node cores, then the device-less cores of the socket dealt to them
    ("dgxa100", "test_unique_contiguous_socket", "unique-contiguous", SOCKET,
     per_gpu(((0,), [(48, 56, 1), (32, 40, 1)]), ((1,), [(56, 64, 1), (40, 48, 1)]),
             ((2,), [(16, 24, 1), (0, 8, 1)]), ((3,), [(24, 32, 1), (8, 16, 1)]),
             ((4,), [(112, 120, 1), (96, 104, 1)]), ((5,), [(120, 128, 1), (104, 112, 1)]),
             ((6,), [(80, 88, 1), (64, 72, 1)]), ((7,), [(88, 96, 1), (72, 80, 1)])), None),
    ("dgxa100", "test_unique_interleaved_node", "unique-interleaved", NODE,
     per_gpu(*shifted((0, 1), 48, 64, 2), *shifted((2, 3), 16, 32, 2), *shifted((4, 5), 112, 128, 2),
             *shifted((6, 7), 80, 96, 2)), None),
    ("dgxa100", "test_unique_interleaved_socket", "unique-interleaved", SOCKET,
     per_gpu(((0,), [(48, 64, 2), (32, 48, 2)]), ((1,), [(49, 64, 2), (33, 48, 2)]),
             ((2,), [(16, 32, 2), (0, 16, 2)]), ((3,), [(17, 32, 2), (1, 16, 2)]),
             ((4,), [(112, 128, 2), (96, 112, 2)]), ((5,), [(113, 128, 2), (97, 112, 2)]),
             ((6,), [(80, 96, 2), (64, 80, 2)]), ((7,), [(81, 96, 2), (65, 80, 2)])), None),

    ("dgxh100", "test_all", "all", BOTH, per_gpu((A, [(0, 56, 1)]), (B, [(56, 112, 1)])), None),
    ("dgxh100", "test_single", "single", BOTH, per_gpu((A, [(0, 1, 1)]), (B, [(56, 57, 1)])), None),
    ("dgxh100", "test_single_unique", "single-unique", BOTH, per_gpu(*each(A, 0, 1), *each(B, 56, 1)), None),
    ("dgxh100", "test_unique_contiguous", "unique-contiguous", BOTH, per_gpu(*each(range(8), 0, 14)), None),
    ("dgxh100", "test_unique_interleaved", "unique-interleaved", BOTH,
     per_gpu(*shifted(A, 0, 56, 4), *shifted(B, 56, 112, 4)), None),
]


def expected(spans, cores: int, all_logical: bool) -> CpuSet:
    ids = [c for start, stop, step in spans for c in range(start, stop, step)]
    return CpuSet(ids + [c + cores for c in ids] if all_logical else ids)


@pytest.mark.parametrize("system,name,mode,scopes,reference,max_cores", CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_gpu_affinity_dgx_case(system, name, mode, scopes, reference, max_cores):
    desc, gpu_nodes, cores = MACHINES[system]
    t = synthetic(desc, pu_order="scatter", gpu_nodes=gpu_nodes)
    for scope, balanced, mt in itertools.product(scopes, (True, False), ("all-logical", "single-logical")):
        plan = planners.plan(t, mode, scope=scope, balanced=balanced, multithreading=mt,
                             max_physical_cores=max_cores)
        got = {p.device: p.cpus() for p in plan.workers()}
        want = {g: expected(spans, cores, mt == "all-logical") for g, spans in reference.items()}
        assert got == want, (name, scope, balanced, mt)
