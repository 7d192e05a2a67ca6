"""A process for `topo ps` inside the VM: `vm_remote.py OUT_DIR FIRST_NODE THEN_NODE`.

Runs on FIRST_NODE's CPUs while it touches 64 MiB, then moves its CPUs to THEN_NODE (leaving its
pages where they are: remote), writes OUT_DIR/ready and waits. Each time a file OUT_DIR/do-N
appears it runs the Python statement in it (e.g. a set_affinity call) and writes OUT_DIR/done-N
with the buffer's page counts per node (numa_maps); OUT_DIR/stop ends it.
"""

import ctypes
import mmap
import os
import sys
import time

out, first, then = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def node_cpus(node):
    with open(f"/sys/devices/system/node/node{node}/cpulist") as fh:
        text = fh.read().strip()
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def pages(start):
    with open("/proc/self/numa_maps") as fh:
        for line in fh:
            fields = line.split()
            if int(fields[0], 16) == start:
                return " ".join(f for f in fields if f.startswith("N") and "=" in f)
    return ""


def write(name, text):
    with open(os.path.join(out, name + ".part"), "w") as fh:
        fh.write(text)
    os.replace(os.path.join(out, name + ".part"), os.path.join(out, name))


os.sched_setaffinity(0, node_cpus(first))
size = 64 << 20
buf = mmap.mmap(-1, size)
for off in range(0, size, mmap.PAGESIZE):
    buf[off] = 1
start = ctypes.addressof(ctypes.c_char.from_buffer(buf))
os.sched_setaffinity(0, node_cpus(then))
write("ready", pages(start))
step = 0
while not os.path.exists(os.path.join(out, "stop")):
    request = os.path.join(out, f"do-{step}")
    if os.path.exists(request):
        with open(request) as fh:
            exec(fh.read())
        write(f"done-{step}", pages(start))
        step += 1
    time.sleep(0.05)
