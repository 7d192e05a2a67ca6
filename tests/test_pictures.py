"""Pictures of the machine and of a plan: `topo show --output`, `topo plan --picture`, and the map
`topo plan --explain` prints. Checked as a person sees them: the SVG parses, the terminal maps match
golden files (`UPDATE_GOLDEN=1` rewrites them), and a real headless chromium renders the pages.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zlib
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

import machines
from topo import planners
import topo
from conftest import fixture_names, parse_test_file
from topo.cpuset import CpuSet
from topo.synthetic import from_nodes, synthetic
from topo.cli import main as cli
from topo.planners.explain import explain
from topo.views.html import draw_html
from topo.views.palette import Overlay, Owner, colour
from topo.views.plan import plan_html, plan_map, plan_overlay, plan_svg
from topo.views.svg import draw_svg
from topo.views.terminal import text_map

GOLDEN = Path(__file__).parent / "fixtures" / "pictures"
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def dgx_root(tmp_path_factory) -> Path:
    return machines.build(machines.dgx_a100(), tmp_path_factory.mktemp("dgx-a100"))


def parse_svg(text: str) -> ET.Element:
    root = ET.fromstring(text)
    assert root.tag == f"{SVG}svg"
    return root


def pu_rects(root: ET.Element) -> list[ET.Element]:
    """The drawn PUs (each a group titled "PU P#n ..."), not the legend's samples."""
    return [g.find(f"{SVG}rect") for g in root.iter(f"{SVG}g")
            if "".join(g.find(f"{SVG}title").itertext()).startswith("PU P#")]


def texts(root: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]


def fills(root: ET.Element) -> Counter:
    return Counter(r.get("style", "").removeprefix("fill:") for r in root.iter(f"{SVG}rect") if r.get("style"))


# ---- the machine ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", fixture_names())
def test_every_captured_machine_draws_as_valid_svg_with_each_pu(hwloc_roots, name):
    t = topo.discover(hwloc_roots.for_fixture(name), include_disallowed=True)
    root = parse_svg(draw_svg(t))
    assert len(pu_rects(root)) == t.pus.weight()
    labels = {s.split()[0] for s in texts(root) if s.startswith("P#")}
    assert labels == {f"P#{pu}" for pu in t.pus}
    greyed = [r for r in pu_rects(root) if "no" in r.get("class").split()]
    assert len(greyed) == (t.pus - t.allowed_pus).weight()
    assert ET.fromstring(draw_html(t).split('<div class="figure">', 1)[1].split("</div>", 1)[0])


def test_dgx_a100_drawing_shows_nodes_memory_devices_and_cores(dgx_root):
    t = topo.discover(dgx_root)
    root = parse_svg(draw_svg(t))
    words = texts(root)
    assert [w for w in words if w.startswith("NUMANode")] == [f"NUMANode P#{n} 64GiB" for n in range(8)]
    assert {f"GPU {g}" for g in range(8)} | {f"mlx5_{n}" for n in range(12)} <= set(words)
    assert "Package P#0" in " ".join(words) and "Machine (512GiB total)" in words[0]
    # each core a box of its two threads, cores folded into rows of at most 8
    cores = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "c"]
    assert len(cores) == 128
    assert max(_row_runs(cores)) == 8


def _row_runs(cores: list[ET.Element]) -> list[int]:
    """Lengths of the runs of cores side by side (same row, next to each other) in a drawing."""
    rows: dict[float, list[tuple[float, float]]] = {}
    for r in cores:
        rows.setdefault(float(r.get("y")), []).append((float(r.get("x")), float(r.get("width"))))
    runs = []
    for row in rows.values():
        row.sort()
        n = 1
        for (x0, w0), (x1, _) in zip(row, row[1:]):
            if x1 - (x0 + w0) < 6:  # the grid gap; neighbouring boxes add their padding
                n += 1
            else:
                runs.append(n)
                n = 1
        runs.append(n)
    return runs


