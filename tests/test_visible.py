"""Local rank -> physical device under the runtimes' visible-device variables."""

from __future__ import annotations

import warnings
from dataclasses import replace

import pytest

from topo.cpuset import CpuSet
from topo.errors import UsageError
from topo.model import Core, Device, NumaNode, Package, Topology
from topo.visible import default_kind, find_device, hidden_warning, normal_bus_id, visible_device_ids, visible_devices

UUIDS = ["GPU-aab1", "GPU-aac2", "GPU-bbb3", "GPU-ccc4"]


def machine(devices, root="/captured") -> Topology:
    pus = CpuSet.range(0, 3)
    return Topology(
        root=root, pus=pus, allowed_pus=pus, complete_pus=pus, online_pus=pus,
        allowed_numa_nodes=CpuSet([0]), packages=(Package(0, pus),),
        numa_nodes=(NumaNode(0, pus, 0, False, pus, {0: 10}),),
        cores=tuple(Core(i, 0, CpuSet([i])) for i in range(4)), devices=tuple(devices),
    )


def gpus(n=4, vendor="nvidia", name="A100"):
    # NVML numbers GPUs in bus order: index i has the i-th bus id
    return [Device("gpu", vendor, i, f"0000:{0x10 * (i + 1):02x}:00.0", 0, CpuSet([i]), name,
                   UUIDS[i] if vendor == "nvidia" else None, "nvml")
            for i in range(n)]


def ids(devices):
    return [d.index for d in devices]


NV = machine(gpus())


@pytest.mark.parametrize("spec, expected", [
    (None, [0, 1, 2, 3]),
    ("", []),
    ("2,0", [2, 0]),
    (" 3 , 1 ", [3, 1]),
    ("1,-1,2", [1]),  # CUDA stops at the first invalid index
    ("-1", []),
    ("1,1,2", [1]),  # a repeated device ends the list too
    ("GPU-bbb,0", [2, 0]),
    ("GPU-aac2", [1]),
    ("1,-99999999999,2", [1]),
])
def test_cuda_visible_devices(spec, expected):
    env = {} if spec is None else {"CUDA_VISIBLE_DEVICES": spec}
    assert ids(visible_devices(NV, env=env)) == expected


@pytest.mark.parametrize("spec, message", [
    ("GPU-aa", "'GPU-aa' matches 2 GPUs (GPU-aab1, GPU-aac2); give more of the UUID"),
    ("GPU-zzz", "no GPU UUID starts with 'GPU-zzz' (known: GPU-aab1, GPU-aac2, GPU-bbb3, GPU-ccc4)"),
    ("gpu0", "entry 'gpu0' is neither a GPU index nor a GPU-/MIG- UUID"),
    ("0,\u0661", "entry '\u0661' is neither a GPU index"),  # ARABIC-INDIC DIGIT ONE: int() reads 1
    ("MIG-1234", "names MIG instance 'MIG-1234' but no GPU has MIG mode enabled"),
    ("4", "CUDA_VISIBLE_DEVICES names GPU 4, which this machine lacks (its GPUs are 0-3)"),
    ("0,7,1", "names GPU 7, which this machine lacks"),
    ("1,99999999999,2", "names GPU 99999999999, which this machine lacks"),
    ("2," + "9" * 5000, "9" * 60 + "...(5000 characters), which this machine lacks"),  # int() refuses > 4300 digits
])
def test_cuda_visible_devices_errors(spec, message):
    with pytest.raises(UsageError) as err:
        visible_devices(NV, env={"CUDA_VISIBLE_DEVICES": spec})
    assert message in str(err.value)


def test_uuid_without_nvml_says_where_uuids_come_from():
    t = machine([replace(d, uuid=None, source="sysfs") for d in gpus()])
    with pytest.raises(UsageError, match=r"no GPU UUIDs .*NVML: install .topo-affinity\[nvidia\]."):
        visible_devices(t, env={"CUDA_VISIBLE_DEVICES": "GPU-aab1"})


def test_legacy_mig_name_names_its_gpu():
    assert ids(visible_devices(NV, env={"CUDA_VISIBLE_DEVICES": "MIG-GPU-ccc4/1/0"})) == [3]


