"""docs/examples: every example runs and prints exactly its stored .out (SimPy-style executed docs).

Bless a deliberate change with ``python -m tests.golden.regen --only examples``.
"""

from __future__ import annotations

import difflib

import pytest

from pic.engine import policies as registry
from tests.golden.regen import example_scripts, run_example

SCRIPTS = example_scripts()
BLESS = "python -m tests.golden.regen --only examples"


def test_every_registered_policy_has_an_example() -> None:
    """docs/examples holds one <policy>.py (dashes as underscores) per registered policy, and no other."""
    have = sorted(p.stem.replace("_", "-") for p in SCRIPTS)
    assert have == registry.names(), f"examples {have} != registered policies {registry.names()}"


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_example_output_matches(script) -> None:
    """Running the example prints exactly the stored <name>.out."""
    out = script.with_suffix(".out")
    assert out.exists(), f"{out.name} missing; create it with `{BLESS}`"
    got, want = run_example(script), out.read_text()
    if got != want:
        delta = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                             f"{out.name} (stored)", f"{script.name} (now)"))
        pytest.fail(f"{script.name} output changed:\n{delta}\nIf intended, bless with `{BLESS}`.",
                    pytrace=False)

