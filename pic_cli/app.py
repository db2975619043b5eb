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


@app.callback()
def _root() -> None:
    # keeps `pic` a command group even while only one command module is present
    pass


#: command name -> module in pic_cli that defines ``command``
COMMANDS = {
    "ingest": "ingest",
    "synth": "synth",
    "inspect": "inspect",
    "replay": "replay",
    "report": "report",
    "models": "models",
}

for _name, _mod in COMMANDS.items():
    try:
        _m = importlib.import_module(f"pic_cli.{_mod}")
    except ModuleNotFoundError as _e:
        if _e.name != f"pic_cli.{_mod}":
            raise
        continue
    app.command(name=_name)(_m.command)


def main() -> None:
    app()
