"""The ``gpufleet`` command line: the application and its commands. Each command lives in its own module
(parse the arguments, call one driver, render through :mod:`gpufleet.cli.console`); this one registers them."""

from __future__ import annotations

import errno
import platform
import sys
from typing import Annotated, Any

import typer

import gpufleet
from gpufleet.cli import advise as advise_command
from gpufleet.cli import completion, console, simulate
from gpufleet.cli import dashboard as dashboard_command
from gpufleet.cli import lint as lint_command
from gpufleet.cli import plan as plan_command
from gpufleet.cli import snapshot as snapshot_command
from gpufleet.cli import validate as validate_command
from gpufleet.cli.bench import bench_app
from gpufleet.cli.mig import mig_app
from gpufleet.cli.node import node_app
from gpufleet.cli.nodes import nodes_app
from gpufleet.cli.options import CONTEXT_SETTINGS, Output, OutputFormat, examples
from gpufleet.cli.scheduler import scheduler


class _Gpufleet(typer.Typer):
    """The application: a reader that closes standard output early (``gpufleet plan ... | head -2``) is no error
    (typer and click would exit 1): the rest of the output is dropped and the command ends with its own status, 0
    for a plan, non-zero where it reports an error (:func:`console.closed_pipe`). Any other closed pipe (standard
    error, a socket, a child process) is a real failure: raised as it is, where click would exit 1 silently."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        stdout = sys.stdout
        sys.stdout = console.guarded(stdout)  # click's own writes (help) too
        try:
            try:
                return super().__call__(*args, **kwargs)
            finally:
                console.flush()  # buffered output meets a closed pipe here, not at the interpreter's exit
        except SystemExit as exc:
            failure = exc.__context__
            if type(sys.stdout).__name__ == "PacifyFlushWrapper" and isinstance(failure, OSError) \
                    and failure.errno == errno.EPIPE:
                # click's handling of EPIPE (vendored by typer): it exits 1 without a word, whatever the pipe was;
                # standard output's never reaches it (caught in its writes), so this one is a real failure
                sys.stderr = getattr(sys.stderr, "wrapped", sys.stderr)
                raise failure from None
            raise
        finally:
            if isinstance(sys.stdout, console.GuardedStdout) or type(sys.stdout).__name__ == "PacifyFlushWrapper":
                sys.stdout = stdout


app = _Gpufleet(
    help="gpufleet: GPUs as first-class citizens of Kubernetes.",
    epilog=examples("gpufleet demo", "gpufleet validate examples/casestudy",
                    "gpufleet plan examples/casestudy examples/plan/snapshot.yaml -o wide",
                    "gpufleet <command> -h"),
    no_args_is_help=True, rich_markup_mode=None, context_settings=CONTEXT_SETTINGS,
    pretty_exceptions_enable=False, add_completion=True)


def _print_version(value: bool) -> None:
    if value:
        console.say(f"gpufleet {gpufleet.__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option(
        "--version", help="Print the version and exit.", callback=_print_version, is_eager=True)] = False) -> None:
    """gpufleet: GPUs as first-class citizens of Kubernetes."""


@app.command(epilog=examples("gpufleet version", "gpufleet version -o json"))
def version(output: Output = OutputFormat.text) -> None:
    """Print gpufleet's version (and Python's, with -o json|yaml|wide)."""
    if output.is_document:
        console.emit({"gpufleet": gpufleet.__version__, "python": platform.python_version()}, output.value)
    elif output is OutputFormat.wide:
        console.say(f"gpufleet {gpufleet.__version__} (Python {platform.python_version()})")
    else:
        console.say(f"gpufleet {gpufleet.__version__}")


app.command(epilog=validate_command.EPILOG)(validate_command.validate)
app.command(epilog=lint_command.EPILOG)(lint_command.lint)
app.add_typer(nodes_app, name="nodes")
app.add_typer(mig_app, name="mig")
app.command(epilog=plan_command.EPILOG)(plan_command.plan)
app.command(epilog=snapshot_command.EPILOG)(snapshot_command.snapshot)
app.command(epilog=simulate.EPILOG)(simulate.simulate)
app.command(epilog=examples("gpufleet demo", "gpufleet demo -o json > demo.json",
                            "# with the report (report.md, report.html and plots)", "gpufleet demo --report out/"))(
    simulate.demo)
app.command(epilog=advise_command.EPILOG)(advise_command.advise)
app.command(epilog=dashboard_command.EPILOG)(dashboard_command.dashboard)
app.add_typer(bench_app, name="bench")
app.command(epilog=examples(
    "# in a cluster, as deploy/ and charts/gpufleet run it",
    "gpufleet scheduler --scheduler-name gpufleet --config /etc/gpufleet/config.yaml --leader-elect",
    "# from a workstation, against the current kubeconfig context",
    "gpufleet scheduler --scheduler-name gpufleet --log-level debug",
))(scheduler)
app.command(epilog=completion.EPILOG)(completion.completion)
app.add_typer(node_app, name="node")


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
