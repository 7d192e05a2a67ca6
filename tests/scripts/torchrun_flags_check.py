"""How topo run's flags and defaults differ from those of the torchrun this interpreter imports,
printed as one JSON line: {"torch": VERSION, "missing": [torchrun options topo run lacks],
"defaults": {dest: [torchrun's default, topo run's]}}."""
import json

import torch
from torch.distributed.run import get_args_parser

from topo.cli.run import run as run_command
from topo.launcher.torchrun_flags import DEFAULT_SHUTDOWN_TIMEOUT, installed_torch, torchrun_defaults, torchrun_release

ours = {opt for p in run_command.params for opt in (*p.opts, *p.secondary_opts)}
defaults = torchrun_defaults(torchrun_release(installed_torch()))
actions = [a for a in get_args_parser()._actions if a.option_strings and a.dest != "help"]
missing = sorted({opt for a in actions for opt in a.option_strings} - ours)
wrong = {}
for a in actions:
    if a.dest == "shutdown_timeout":  # torchrun: None, meaning TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30
        theirs, mine = (a.default, 30.0), (None, DEFAULT_SHUTDOWN_TIMEOUT)
    elif a.dest in ("duplicate_stdout_filters", "duplicate_stderr_filters"):  # a list there, text here
        theirs, mine = a.default, [] if defaults[a.dest] == "" else defaults[a.dest]
    elif a.dest in ("check_env", "print_completion") or a.default is None and a.dest not in defaults:
        continue  # no value: a flag that acts at once
    else:
        theirs, mine = a.default, defaults.get(a.dest, "<none>")
    if theirs != mine:
        wrong[a.dest] = [repr(theirs), repr(mine)]
print(json.dumps({"torch": torch.__version__, "missing": missing, "defaults": wrong}))
