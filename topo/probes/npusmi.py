"""Huawei Ascend NPUs through `npu-smi`, read as MindSpore's msrun reads them. Parsers take text
and return data; `probe_npusmi` runs the commands (10 s each, as msrun) and turns any failure into
a reason: `info -m` (the chip map; device id: the logical id, else the NPU id, else the physical
id, as msrun), `info` (each chip's PCI bus id; `info -t board -i N -c M` for a chip it gave none),
`info -t topo` (the link matrix and CPU affinity).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from topo.cpuset import CpuSet, excerpt
from topo.numbers import ascii_number
from topo.errors import ParseError, ProbeError
from topo.probes.nvml import pci_bus_id
from topo.probes.tools import ToolNotFound, run_tool

TIMEOUT = 10.0  # seconds, as msrun's execute_command


@dataclass(frozen=True)
class NpuChip:
    """One NPU chip as npu-smi lists it."""

    logical_id: int  # the device index: what ASCEND_RT_VISIBLE_DEVICES and DEVICE_ID count
    npu_id: int
    chip_id: int
    name: str | None = None
    busid: str | None = None  # sysfs spelling, lower case, 4-digit domain
    cpus: CpuSet | None = None  # npu-smi's CPU Affinity


@dataclass(frozen=True)
class NpuReport:
    status: str
    chips: tuple[NpuChip, ...] = ()
    links: dict[tuple[int, int], str] = field(default_factory=dict)  # logical ids -> HCCS, PIX, ...


def parse_chip_map(text: str) -> list[NpuChip]:
    """`npu-smi info -m` -> one NpuChip per chip (Mcu rows skipped), logical id chosen as msrun does."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    header_at = next((i for i, line in enumerate(lines) if "NPU ID" in line and "Chip" in line), None)
    if header_at is None:
        raise ParseError("no 'NPU ID ... Chip Name' header in 'npu-smi info -m' output")
    columns = [c.strip().lower() for c in re.split(r"\s{2,}", lines[header_at])]
    for needed in ("npu id", "chip id", "chip name"):
        if needed not in columns:
            raise ParseError(f"'npu-smi info -m' header lacks the {needed.title()!r} column: {lines[header_at]!r}")
    rows = []
    for line in lines[header_at + 1:]:
        cells = [c.strip() for c in re.split(r"\s{2,}", line)]
        row = {**dict(zip(columns, cells)), "": line}
        # a footer or a wrapped line has fewer cells; an Mcu row is the board's controller
        if len(cells) >= len(columns) and row["chip name"].lower() not in ("mcu", "", "-"):
            rows.append(row)
    if not rows:
        raise ParseError("'npu-smi info -m' lists no NPU chip")

    def unique_ints(column):
        ints = [ascii_number(row.get(column) or "") for row in rows]
        if None in ints:
            return None  # "-", absent or unreadable: msrun's next column
        return ints if len(set(ints)) == len(ints) else None

    ids = unique_ints("chip logic id") or unique_ints("npu id") or unique_ints("chip phy-id")
    if ids is None:
        raise ParseError("'npu-smi info -m': no column gives every chip a unique device id")
    what = "'npu-smi info -m': NPU ID and Chip ID must be whole numbers"
    chips = [NpuChip(logical, _id(row["npu id"], what, row[""]), _id(row["chip id"], what, row[""]), row["chip name"])
             for logical, row in zip(ids, rows)]
    return sorted(chips, key=lambda c: c.logical_id)


def parse_info_table(text: str) -> list[NpuChip]:
    """`npu-smi info` status table -> chips with their bus ids.

    Each NPU has a row `| <npu id> <name> | <health> | ...` followed by one row per chip
    `| <chip id> [<device id>] | <bus id> | ...`. The chip row's second number is the logical device
    id when the header calls it `Device` (310P cards); with `Phy-ID` (A3) it is not, and with no
    second number (910B: one chip per NPU) the NPU id is the device id.
    """
    npu_id = name = None
    second = None  # meaning of the chip row's second number, from the header
    chips = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        first = cells[0].split()
        if first[:1] == ["Chip"]:
            second = first[1].lower() if len(first) > 1 else None
            continue
        if len(cells) >= 2 and ("Process id" in cells[1] or "Process" in cells[0]):
            break  # the process table below reuses the same layout
        if not first or not first[0][0].isdigit() or len(cells) < 2:
            continue  # not an NPU or chip row (one starting with "²", "١" or "1_0" is, refused below)
        number = _id(first[0], "'npu-smi info': the NPU or chip id is not a whole number", line)
        busid = pci_bus_id(cells[1].split()[0]) if cells[1].split() else None
        if busid:
            if npu_id is None:
                raise ParseError(f"'npu-smi info': chip row before any NPU row: {excerpt(line.strip())!r}")
            chip_id = number
            if second == "device" and len(first) > 1 and first[1].isdigit():
                logical = _id(first[1], "'npu-smi info': the device id is not a whole number", line)
            else:
                logical = npu_id if chip_id == 0 or second is None else -1
            chips.append(NpuChip(logical, npu_id, chip_id, name, busid))
        else:
            npu_id = number
            name = " ".join(first[1:]) or None
    return chips


