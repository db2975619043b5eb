"""`pic` command-line entry point: a Typer app with one thin command per module."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="pic",
    help="How much prefill position-independent KV caching saves on your traffic, and what it costs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from pic import __version__

        typer.echo(f"pic {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit."),
) -> None:
    """How much prefill position-independent KV caching saves on your traffic, and what it costs.

    Typical flow: pic synth / pic ingest -> pic inspect -> pic replay -> pic report.
    """


#: command name -> module in pic.cli that defines ``command``
COMMANDS = {
    "ingest": "ingest",
    "synth": "synth",
    "inspect": "inspect",
    "replay": "replay",
    "report": "report",
    "sweep": "sweep",
    "models": "models",
    "execute": "execute",
    "calibrate": "calibrate",
}

for _name, _mod in COMMANDS.items():
    app.command(name=_name)(importlib.import_module(f"pic.cli.{_mod}").command)


def main() -> None:
    app()
