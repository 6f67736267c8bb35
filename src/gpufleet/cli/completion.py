"""``gpufleet completion SHELL``: the shell completion script, as ``kubectl completion`` prints it."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

# typer keeps its script templates in a private module; tests/test_cli_conventions.py runs a completion
# request against the real command tree so a change there is caught.
from typer._completion_shared import get_completion_script

from gpufleet.cli import console
from gpufleet.cli.options import examples

PROG = "gpufleet"
COMPLETE_VAR = "_GPUFLEET_COMPLETE"  # the variable the script sets when it asks gpufleet for candidates


class Shell(StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"
    powershell = "powershell"


EPILOG = examples(
    "# this shell session",
    'source <(gpufleet completion bash)',
    "# every new zsh",
    "gpufleet completion zsh > \"${fpath[1]}/_gpufleet\"",
)


def completion(shell: Annotated[Shell, typer.Argument(help="bash, zsh, fish or powershell.",
                                                       case_sensitive=False, show_default=False)]) -> None:
    """Print the shell completion script for gpufleet's commands, options and values."""
    console.write(get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell.value) + "\n")