def test_show_output_writes_the_format_its_extension_names(dgx_root, tmp_path):
    runner = CliRunner()
    text = runner.invoke(cli, ["show", "--root", str(dgx_root)]).output
    as_json = runner.invoke(cli, ["show", "--root", str(dgx_root), "--json"]).output
    for name in ("m.svg", "m.html", "m.json", "m.txt"):
        result = runner.invoke(cli, ["show", "--root", str(dgx_root), "--output", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        assert result.output == ""
    assert (tmp_path / "m.txt").read_text() == text
    assert (tmp_path / "m.json").read_text() == as_json
    parse_svg((tmp_path / "m.svg").read_text())
    page = (tmp_path / "m.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    assert "<script" not in page and "src=" not in page and "href=" not in page
    assert "<th>GPU0</th>" in page and '<td class="lsw">PXB</td>' in page  # the link matrix
    assert "2 packages, 8 NUMA nodes, 128 cores, 256 PUs, 8 GPUs" in page


def test_show_output_rejects_an_unknown_extension_before_reading_the_machine(tmp_path):
    result = CliRunner().invoke(cli, ["show", "--root", str(tmp_path / "absent"), "--output",
                                      str(tmp_path / "m.png")])
    assert result.exit_code == 2
    assert "unknown format '.png'; name the file .txt, .json, .svg, .html, .htm, .xml, or give --of" in result.output
    assert not (tmp_path / "m.png").exists()
    result = CliRunner().invoke(cli, ["show", "--json", "--output", str(tmp_path / "m.svg")])
    assert result.exit_code == 2 and "give one of them" in result.output


def test_topo_show_does_not_import_the_drawing_code(dgx_root):
    code = ("import sys; from topo_cli import main\n"
            "try:\n    main(['show', '--root', sys.argv[1]])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('views', 'planners') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(dgx_root)], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.splitlines()[-1] == "[]"


# ---- the plan ------------------------------------------------------------------------------------
def test_exclusive_plan_on_dgx_a100_paints_each_process(dgx_root, tmp_path):
    t = topo.discover(dgx_root)
    plan = planners.plan(t, "exclusive")
    overlay = plan_overlay(t, plan)
    assert [o.legend[:3] for o in overlay.owners][:2] == [("rank 0", "GPU 0", "48-55,176-183"),
                                                          ("rank 1", "GPU 1", "56-63,184-191")]
    assert all(o.legend[-1] == "local" and not o.remote for o in overlay.owners)
    root = parse_svg(plan_svg(t, plan))
    painted = fills(root)
    for o in overlay.owners:
        # its 16 PUs, its GPU chip, its memory tag on the node bar, its legend swatch
        assert painted[o.colour] >= 16 + 1 + 1, o
    words = texts(root)
    assert "P#48 r0" in words and "P#191 r1" in words and "P#0" in words  # idle CPUs keep their number
    # each GPU linked to its process's CPUs, and the key's sample link
    assert len([p for p in root.iter(f"{SVG}path") if p.get("class") == "link"]) == 8 + 1
    assert any(w.startswith("topo plan --mode exclusive: 8 processes") for w in words)


def test_cpu_only_plan_drives_no_device(dgx_root):
    # its ranks' keys are device0..3 (msrun's DEVICE_ID), yet no rank drives GPU r
    t = topo.discover(dgx_root)
    overlay = plan_overlay(t, planners.plan(t, "exclusive", devices=(), nproc=4))
    assert [(o.device, o.remote, o.legend[1], o.legend[-2:]) for o in overlay.owners] == \
        [(None, CpuSet(), "-", ("-", "-"))] * 4
    root = parse_svg(plan_svg(t, planners.plan(t, "exclusive", devices=(), nproc=4)))
    assert not [p for p in root.iter(f"{SVG}path") if p.get("class") == "link"]
    # nothing is remote from a device, and the key neither shows that symbol nor a device link
    assert not [p for p in root.iter(f"{SVG}path") if p.get("class") == "remote"]


def test_plan_legend_says_what_a_device_without_a_node_means():
    # the captured H200 VM: the GPU's sysfs numa_node -1; the legend's NODE ?>0 gets --explain's note
    t = from_nodes(["0-15"], gpu_nodes=[0])
    t = dataclasses.replace(t, devices=tuple(dataclasses.replace(d, numa_node=None) for d in t.devices))
    plan = planners.plan(t, "node")
    overlay = plan_overlay(t, plan)
    assert overlay.owners[0].legend[-2] == "?>0"
    note = ("NODE ?>0: sysfs gives device 0 no NUMA node (numa_node -1, as on one-node machines and most VMs); "
            "planned on node 0, that of its local CPUs (the first node when they are unknown)")
    assert overlay.notes[0] == note
    assert f"note: {note}" in explain(t, plan).splitlines()
    assert any(note in text for text in texts(parse_svg(plan_svg(t, plan))))


def test_shared_remote_split_and_disallowed_cpus_are_flagged():
    t = from_nodes(["0-3", "4-7"], threads_per_core=2, gpu_nodes=[0, 1])
    owners = (
        Owner("0", colour(0), CpuSet.parse("0-2,4"), memory=CpuSet([0]), device=("gpu", 0),
              remote=CpuSet([4]), legend=("rank 0",)),
        Owner("1", colour(1), CpuSet.parse("2,5-7"), memory=CpuSet([1]), device=("gpu", 1), legend=("rank 1",)),
    )
    root = parse_svg(draw_svg(t, Overlay(owners)))
    assert len([p for p in root.iter(f"{SVG}path") if p.get("class") == "remote"]) == 1 + 1  # PU 4 + legend
    # PU 2 is shared: two stripes; cores 2-3 (2 and idle 3) and 4-5 split between owners
    titles = ["".join(g.find(f"{SVG}title").itertext()) for g in root.iter(f"{SVG}g")]
    assert "PU P#2 · rank 0, rank 1" in titles and "PU P#3 · idle" in titles
    assert "PU P#4 · rank 0 · remote from its device" in titles
    assert len([r for r in root.iter(f"{SVG}rect") if r.get("class") == "split"]) == 2 + 1  # + legend
    assert "P#2 0+1" in texts(root)
    lines = text_map(t, Overlay(owners)).splitlines()
    assert lines[1].startswith("node 0 |0*|") and "shared by 0 1" in lines[1]
    assert lines[2].startswith("node 1 |*1|") and "remote: 0" in lines[2] and "memory of 1" in lines[2]


def test_large_machines_fold_and_stay_small():
    for desc, gpus in (("pack:2 numa:1 l3:12 core:8 pu:2", 4), ("pack:2 numa:4 l3:16 core:8 pu:2", 1)):
        t = synthetic(desc, gpus_per_numa=gpus, pu_order="scatter")
        plan = planners.plan(t, "exclusive")
        svg, html = plan_svg(t, plan), plan_html(t, plan)
        assert len(svg.encode()) < 2_000_000 and len(html.encode()) < 2_000_000
        root = parse_svg(svg)
        assert len(pu_rects(root)) == t.pus.weight()
        width, height = float(root.get("width")), float(root.get("height"))
        assert width < 3000 and height < 3000, (desc, width, height)
        assert 1 / 3 < width / height < 3
        assert max(_row_runs([r for r in root.iter(f"{SVG}rect") if r.get("class") == "c"])) == 8
        assert len(plan_map(t, plan).splitlines()) == 1 + 2 * (1 if "numa:1" in desc else 4)


def test_owner_colours_are_distinct():
    assert len({colour(i) for i in range(64)}) == 64


# ---- the terminal map ----------------------------------------------------------------------------
def _hwloc_root(hwloc_roots, name):
    return hwloc_roots.root(parse_test_file(name)["source"])


MAP_CASES = {
    # name: (machine, mode, plan options)
    "dgx-a100-exclusive": ("dgx-a100", "exclusive", {}),
    "epyc-nps4-socket": ("synthetic-nps4", "socket", {}),
    "dgx-a100-unique-interleaved": ("dgx-a100", "unique-interleaved", {"devices": [0, 2]}),
    "64fake-4n2s2ca2c2t-exclusive": ("64fake-4n2s2ca2c2t", "exclusive", {}),
    "32amd64-4s2n4c-cgroup2-unique-contiguous": ("32amd64-4s2n4c-cgroup2", "unique-contiguous", {}),
    "16em64t-4s2c2t-exclusive-3": ("16em64t-4s2c2t", "exclusive", {"nproc": 3}),
    "genoa-2x96x2-8gpu-exclusive": ("synthetic-genoa", "exclusive", {}),
}
SYNTHETIC = {
    "synthetic-genoa": lambda: synthetic("pack:2 numa:1 l3:12 core:8 pu:2", gpus_per_numa=4, pu_order="scatter"),
    # DGX A100's CPUs: 2x EPYC 7742 in NPS4, four 4-core L3 complexes per node
    "synthetic-nps4": lambda: synthetic("pack:2 numa:4 l3:4 core:4 pu:2", pu_order="scatter",
                                        gpu_nodes=[3, 3, 1, 1, 7, 7, 5, 5]),
}


@pytest.mark.parametrize("case", sorted(MAP_CASES))
def test_explain_map_golden(case, dgx_root, hwloc_roots):
    machine, mode, options = MAP_CASES[case]
    if machine == "dgx-a100":
        root = dgx_root
    elif machine in SYNTHETIC:
        root = None
    else:
        root = _hwloc_root(hwloc_roots, machine)
    if root is None:
        t = full = SYNTHETIC[machine]()
    else:
        t, full = topo.discover(root), topo.discover(root, include_disallowed=True)
    got = plan_map(full, planners.plan(t, mode, **options)) + "\n"
    path = GOLDEN / f"{case}.map.txt"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got)
    assert got == path.read_text()
    assert "\x1b" not in got


def test_explain_prints_the_map_plain_when_not_a_terminal(dgx_root, tmp_path):
    result = CliRunner().invoke(cli, ["plan", "--root", str(dgx_root), "--mode", "exclusive", "--explain"])
    assert result.exit_code == 0, result.output
    assert "\nmap: one cell per core" in result.output
    assert "node 3 |0000000011111111|  GPU 0,1; memory of 0 1" in result.output
    assert "\x1b" not in result.output


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal (os.openpty)")
def test_explain_map_is_coloured_on_a_terminal_unless_no_color(dgx_root):
    def run(env_extra):
        leader, follower = os.openpty()
        env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"} | env_extra
        proc = subprocess.Popen([sys.executable, "-m", "topo", "plan", "--root", str(dgx_root), "--mode",
                                 "exclusive", "--explain"], stdout=follower, stderr=subprocess.PIPE, env=env)
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(leader)
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
        return b"".join(chunks).decode()

    coloured = run({})
    assert "\x1b[" in coloured and "node 3 |" in coloured
    assert "\x1b[" not in run({"NO_COLOR": "1"})


def test_picture_option_writes_svg_or_html_and_refuses_other_names(dgx_root, tmp_path):
    runner = CliRunner()
    for name in ("p.svg", "p.html"):
        result = runner.invoke(cli, ["plan", "--root", str(dgx_root), "--mode", "exclusive", "--picture",
                                     str(tmp_path / name), "-o", str(tmp_path / "bind.json"), "--force"])
        assert result.exit_code == 0, result.output
    parse_svg((tmp_path / "p.svg").read_text())
    page = (tmp_path / "p.html").read_text()
    assert "<td>rank 0</td><td>GPU 0</td><td>48-55,176-183</td>" in page
    (tmp_path / "bind.json").unlink()
    result = runner.invoke(cli, ["plan", "--root", str(dgx_root), "--mode", "exclusive", "--picture",
                                 str(tmp_path / "p.png"), "-o", str(tmp_path / "bind.json")])
    assert result.exit_code == 2 and "--picture" in result.output and ".svg or .html" in result.output
    assert not (tmp_path / "p.png").exists() and not (tmp_path / "bind.json").exists()


# ---- in a real browser ---------------------------------------------------------------------------
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def read_png(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB rows of an 8-bit, non-interlaced RGB/RGBA PNG (what chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, []
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
        elif kind == b"IDAT":
            idat.append(body)
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        if kind == 1:
            for x in range(bpp, stride):
                line[x] = (line[x] + line[x - bpp]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif kind == 3:
            for x in range(stride):
                left = line[x - bpp] if x >= bpp else 0
                line[x] = (line[x] + ((left + prev[x]) >> 1)) & 255
        elif kind == 4:
            for x in range(stride):
                a = line[x - bpp] if x >= bpp else 0
                b, c = prev[x], (prev[x - bpp] if x >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        prev = line
        rows.append(bytes(line) if bpp == 3 else bytes(v for i, v in enumerate(line) if i % 4 != 3))
    return width, height, rows


def screenshot(page: Path, png: Path, size: str) -> None:
    with tempfile.TemporaryDirectory() as profile:
        result = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={size}",
             page.as_uri()],
            capture_output=True, text=True, timeout=180)
    assert png.exists(), f"chromium wrote no screenshot (exit {result.returncode}): {result.stderr[-2000:]}"


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium)")
@pytest.mark.parametrize("suffix", ["svg", "html"])
def test_plan_picture_in_headless_chromium_shows_one_colour_per_process(dgx_root, tmp_path, suffix):
    t = topo.discover(dgx_root)
    plan = planners.plan(t, "exclusive")
    page = tmp_path / f"plan.{suffix}"
    page.write_text(plan_svg(t, plan) if suffix == "svg" else plan_html(t, plan))
    png = tmp_path / "shot.png"
    screenshot(page, png, "1200,1100")
    width, height, rows = read_png(png)
    pixels = Counter(row[x:x + 3] for row in rows for x in range(0, len(row), 3))
    white = pixels.get(b"\xff\xff\xff", 0)
    assert white < 0.9 * width * height, "the screenshot is blank"
    assert len(pixels) > 20
    colours = [o.colour for o in plan_overlay(t, plan).owners]
    assert len(set(colours)) == len(colours) == 8
    for c in colours:
        rgb = bytes.fromhex(c[1:])
        assert pixels.get(rgb, 0) > 500, f"{c} is not on the screen ({pixels.get(rgb, 0)} pixels)"


LINK = re.compile(r'<path class="(?:halo|link)"[^>]*/>|<circle [^>]*/>')


def test_plan_picture_draws_device_links_under_labels_in_readable_text(dgx_root):
    t = topo.discover(dgx_root)
    svg = plan_svg(t, planners.plan(t, "exclusive"))
    font = re.search(r"text\{font:([0-9.]+)px ", svg)
    assert font and float(font.group(1)) >= 11, "text under 11 px"
    assert not re.search(r"font-size|font:\s*[0-9.]+px", svg.replace(font.group(0), "")), "another text size"
    elements = list(parse_svg(svg).iter())
    machine = next(e for e in elements if e.get("class") == "b")  # the outermost box; the key is below it
    bottom = float(machine.get("y")) + float(machine.get("height"))
    links = [i for i, e in enumerate(elements) if e.get("class") == "link"
             and float(e.get("d").split(",")[1].split()[0]) < bottom]
    labels = [i for i, e in enumerate(elements) if e.tag == f"{SVG}text" and "".join(e.itertext()).startswith("P#")]
    assert len(links) == 8 and len(labels) == t.pus.weight()
    assert max(links) < min(labels)
    # each PU label on a plate of the colours under it, drawn after the links too
    plates = [i for i, e in enumerate(elements) if e.get("class") == "plate"]
    assert len(plates) >= t.pus.weight() and max(links) < min(plates)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium)")
def test_plan_picture_labels_read_the_same_with_and_without_the_device_links(dgx_root, tmp_path):
    """The issue's symptom was `P#144 r2` reading `P#144 r`: a link drawn over it. Screenshot the
    plan as drawn and with its links taken out; every label's plate looks the same in both, while
    the links do pass some of them."""
    t = topo.discover(dgx_root)
    svg = plan_svg(t, planners.plan(t, "exclusive"))
    unlinked = LINK.sub("", svg)
    assert unlinked.count("<path") < svg.count("<path")
    shots = []
    for name, text in (("linked", svg), ("unlinked", unlinked)):
        page = tmp_path / f"{name}.svg"
        page.write_text(text)
        screenshot(page, tmp_path / f"{name}.png", "1300,900")
        shots.append(read_png(tmp_path / f"{name}.png")[2])
    linked, bare = shots
    root = parse_svg(svg)
    assert float(root.get("width")) <= 1300 and float(root.get("height")) <= 900
    # the screenshot is at 1:1: PU 48's colour (rank 0's) is where the SVG puts it
    painted = next(r for g in root.iter(f"{SVG}g") for r in g.iter(f"{SVG}rect")
                   if "".join(g.find(f"{SVG}title").itertext()).startswith("PU P#48 ") and r.get("style"))
    px, py = math.ceil(float(painted.get("x"))) + 1, math.ceil(float(painted.get("y"))) + 1
    assert linked[py][3 * px:3 * px + 3] == bytes.fromhex(painted.get("style").removeprefix("fill:#"))

    def region(rows, x0, y0, x1, y1):
        return [rows[y][3 * x0:3 * x1] for y in range(y0, y1)]

    crossed = 0
    for plate in (r for r in root.iter(f"{SVG}rect") if r.get("class") == "plate"):
        x, y = float(plate.get("x")), float(plate.get("y"))
        x0, y0 = math.ceil(x) + 1, math.ceil(y) + 1
        x1, y1 = math.floor(x + float(plate.get("width"))) - 1, math.floor(y + float(plate.get("height"))) - 1
        if x1 <= x0 or y1 <= y0:
            continue
        assert region(linked, x0, y0, x1, y1) == region(bare, x0, y0, x1, y1), \
            f"a link shows through the label at x={x}, y={y}"
        crossed += region(linked, x0, y0 - 3, x1, y0 - 2) != region(bare, x0, y0 - 3, x1, y0 - 2)
    assert crossed >= 3, "no link passes under a label: the test shows nothing"


# ---- the README's picture ------------------------------------------------------------------------
REPO = Path(__file__).parent.parent


def test_readme_picture_is_what_its_command_makes(tmp_path):
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Pictures", 1)[1].split("\n## ", 1)[0]
    commands = section.split("```sh\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert "![" in section and "(docs/plan-dgx-a100.svg)" in section
    (tmp_path / "docs").mkdir()
    for line in commands:
        if line.startswith("topo "):
            line = f"{sys.executable} -m topo {line[5:]}"
        elif line.startswith("python "):
            line = f"{sys.executable} {line[7:]}"
        subprocess.run(line, shell=True, cwd=tmp_path, check=True, timeout=120)
    for name in ("dgx-a100.json", "plan-dgx-a100.svg"):
        assert (tmp_path / "docs" / name).read_text() == (REPO / "docs" / name).read_text(), name
    # the map printed next to it, too
    shown = section.split("ends with:\n\n```\n", 1)[1].split("```", 1)[0]
    t = topo.load_topology(str(REPO / "docs" / "dgx-a100.json"))
    assert plan_map(t, planners.plan(t, "msrun-auto")) + "\n" == shown
