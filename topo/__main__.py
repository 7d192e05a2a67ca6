from topo_cli import main

main(prog_name="topo")
