"""Reading the captured tool outputs in fixtures/probe-samples/ (header stripped), for tests."""

from __future__ import annotations

import re
from pathlib import Path

SAMPLES = Path(__file__).parent / "fixtures" / "probe-samples"
_MARKER = "# ---- verbatim output"
_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # a terminal's escape sequence, e.g. ESC[4m (underline)


def sample(relpath: str) -> str:
    """The verbatim output of a sample file, without its `# ` header."""
    text = (SAMPLES / relpath).read_text()
    return text.split(_MARKER, 1)[1].split("\n", 1)[1]


def parse_topo_m(text: str) -> dict:
    """`nvidia-smi topo -m` -> {"matrix": {row: {col: level}}, "cpus": {gpu: cpulist}, "numa": {gpu: int}}.

    NICn columns are renamed to their mlx5 names from the NIC Legend (new format), so old and new
    captures compare alike. Escape sequences are dropped: driver 580 underlines the header with them
    even when its output is not a terminal. Written for tests, independently of topo's own code.
    """
    text = _ESCAPE.sub("", text)
    lines = text.splitlines()
    header = lines[0].split("\t")[1:]
    legend = dict(re.findall(r"^\s+(NIC\d+): (\S+)", text, re.M))
    names = [legend.get(h.strip(), h.strip()) for h in header]
    matrix, cpus, numa = {}, {}, {}
    for line in lines[1:]:
        if not line.strip():
            break
        cells = line.split("\t")
        row = legend.get(cells[0].strip(), cells[0].strip())
        values = [c.strip() for c in cells[1:]]
        matrix[row] = {}
        for col, value in zip(names, values):
            if col == "CPU Affinity":
                if value:
                    cpus[row] = value
            elif col == "NUMA Affinity":
                if value:
                    numa[row] = int(value)
            elif col != "GPU NUMA ID":
                matrix[row][col] = value
    return {"matrix": matrix, "cpus": cpus, "numa": numa}


def parse_smi_q(text: str) -> list[dict]:
    """`nvidia-smi -q` -> [{"busid", "uuid", "name", "memory"}] per GPU, in output order."""
    gpus = []
    for block in re.split(r"^GPU (?=[0-9A-F]{8}:)", text, flags=re.M)[1:]:
        busid = block.split()[0]
        fb = block.split("FB Memory Usage", 1)[1]
        gpus.append({
            "busid": f"{int(busid[:8], 16):04x}:{busid[9:].lower()}",
            "uuid": re.search(r"GPU UUID\s+: (\S+)", block).group(1),
            "name": re.search(r"Product Name\s+: (.+)", block).group(1).strip(),
            "memory": int(re.search(r"Total\s+: (\d+) MiB", fb).group(1)) << 20,
        })
    return gpus
