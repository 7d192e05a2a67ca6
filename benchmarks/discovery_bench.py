"""Discovery speed against hwloc's lstopo on the largest captured machines.

For each fixture root, measured side by side in one run (the median of N wall-clock times, the
three commands taking turns, so load on a shared machine hits all three alike):
  lstopo   whole process: HWLOC_FSROOT=R HWLOC_COMPONENTS=linux,stop lstopo-no-graphics --of xml -
  discover in-process topo.discover(R), modules already imported
  show     whole process: topo show --json --root R

`topo` is a normal (not editable) install of this checkout in a venv of its own
(benchmarks/install.py), as users run it. Bounds (issue 18): `topo show --json` <= 4x lstopo's
whole process; in-process discovery <= 1.0x. Each is printed with its measured ratio and "met" or
"missed" (the worst fixture counts). For reference, `python` is the bare interpreter start
(`python -c pass`, site included), the floor under any Python command.

Child Pythons run with bytecode caching on (PYTHONDONTWRITEBYTECODE dropped, the cache in a temp
dir via PYTHONPYCACHEPREFIX) as an installed `topo` does; pass --no-pyc to keep the caller's setting.

    python benchmarks/discovery_bench.py [-n 21] [FIXTURE ...]
    python benchmarks/discovery_bench.py --io-scaling 2000,4000,16000

--io-scaling times, in-process, discovery of a generated root with N PCI functions (one bridge per
32) and loading an hwloc XML with N PCI devices and N NUMA nodes: near-linear time shows as a
steady "us per item" column.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SYSFS = REPO / "tests" / "fixtures" / "sysfs"
LARGEST = ["128arm-2pa2n8cluster4co", "128ia64-17n4s2c", "96em64t-4no4pa3ca2co"]
TARGETS = {"discover": 1.0, "show": 4.0}  # x lstopo-no-graphics --of xml, whole process


def extract(name: str, dest: Path) -> Path:
    """The root of fixture `name`: the single folder inside its tarball (named as it likes)."""
    out = dest / name
    out.mkdir()
    with tarfile.open(SYSFS / f"{name}.tar.bz2") as tar:
        tar.extractall(out, filter="tar")
    (inner,) = [p for p in out.iterdir() if p.is_dir()]
    return inner


def best_of(n: int, fn) -> float:
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def median_of(n: int, fn) -> float:
    return statistics.median(best_of(1, fn) for _ in range(n))


def run_quiet(argv: list[str], env: dict[str, str]) -> None:
    result = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.decode()[-500:]}")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def topo_command() -> list[str]:
    from install import normal_install

    return [str(normal_install() / "topo")]


def pci_root(base: Path, n: int) -> Path:
    """A one-CPU root with n PCI functions: a root port per 32 functions, each bridging one bus."""
    root = base / f"pci-{n}"
    cpu = root / "sys/devices/system/cpu/cpu0/topology"
    cpu.mkdir(parents=True)
    for name, text in (("core_cpus_list", "0"), ("package_cpus_list", "0"), ("core_id", "0"),
                       ("physical_package_id", "0")):
        (cpu / name).write_text(text + "\n")
    (root / "sys/devices/system/cpu/online").write_text("0\n")
    (root / "proc").mkdir()
    (root / "proc/meminfo").write_text("MemTotal: 1024 kB\n")
    pci = root / "sys/bus/pci/devices"
    pci.mkdir(parents=True)
    bridges = (n + 31) // 32
    for i in range(n):
        domain, bus = divmod(i // 32, 200)
        if i % 32 == 0:  # the root port of this group, on its domain's bus 0
            d = pci / f"{domain:04x}:00:{bus // 8:02x}.{bus % 8}"
            d.mkdir()
            (d / "class").write_text("0x060400\n")
            (d / "local_cpulist").write_text("0\n")
            config = bytearray(64)
            config[0x0E], config[0x19], config[0x1A] = 1, bus + 1, bus + 1
            (d / "config").write_bytes(bytes(config))
        d = pci / f"{domain:04x}:{bus + 1:02x}:{(i % 32):02x}.0"
        d.mkdir()
        (d / "class").write_text("0x020000\n")
        (d / "vendor").write_text("0x15b3\n")
        (d / "device").write_text("0x1017\n")
    assert bridges
    return root


def hwloc_xml(n: int) -> str:
    """An hwloc v2 XML with n NUMA nodes (one PU each) and n PCI devices below host bridges."""
    pus = [f'<object type="PU" os_index="{i}" cpuset="{_word_mask(i)}"/>' for i in range(n)]
    nodes = [f'<object type="NUMANode" os_index="{i}" cpuset="{_word_mask(i)}" local_memory="1"/>' for i in range(n)]
    devices = [f'<object type="PCIDev" pci_busid="{i // 8192:04x}:{(i // 32) % 256:02x}:{i % 32:02x}.0" '
               f'pci_type="0200 [15b3:1017] [0000:0000] 00"/>' for i in range(n)]
    return ('<topology version="2.0"><object type="Machine" cpuset="' + _full_mask(n) + '">'
            + "".join(nodes[i] + pus[i] for i in range(n)) + "".join(devices) + "</object></topology>")


def _word_mask(i: int) -> str:
    """PU i's cpuset as lstopo 2.x writes it: zero words below the top one left empty, "0x0" last."""
    top = f"0x{1 << (i % 32):08x}"
    return top if i < 32 else ",".join([top] + [""] * (i // 32 - 1) + ["0x0"])


def _full_mask(n: int) -> str:
    mask = (1 << n) - 1
    return ",".join(f"0x{(mask >> (32 * w)) & 0xFFFFFFFF:08x}" for w in reversed(range((n + 31) // 32)))


def io_scaling(sizes: list[int], repeat: int) -> int:
    sys.path.insert(0, str(REPO))
    import topo  # noqa: E402
    from topo.probes.hwloc_xml import parse_hwloc_xml  # noqa: E402

    print(f"{'items':>6} {'discover ms':>11} {'us/function':>11} {'xml load ms':>11} {'us/device':>9}")
    with tempfile.TemporaryDirectory(prefix="topo-bench-") as tmp:
        for n in sizes:
            root = pci_root(Path(tmp), n)
            assert len(topo.discover(root).pci_devices) == n
            t_discover = best_of(repeat, lambda: topo.discover(root))
            text = hwloc_xml(n)
            assert len(parse_hwloc_xml(text).pci_devices) == n
            t_xml = best_of(repeat, lambda: parse_hwloc_xml(text))
            print(f"{n:>6} {t_discover * 1e3:>11.0f} {t_discover * 1e6 / n:>11.1f} {t_xml * 1e3:>11.0f} "
                  f"{t_xml * 1e6 / n:>9.1f}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixtures", nargs="*", default=LARGEST)
    ap.add_argument("-n", "--repeat", type=int, default=21, help="runs per measurement (the median is kept)")
    ap.add_argument("--no-pyc", action="store_true", help="keep the environment's bytecode settings")
    ap.add_argument("--io-scaling", metavar="N,N,...", help="time PCI discovery and XML loading at these sizes")
    args = ap.parse_args()
    if args.io_scaling:
        return io_scaling([int(x) for x in args.io_scaling.split(",")], min(args.repeat, 3))

    lstopo = shutil.which("lstopo-no-graphics")
    if not lstopo:
        print("lstopo-no-graphics not found: apt-get install hwloc", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    import topo  # noqa: E402  (imported before timing: in-process means warm modules)

    base_env = {k: v for k, v in os.environ.items() if k not in ("TOPO_ROOT", "HWLOC_FSROOT")}
    show_cmd = topo_command()
    version = subprocess.run([lstopo, "--version"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="topo-bench-") as tmp:
        if not args.no_pyc:
            base_env.pop("PYTHONDONTWRITEBYTECODE", None)
            base_env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        bare = [str(Path(show_cmd[0]).parent / "python"), "-c", "pass"]
        run_quiet(bare, base_env)
        t_python = median_of(args.repeat, lambda: run_quiet(bare, base_env))
        pyc = "off (environment)" if args.no_pyc and "PYTHONDONTWRITEBYTECODE" in base_env else "cached"
        print(f"{version}; topo: {' '.join(show_cmd)}; python {sys.version.split()[0]} (bytecode {pyc}); "
              f"median of {args.repeat}; {os.cpu_count()} CPUs, load average {load_average()} at start")
        print()
        header = (f"{'fixture':<26} {'PUs':>4} {'lstopo ms':>9} {'discover ms':>11} {'ratio':>6} "
                  f"{'show ms':>8} {'ratio':>6} {'python ms':>9}")
        print(header)
        print("-" * len(header))
        worst = {"discover": 0.0, "show": 0.0}
        for name in args.fixtures:
            root = extract(name, Path(tmp))
            hw_env = {**base_env, "HWLOC_FSROOT": str(root), "HWLOC_COMPONENTS": "linux,stop"}
            lstopo_argv = [lstopo, "--of", "xml", "-"]
            show_argv = [*show_cmd, "show", "--json", "--root", str(root)]
            # warm the page cache and check that every command works before timing
            run_quiet(lstopo_argv, hw_env)
            run_quiet(show_argv, base_env)
            pus = topo.discover(root).pus.weight()

            # interleaved, one run of each per round, so a burst of load on the shared machine
            # hits all three alike instead of one command's whole series
            times: dict[str, list[float]] = {"lstopo": [], "discover": [], "show": []}
            for _ in range(args.repeat):
                times["lstopo"].append(best_of(1, lambda: run_quiet(lstopo_argv, hw_env)))
                times["discover"].append(best_of(1, lambda: topo.discover(root)))
                times["show"].append(best_of(1, lambda: run_quiet(show_argv, base_env)))
            t_lstopo, t_discover, t_show = (statistics.median(times[k]) for k in ("lstopo", "discover", "show"))
            r_discover, r_show = t_discover / t_lstopo, t_show / t_lstopo
            worst["discover"], worst["show"] = max(worst["discover"], r_discover), max(worst["show"], r_show)
            print(f"{name:<26} {pus:>4} {t_lstopo * 1e3:>9.1f} {t_discover * 1e3:>11.1f} {r_discover:>5.2f}x "
                  f"{t_show * 1e3:>8.1f} {r_show:>5.2f}x {t_python * 1e3:>9.1f}")
    print()
    print(f"load average {load_average()} at the end")
    for key, label in (("show", "topo show --json"), ("discover", "in-process discovery")):
        verdict = "met" if worst[key] <= TARGETS[key] else "missed"
        print(f"{label}: target <= {TARGETS[key]:.1f}x lstopo, measured {worst[key]:.2f}x (worst fixture): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
