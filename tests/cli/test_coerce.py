"""pic.cli.coerce: the plain converter gives what typer's own (pydantic) conversion gives, for every parameter
of every command and a spread of values, and hands every other value to typer (same errors)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer

from pic.cli import app, coerce

_typer_coercion = pytest.importorskip("typer._coercion")
VALUES = ["x", "", "-", "0", "7", "-3", "0012", " 5", "1_000", "+5", "2.5", "1e3", "inf", "nan", "h200", "H200",
          "round-robin", "cache-aware", "bogus", "a/b.parquet", "a//b/", "/tmp", 0, 3, 10**9, 2.5, 1e-12, True,
          ["a", "b"], ("p.k=1",), ["a/b", "c"], None]


def _params():
    group = typer.main.get_command(app.app)
    ctx = group.make_context("pic", ["--help"], resilient_parsing=True)
    for name, cmd in sorted(group.commands.items()):
        sub = cmd.make_context(name, [], parent=ctx, resilient_parsing=True)
        for p in cmd.get_params(sub):
            if getattr(p, "type_descriptor", None) is not None:
                yield f"{name}:{p.name}", p, sub


def _outcome(fn):
    try:
        v = fn()
        return "ok", repr(v), type(v)
    except (typer.BadParameter, ValueError, TypeError) as e:
        return "error", type(e).__name__, str(e)


@pytest.mark.parametrize("name,param,ctx", list(_params()), ids=lambda x: x if isinstance(x, str) else "")
def test_plain_matches_typer(name, param, ctx):
    assert isinstance(param._runtime_param, coerce._CLASS[0]), name   # installed by get_params
    reference = _typer_coercion.build_runtime_param(param.type_descriptor)
    for value in VALUES:
        if isinstance(value, (list, tuple)) != (param.multiple or param.nargs == -1) and value is not None:
            continue
        got = _outcome(lambda value=value: param._runtime_param.coerce(value, param=param, ctx=ctx))
        want = _outcome(lambda value=value: reference.coerce(value, param=param, ctx=ctx))
        assert got == want, (name, value)


def test_plain_values_skip_pydantic():
    code = ("import sys; from pic.cli import app; sys.argv = ['pic', 'replay', '--list-policies']\n"
            "try: app.main()\nexcept SystemExit: pass\n"
            "import typer; g = typer.main.get_command(app.app); c = g.commands['replay']\n"
            "ctx = c.make_context('replay', ['t.parquet', '-o', 'out', '--replicas', '2', '--time-scale', '0.5',"
            " '--set', 'prefix.page_size=4', '--gpu', 'h100', '--router', 'cache-aware', '--policy', 'a,b'])\n"
            "assert ctx.params['replicas'] == 2 and ctx.params['time_scale'] == 0.5, ctx.params\n"
            "assert 'pydantic' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_plain_misses_what_is_not_plain():
    from pathlib import Path

    info = typer.models.OptionInfo(min=1, max=9)
    for annotation, value in [(int, "10"), (int, "0"), (int, " 5"), (int, "1_0"), (float, "1e3"), (str, 5),
                              (bool, "yes"), (Path, 5)]:
        assert coerce.plain(annotation, info, value, None, None, None) is coerce._MISS, (annotation, value)
    assert coerce.plain(int, info, "9", None, None, None) == 9
    assert coerce.plain(float, info, "2.5", None, None, None) == 2.5
    assert coerce.plain(list[str], info, ("a", "b"), None, None, None) == ["a", "b"]


def test_a_typer_with_other_internals_keeps_its_own_conversion(monkeypatch):
    """A typer whose private internals differ (here: making the converter fails) gets no plain converter at all,
    and a command still parses its values through typer's own conversion: no traceback."""
    group = typer.main.get_command(app.app)
    cmd = group.commands["replay"]

    def broken(*args, **kwargs):
        raise AttributeError("RuntimeParam has no field 'descriptor'")

    monkeypatch.setattr(coerce, "_plain_class", broken)
    fresh = [p for p in cmd.params if getattr(p, "type_descriptor", None) is not None]
    saved = [p._runtime_param for p in fresh]
    try:
        for p in fresh:
            p._runtime_param = None
        coerce.install(fresh)
        assert all(p._runtime_param is None for p in fresh)
        ctx = cmd.make_context("replay", ["t.parquet", "-o", "out", "--replicas", "2", "--time-scale", "0.5"])
        assert ctx.params["replicas"] == 2 and ctx.params["time_scale"] == 0.5
    finally:
        for p, r in zip(fresh, saved, strict=True):
            p._runtime_param = r
