from topo.cli import main

main(prog_name="topo")