def test_cuda_device_order():
    assert ids(visible_devices(NV, env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1"})) == [1]
    with pytest.raises(UsageError, match="CUDA_DEVICE_ORDER='BUS' is not a CUDA order: use PCI_BUS_ID or FASTEST_FIRST"):
        visible_devices(NV, env={"CUDA_DEVICE_ORDER": "BUS"})
    mixed = machine([replace(d, name="H100" if d.index else "A100") for d in gpus()])
    with pytest.warns(UserWarning, match="CUDA_DEVICE_ORDER=PCI_BUS_ID"):
        visible_devices(mixed, env={})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        visible_devices(mixed, env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})


def test_index_is_bus_order_not_list_order():
    shuffled = machine(list(reversed(gpus())))
    assert ids(visible_devices(shuffled, env={"CUDA_VISIBLE_DEVICES": "0"})) == [0]


def test_rocm_rocr_then_hip():
    amd = machine(gpus(vendor="amd"))
    assert ids(visible_devices(amd, env={"ROCR_VISIBLE_DEVICES": "1,2,3", "HIP_VISIBLE_DEVICES": "2,0"})) == [3, 1]
    assert ids(visible_devices(amd, env={"CUDA_VISIBLE_DEVICES": "3"})) == [3]  # HIP honours it
    assert ids(visible_devices(amd, env={"HIP_VISIBLE_DEVICES": ""})) == []
    assert ids(visible_devices(amd, env={"ROCR_VISIBLE_DEVICES": "3,-1,2"})) == [3]
    with pytest.raises(UsageError, match="ROCR_VISIBLE_DEVICES names GPU 9, which this machine lacks"):
        visible_devices(amd, env={"ROCR_VISIBLE_DEVICES": "3,9"})
    with pytest.raises(UsageError, match="HIP_VISIBLE_DEVICES names GPU 2, which this machine lacks .its GPUs are 0-1."):
        visible_devices(amd, env={"ROCR_VISIBLE_DEVICES": "1,3", "HIP_VISIBLE_DEVICES": "2"})
    with pytest.raises(UsageError, match="ROCR_VISIBLE_DEVICES entry '\u0661' is neither a GPU index"):
        visible_devices(amd, env={"ROCR_VISIBLE_DEVICES": "\u0661"})
    with pytest.raises(UsageError, match="HIP_VISIBLE_DEVICES entry 'x'"):
        visible_devices(amd, env={"HIP_VISIBLE_DEVICES": "x"})


def npus(order=(0, 1, 2, 3, 4, 5, 6, 7)):
    return [Device("npu", "huawei", i, f"0000:{0x10 + i:02x}:00.0", 0, CpuSet([i % 4]), "910B", None, "npu-smi")
            for i in order]


ASCEND = machine(npus((4, 5, 6, 7, 0, 1, 2, 3)))


def test_ascend_sorted_like_msrun():
    assert ids(visible_devices(ASCEND, env={})) == list(range(8))
    assert ids(visible_devices(ASCEND, env={"ASCEND_RT_VISIBLE_DEVICES": "6,2,4"})) == [2, 4, 6]
    assert ids(visible_devices(ASCEND, env={"ASCEND_RT_VISIBLE_DEVICES": ""})) == list(range(8))


@pytest.mark.parametrize("spec, message", [
    ("1,x", "entry 'x' is not an NPU id"),
    ("1,\u00b2", "entry '\u00b2' is not an NPU id"),  # SUPERSCRIPT TWO: int() misreads it
    ("1,1", "names an NPU twice"),
    ("3,9", "names NPU 9, but this machine's NPUs are 0,1,2,3,4,5,6,7"),
])
def test_ascend_errors(spec, message):
    with pytest.raises(UsageError, match=message):
        visible_devices(ASCEND, env={"ASCEND_RT_VISIBLE_DEVICES": spec})


@pytest.mark.parametrize("env, line", [
    ({"CUDA_VISIBLE_DEVICES": ""}, "CUDA_VISIBLE_DEVICES='' hides every GPU of this machine: planning CPU-only"),
    ({"CUDA_VISIBLE_DEVICES": "-1"}, "CUDA_VISIBLE_DEVICES='-1' hides every GPU of this machine: planning CPU-only"),
    ({"CUDA_VISIBLE_DEVICES": "0"}, None),
    ({}, None),
])
def test_hidden_warning(env, line):
    assert hidden_warning(NV, env=env) == line
    assert hidden_warning(machine([]), env=env) is None  # nothing to hide
    assert hidden_warning(ASCEND, env=env) is None  # CUDA's variable hides no NPU


def test_default_kind_and_cpu_only():
    assert default_kind(NV) == "gpu" and default_kind(ASCEND) == "npu"
    assert visible_devices(machine([])) == []
    nic = Device("nic", "mellanox", 0, "0000:01:00.0", 0, CpuSet([0]))
    assert default_kind(machine([nic])) is None


def test_env_applies_on_the_live_machine_only(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert ids(visible_devices(NV)) == [0, 1, 2, 3]  # a captured machine: this shell's variable is not its
    assert ids(visible_devices(machine(gpus(), root="/"))) == [3]


def test_visible_device_ids():
    assert visible_device_ids(NV, env={}) is None  # nothing filters: every device, by physical id
    assert visible_device_ids(NV, env={"CUDA_VISIBLE_DEVICES": "3,1"}) == (3, 1)
    assert visible_device_ids(NV, env={"CUDA_VISIBLE_DEVICES": ""}) == ()
    assert visible_device_ids(ASCEND, env={"ASCEND_RT_VISIBLE_DEVICES": "6,2"}) == (2, 6)


def test_visible_device_ids_read_the_environment_on_the_live_machine_only(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert visible_device_ids(NV) is None
    assert visible_device_ids(machine(gpus(), root="/")) == (2,)


@pytest.mark.parametrize("root, spec, keys", [
    ("/", "3,1", ["device3", "device1"]),
    ("/", "GPU-bbb", ["device2"]),
    ("/", None, ["device0", "device1", "device2", "device3"]),
    ("/captured", "3,1", ["device0", "device1", "device2", "device3"]),  # not this machine's devices
])
def test_planners_plan_applies_the_variables_as_topo_plan_does(monkeypatch, root, spec, keys):
    from topo import planners

    if spec is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", spec)
    result = planners.plan(machine(gpus(), root=root), "node")
    assert [p.key for p in result.workers()] == keys
    # an explicit devices= wins over the environment
    assert [p.key for p in planners.plan(machine(gpus(), root=root), "node", devices=(0,)).workers()] == ["device0"]


# ---- a device named by UUID or bus id --------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("0000:3b:00.0", "0000:3b:00.0"),
    ("3b:00.0", "0000:3b:00.0"),
    ("3B:00.1", "0000:3b:00.1"),
    ("00000000:3B:00.0", "0000:3b:00.0"),  # NVML's 8-digit domain
    ("0001:3b:0.0", "0001:3b:00.0"),
    ("100000000:3b:00.0", None),  # more than 8 digits of domain
    ("00010000:3b:00.0", None),  # a domain past 0xffff
    ("3b:00.8", None),
    ("3b:00", None),
    ("GPU-3b", None),
])
def test_normal_bus_id(text, expected):
    assert normal_bus_id(text) == expected


def test_find_device_by_bus_id_and_uuid_prefix():
    assert find_device(NV, "00000000:30:00.0") == (NV.devices[2], None)
    assert find_device(NV, "20:00.0")[0].index == 1
    assert find_device(NV, "GPU-bbb")[0].index == 2
    assert find_device(NV, "gpu-ccc4")[0].index == 3  # the prefix in either case, as nvidia-smi -L prints it
    with pytest.raises(UsageError, match=r"device 'GPU-aa': 'GPU-aa' matches 2 GPUs \(GPU-aab1, GPU-aac2\); "
                                         "give more of the UUID"):
        find_device(NV, "GPU-aa")
    with pytest.raises(UsageError, match=r"device 'MIG-1' names a MIG instance but no GPU has MIG mode enabled"):
        find_device(NV, "MIG-1")
    bare = machine(gpus())
    with pytest.raises(UsageError, match=r"device '12345678-1234-1234-1234-123456789abc': no GPU or MIG instance"):
        find_device(bare, "12345678-1234-1234-1234-123456789abc")
    amd = machine(gpus(vendor="amd"))
    with pytest.raises(UsageError, match=r"GPUs report no UUIDs .*name the device by PCI bus id or local index"):
        find_device(amd, "12345678-1234-1234-1234-123456789abc")
    assert find_device(amd, "0000:40:00.0")[0].index == 3


def test_level_zero_affinity_mask():
    xpu = machine(list(reversed(gpus(vendor="intel"))))  # indices are bus order whatever the list's
    assert ids(visible_devices(xpu, env={})) == [0, 1, 2, 3]
    assert ids(visible_devices(xpu, env={"ZE_AFFINITY_MASK": ""})) == [0, 1, 2, 3]  # Level Zero: every device
    assert ids(visible_devices(xpu, env={"ZE_AFFINITY_MASK": "3,1"})) == [3, 1]
    assert ids(visible_devices(xpu, env={"ZE_AFFINITY_MASK": "2.0,2.1"})) == [2, 2]  # two tiles of card 2
    assert visible_device_ids(xpu, env={"ZE_AFFINITY_MASK": "1"}) == (1,)
    with pytest.raises(UsageError, match="ZE_AFFINITY_MASK names GPU 4, which this machine lacks"):
        visible_devices(xpu, env={"ZE_AFFINITY_MASK": "0,4"})
    with pytest.raises(UsageError, match="ZE_AFFINITY_MASK entry 'card0' is neither a device index"):
        visible_devices(xpu, env={"ZE_AFFINITY_MASK": "card0"})