def parse_board_busid(text: str) -> str | None:
    """`npu-smi info -t board -i N -c M` -> the chip's bus id (`PCIe Bus Info` / `PCIeBusInfo`)."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and re.sub(r"\s+", "", key).lower() == "pciebusinfo":
            busid = pci_bus_id(value)
            if busid is None:
                raise ParseError(f"not a PCI bus id: {value.strip()!r}")
            return busid
    return None


def parse_topo(text: str) -> tuple[dict[int, CpuSet], dict[tuple[int, int], str]]:
    """`npu-smi info -t topo` -> ({logical id: CPU affinity}, {(a, b): link label})."""
    lines = [line for line in text.splitlines() if line.strip()]
    header_at = next((i for i, line in enumerate(lines) if line.split()[:1] and line.split()[0].startswith("NPU")
                      and "CPU Affinity" in line), None)
    if header_at is None:
        raise ParseError("no 'NPU0 ... CPU Affinity' header in 'npu-smi info -t topo' output")
    names = lines[header_at].split("CPU Affinity")[0].split()
    peers = [_npu(name, lines[header_at]) if name.startswith("NPU") else None for name in names]
    affinity: dict[int, CpuSet] = {}
    links: dict[tuple[int, int], str] = {}
    for line in lines[header_at + 1:]:
        tokens = line.split()
        if not tokens or not tokens[0].startswith("NPU"):
            if tokens and tokens[0].rstrip(":").lower() == "legend":
                break
            continue
        me = _npu(tokens[0], line)
        cells = tokens[1:1 + len(names)]
        if len(cells) < len(names):
            raise ParseError(f"'npu-smi info -t topo': short row {excerpt(line.strip())!r}")
        for peer, label in zip(peers, cells):
            if peer is not None and label != "X":
                links[(me, peer)] = label
        rest = "".join(tokens[1 + len(names):])
        if rest:
            try:
                affinity[me] = CpuSet.parse(rest)
            except ParseError as exc:
                raise ParseError(f"'npu-smi info -t topo': CPU Affinity in line {excerpt(line.strip())!r}: "
                                 f"{exc}") from None
    return affinity, links


def _npu(name: str, line: str) -> int:
    """The id of an `NPU<id>` column or row of `npu-smi info -t topo`."""
    return _id(name[3:], f"'npu-smi info -t topo': {excerpt(name, 20)!r} is not NPU<id>", line)


def _id(text: str, what: str, line: str) -> int:
    """`text` as a whole number; else ParseError "`what` (ASCII digits) in line `line`"."""
    number = ascii_number(text)
    if number is None:
        raise ParseError(f"{what} (ASCII digits) in line {excerpt(line.strip())!r}")
    return number


def run(args: list[str]) -> str:
    """npu-smi's stdout; ProbeError with msrun's kinds of message when it cannot be had."""
    return run_tool(args, TIMEOUT)


def probe_npusmi(command: str = "npu-smi", runner=run) -> NpuReport:
    """npu-smi's chips, links and CPU affinity; `runner(argv)` gives a command's output (default:
    run it here)."""
    notes = []
    table: list[NpuChip] = []
    try:
        table = parse_info_table(runner([command, "info"]))
    except ToolNotFound as exc:
        return NpuReport(f"unavailable: {exc}")
    except ProbeError as exc:
        notes.append(str(exc))
    except ParseError as exc:
        notes.append(f"cannot read 'npu-smi info': {exc}")

    try:
        chips = parse_chip_map(runner([command, "info", "-m"]))
    except (ProbeError, ParseError) as exc:
        notes.append(f"'info -m': {exc}")
        chips = [c for c in table if c.logical_id >= 0]
        if not chips:
            return NpuReport("error: " + "; ".join(notes))

    by_chip = {(c.npu_id, c.chip_id): c.busid for c in table}
    merged = []
    for chip in chips:
        busid = chip.busid or by_chip.get((chip.npu_id, chip.chip_id))
        if busid is None:
            try:
                busid = parse_board_busid(runner([command, "info", "-t", "board", "-i", str(chip.npu_id),
                                               "-c", str(chip.chip_id)]))
            except (ProbeError, ParseError) as exc:
                notes.append(f"NPU {chip.logical_id} bus id: {exc}")
        merged.append(replace(chip, busid=busid))

    links: dict[tuple[int, int], str] = {}
    try:
        affinity, links = parse_topo(runner([command, "info", "-t", "topo"]))
        merged = [replace(c, cpus=affinity.get(c.logical_id)) for c in merged]
    except (ProbeError, ParseError) as exc:
        notes.append(f"'info -t topo': {exc}")

    status = f"ok ({len(merged)} NPU{'' if len(merged) == 1 else 's'})"
    if notes:
        status += "; " + "; ".join(notes)
    return NpuReport(status, tuple(merged), links)
