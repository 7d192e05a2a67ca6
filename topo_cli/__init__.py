"""The `topo` command: a thin click layer over `topo`, `planners` and `launcher`. Each subcommand is imported only
when it runs (`topo show` pays for neither planning nor launching). Errors are translated here, once: each becomes
one line `topo: error: ...` on stderr, exit 2 for usage and input errors, 1 for runtime failures."""

from __future__ import annotations

import importlib
import sys

import click

from topo.text import printable

# each command is the function of its name in the module of its name, or of _MODULES[name]
COMMANDS = ("bind", "calc", "capture", "launch", "plan", "ps", "run", "show", "stop", "validate")
_MODULES = {"bind": "launch", "validate": "plan"}

CONTEXT = {"help_option_names": ["-h", "--help"]}
# launch and run: SCRIPT and everything after it belong to the script, options included (msrun's
# and torchrun's REMAINDER)
SCRIPT_CONTEXT = {**CONTEXT, "allow_interspersed_args": False}


class _Group(click.Group):
    def list_commands(self, ctx):
        return list(COMMANDS)

    def get_command(self, ctx, name):
        module = f"topo.cli.{_MODULES.get(name, name)}"
        return getattr(importlib.import_module(module), name) if name in COMMANDS else None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        from topo.errors import TopoError

        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            result = super().main(args, prog_name or "topo", complete_var, standalone_mode=False, **extra)
            code = result if isinstance(result, int) else 0
        except SystemExit as exc:  # a command's own sys.exit (launch and run exit with the job's code)
            code = exc.code
        except click.exceptions.Abort:
            click.echo("topo: aborted", err=True)
            code = 130
        except click.exceptions.Exit as exc:
            code = exc.exit_code
        except (click.ClickException, TopoError) as exc:
            # one line for every error, usage errors included; control characters it quotes escaped
            message = exc.format_message() if isinstance(exc, click.ClickException) else str(exc)
            if isinstance(exc, click.UsageError):
                path = exc.ctx.command_path if exc.ctx is not None else getattr(exc, "help_path", "topo")
                message = f"{message} (see `{path} --help`)"
            click.echo(f"topo: error: {printable(message)}", err=True)
            code = exc.exit_code
        except BrokenPipeError:  # `topo show | head`: the reader is gone, nothing left to say
            sys.stderr.close()
            code = 141
        sys.exit(code)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            if exc.ctx is None:  # some parser errors carry no context: name the subcommand's help
                exc.help_path = f"{ctx.command_path} {ctx.invoked_subcommand or ''}".strip()
            raise


@click.group("topo", cls=_Group, context_settings=CONTEXT)
@click.version_option(package_name="topo-affinity", message="topo %(version)s")
def main():
    """See this machine's hardware topology and plan where each process of a job runs.

    \b
    Examples:
      topo show                                  # the machine, as lstopo prints it
      topo plan --mode exclusive -o bind.json    # one process per accelerator
      topo launch --bind_numa=bind.json --join=True net.py
    """
