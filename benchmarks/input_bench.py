"""What the costliest topology files cost to read (`topo.load_topology`, `read_bind_json`).

Each case is written at run time (tests/hostile_inputs.py), just under the file bound (64 MiB for a
topology, 16 MiB for a bind JSON) unless a reader's bound stops it first, then read once in a fresh
interpreter whose modules are already imported; printed: the file's size, the read's wall and CPU
seconds, how much its resident peak grew (VmHWM) and that growth over the file's size, and the
first words of its error. Refused cases must cost little; legal ones are the costliest found:

  entity.xml      one internal entity referenced 100 times per info value (80x under expat's cap)
  elements.xml    16 million empty elements (refused past MAX_ELEMENTS)
  lists.json      22 million empty lists in a topology JSON (refused past MAX_JSON_CONTAINERS)
  bind.json       5.6 million empty lists in a bind JSON
  attributes.xml  info elements of 8 two-digit attributes, to MAX_ELEMENTS and MAX_ATTRIBUTES
  keys.json       one object of 6 million distinct keys (fails the schema after decoding)
  export.xml      for scale: hwloc XML of 16,000 PUs, NUMA nodes and PCI devices
                  (benchmarks/discovery_bench.py's --io-scaling document)

    python benchmarks/input_bench.py [CASE ...]

The last line names the legal case that cost the most memory.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

import hostile_inputs as hostile  # noqa: E402

MiB = 1 << 20
TOPOLOGY = 64 * MiB - 4096  # just under topo.loader.MAX_BYTES
BIND = 16 * MiB - 4096  # just under topo.planners.bindload.BIND_JSON_LIMIT


def export(path: Path, size: int) -> Path:
    from discovery_bench import hwloc_xml

    path.write_text(hwloc_xml(16000))
    return path


# name -> (legal, reader, what builds it)
CASES = {
    "entity.xml": (False, "topology", hostile.entity_xml),
    "elements.xml": (False, "topology", hostile.empty_elements_xml),
    "lists.json": (False, "topology", hostile.empty_lists_json),
    "bind.json": (False, "bind", lambda path, size: hostile.empty_lists_json(
        path, BIND, '{"bind_config": {"bind_cpu_mode": "cpu"}, "bind_cpu": [')),
    "attributes.xml": (True, "topology", hostile.attributes_xml),
    "keys.json": (True, "topology", hostile.unique_keys_json),
    "export.xml": (True, "topology", export),
}


def main(names: list[str]) -> int:
    print(f"{'case':<15} {'file MiB':>8} {'wall s':>7} {'CPU s':>6} {'memory MiB':>10} {'x file':>6}  error")
    worst = (0, "")
    with tempfile.TemporaryDirectory(prefix="topo-input-bench-") as tmp:
        for name in names or CASES:
            legal, reader, build = CASES[name]
            path = build(Path(tmp) / name, TOPOLOGY)
            size = path.stat().st_size
            r = hostile.measure(path, reader)
            path.unlink()
            print(f"{name:<15} {size / MiB:>8.1f} {r['wall']:>7.2f} {r['cpu']:>6.2f} {r['growth'] / MiB:>10.0f} "
                  f"{r['growth'] / size:>6.1f}  {r['error'].split(': ', 2)[-1][:60] or '-'}")
            if legal and r["growth"] > worst[0]:
                worst = (r["growth"], f"{name} ({size / MiB:.1f} MiB): {r['growth'] / MiB:.0f} MiB, "
                                      f"{r['cpu']:.2f} s of CPU")
    if worst[1]:
        print(f"costliest legal input: {worst[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
