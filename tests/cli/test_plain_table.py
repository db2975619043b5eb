"""`pic replay`'s summary table without rich where stdout is not a terminal (pic.cli.plain_table): the same text
rich prints there, on random tables and on replay summaries; rich wherever the plain rule may differ."""

from __future__ import annotations

import io
import random
import sys
from pathlib import Path

import pytest

from pic.cli import errors
from pic.cli import replay as cli_replay
from pic.cli.plain_table import plain
from pic.cli.settings import summary_cells, summary_table

HEADERS = ["policy", "requests", "hit rate", "TTFT p50", "peak GiB (all replicas)", "x", "", "a b  c", "wall s"]
CHARS = "0123456789,.%  ·×±−…–—→abcXYZ-/>_"


def _rich(title: str, columns, rows, width: int = 190) -> str:
    from rich.table import Table

    t = Table(title=title)
    for h, j in columns:
        t.add_column(h, justify=j, no_wrap=True)
    for r in rows:
        t.add_row(*r)
    f = io.StringIO()
    errors.SafeConsole(file=f, width=width).print(t)
    return f.getvalue()


def _word(rng: random.Random, n: int) -> str:
    """A random cell; most without spaces at their ends or two in a row (the rule's cells)."""
    w = "".join(rng.choice(CHARS) for _ in range(rng.randint(0, n)))
    return w if rng.random() < 0.02 else " ".join(w.split())


def test_random_tables_print_as_rich_prints_them():
    rng = random.Random(0)
    done = 0
    for _ in range(600):
        k = rng.randint(1, 14)
        columns = [(rng.choice(HEADERS) + _word(rng, 3), rng.choice(["left", "right"])) for _ in range(k)]
        rows = [tuple(_word(rng, rng.choice([2, 6, 12, 30])) for _ in range(k)) for _ in range(rng.randint(0, 4))]
        title = _word(rng, rng.choice([5, 40, 60, 200])).strip() or "t"
        got = plain(title, columns, rows, 190)
        if got is not None:
            assert got == _rich(title, columns, rows), (title, columns, rows)
            done += 1
    assert done > 150


@pytest.mark.parametrize("cells", [
    ("wide 中文", ["a"], [("1",)]),                 # a wide character: rich
    ("t", ["a" * 200], [("1",)]),                   # wider than the console: rich (it would cut cells)
    ("t" * 50, ["a"], [("1",)]),                    # a title wider than the table: rich (it wraps it)
    ("e\u0301", ["a"], [("1",)]),                   # a combining character: rich
])
def test_what_the_rule_may_not_cover_is_left_to_rich(cells):
    title, heads, rows = cells
    assert plain(title, [(h, "right") for h in heads], rows, 190) is None


def _summary(names: list[str], trace: str = "/tmp/t.parquet", cap=None, replicas: int = 1) -> dict:
    pols = {}
    for k, n in enumerate(names):
        pols[n] = {"requests": 12031 * (k + 1), "token_hit_rate": 0.3736 + k / 7, "prefix_hit_rate": 0.3736,
                   "recovery_beyond_prefix": k / 9, "ttft_p50_s": 0.771 / (k + 1), "ttft_p99_s": 8.5 * (k + 1),
                   "tpot_p50_s": None if k == 2 else 0.0236, "energy_saved_vs_none": 0.338 - k / 3,
                   "energy_saved_vs_prefix": (k - 1) / 50, "peak_resident_bytes": 2.8e12 * (k + 1),
                   "evictions": 1234567 * k, "wall_seconds": 0.7 + k}
    return {"trace": trace, "model": "deepseek-v2-lite", "gpu": "h200", "capacity_bytes": cap,
            "replicas": replicas, "policies": pols}


@pytest.mark.parametrize("names, trace, cap, replicas", [
    (["prefix"], "/tmp/bs/mooncake-conv.parquet", None, 1),
    (["prefix", "block-hash", "irminsul", "irminsul+rdr", "none"], "t.parquet", 40 * 2**30, 4),
    (["fixed-chunk"], "/a/very/long/path/" * 12 + "trace.parquet", None, 1),
    (["prefix"], "trace\x1b[31m\n.parquet", 2e9, 2),
])
def test_replay_summaries_print_as_rich_prints_them(names, trace, cap, replicas):
    s = _summary(names, trace, cap, replicas)
    out = Path("/tmp/run dir")
    title, columns, rows = summary_cells(s, out)
    got = plain(errors.shown(title), columns, [tuple(map(errors.shown, r)) for r in rows], 190)
    f = io.StringIO()
    errors.SafeConsole(file=f, width=190).print(summary_table(s, out))
    if got is None:
        assert len(title) > 150          # (the long path: rich wraps its title)
    else:
        assert got == f.getvalue()


def test_the_cli_prints_the_table_and_headline_as_rich(monkeypatch, tmp_path):
    """_print_table to a file: the plain text, equal to what rich prints there (the headline too)."""
    from pic.engine.config import ReplayConfig
    from pic.engine.replay import replay
    from tests.engine.test_replay import _trace

    res = replay(_trace(40), ReplayConfig(policies=("prefix", "block-hash", "none")))
    for v in errors._RICH_ENV:
        monkeypatch.delenv(v, raising=False)
    outs = []
    for use_plain in (True, False):
        buf = io.StringIO()
        monkeypatch.setattr(sys, "stdout", buf)
        if not use_plain:
            monkeypatch.setattr(cli_replay, "plain", lambda *a: None)
        errors.__dict__.pop("console", None)       # (a rich console for this stdout)
        errors.__dict__.pop("SafeConsole", None)
        cli_replay._print_table(res, tmp_path / "run")
        outs.append(buf.getvalue())
    assert outs[0] == outs[1] and "┏" in outs[0] and outs[0].count("\n") >= 7
