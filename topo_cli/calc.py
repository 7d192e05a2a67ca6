"""`topo calc`: hwloc-calc's everyday questions on any machine topo reads."""

from __future__ import annotations

import click

from topo.cli import CONTEXT
from topo.cli.machine import machine_options


@click.command(context_settings=CONTEXT)
@machine_options
@click.argument("locations", nargs=-1, required=True)
@click.option("-i", "--input", "input_path", default=None, metavar="PATH",
              help="Read the machine from PATH, as hwloc-calc -i: a directory (as --root) or a file (as --from).")
@click.option("-N", "--number-of", default=None, metavar="TYPE|DEPTH", help="How many objects of TYPE the CPUs meet.")
@click.option("-I", "--intersect", default=None, metavar="TYPE|DEPTH", help="The indexes of the objects of TYPE "
              "the CPUs meet.")
@click.option("-H", "--hierarchical", default=None, metavar="TYPE1.TYPE2", help="The objects the CPUs meet as "
              "TYPE1:i.TYPE2:j names.")
@click.option("--largest", is_flag=True, help="The largest objects inside the CPUs.")
@click.option("--local-memory", is_flag=True, help="The NUMA nodes local to the CPUs.")
@click.option("-p", "--physical", is_flag=True, help="Physical (OS) indexes in and out.")
@click.option("-l", "--logical", is_flag=True, help="Logical indexes in and out (the default).")
@click.option("--pi", "--physical-input", "physical_input", is_flag=True, help="Physical indexes in locations.")
@click.option("--li", "--logical-input", "logical_input", is_flag=True, help="Logical indexes in locations.")
@click.option("--po", "--physical-output", "physical_output", is_flag=True, help="Physical indexes in answers.")
@click.option("--lo", "--logical-output", "logical_output", is_flag=True, help="Logical indexes in answers.")
@click.option("--cpuset-output-format", "output_format", default="hwloc",
              type=click.Choice(["hwloc", "list", "taskset"]), help="hwloc's words (0x000000ff,0xffffffff), "
              "a cpulist (0-39) or taskset's number (0xffffffffff).")
@click.option("--taskset", is_flag=True, help="As --cpuset-output-format taskset.")
@click.option("--sep", default=None, metavar="SEP", help="Separator of the indexes or names printed.")
@click.option("--single", is_flag=True, help="Only the first CPU of the set.")
@click.option("--no-smt", is_flag=True, help="Only the first PU of each core.")
@click.option("-q", "--quiet", is_flag=True, help="Accepted for hwloc-calc's sake: topo prints no warnings.")
def calc(machine, locations, input_path, number_of, intersect, hierarchical, largest, local_memory, physical,
         logical, physical_input, logical_input, physical_output, logical_output, output_format, taskset, sep,
         single, no_smt, quiet):
    """Answer hwloc-calc's questions: which CPUs LOCATIONS cover, and which objects they meet.

    \b
    Examples:
      topo calc pu:17 --intersect numa     # the NUMA node holding PU L#17
      topo calc numa:1 --number-of core    # how many cores node 1 has
      topo calc os=eth0 -I numa            # the NUMA node local to a NIC (any OS device)
      topo calc pci=0000:07:00.0 -I pu -p  # the physical PUs local to a PCI device
      topo calc package:1.core:0-3 --cpuset-output-format list
      topo calc --root /tmp/captured core:2-3 -H package.core
    """
    from topo.cli.show import load
    from topo.views import calc as answers

    topology = load(machine, input_path)
    q = answers.Calc(topology, physical_input=(physical or physical_input) and not logical_input and not logical,
                     physical_output=(physical or physical_output) and not logical_output and not logical)
    cpus = q.cpus(list(locations))
    if no_smt:
        cpus = answers.no_smt(q, cpus)
    if single:
        cpus = answers.single(cpus)
    if number_of:
        text = str(len(q.intersecting(cpus, number_of)))
    elif intersect:
        text = (sep or ",").join(q.index(o) for o in q.intersecting(cpus, intersect))
    elif hierarchical:
        text = (sep or " ").join(q.hierarchical(cpus, hierarchical.split(".")))
    elif largest:
        text = (sep or " ").join(q.largest(cpus))
    elif local_memory:
        text = (sep or ",").join(q.index(o) for o in q.local_memory(cpus))
    else:
        text = answers.format_cpus(cpus, "taskset" if taskset else output_format)
    click.echo(text)
