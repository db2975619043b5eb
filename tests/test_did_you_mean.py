"""A misspelt policy, model, GPU, scenario or option names the closest known one."""

from __future__ import annotations

import pytest

from pic.engine import policies as registry
from pic.engine.replay import cost_config
from pic.engine.specs import gpu_from_name, model_from_name
from pic.traces.suggest import closest, did_you_mean
from pic.traces.synth import scenario_config


@pytest.mark.parametrize(("call", "bad", "want"), [
    (registry.get, "irminsl", "irminsul"),
    (registry.get, "Block_Hash", "block-hash"),
    (model_from_name, "deepseek-v2-lit", "deepseek-v2-lite"),
    (gpu_from_name, "h20", "h200"),
    (scenario_config, "rag-reordr", "rag-reorder"),
    (lambda n: registry.make_config("irminsul", {n: 1}), "avg_chunks", "avg_chunk"),
    (lambda n: cost_config({n: "0.5"}), "mfuu", "mfu"),
], ids=["policy", "policy-case", "model", "gpu", "scenario", "policy-option", "cost-option"])
def test_error_suggests_the_closest_name(call, bad, want):
    with pytest.raises(ValueError, match=rf"\(did you mean '{want}'\?\)"):
        call(bad)


def test_no_suggestion_for_far_names():
    """A name like nothing known gets the plain list, no guess."""
    assert closest("zzzz", ["prefix", "irminsul"]) is None and did_you_mean("zzzz", ["prefix"]) == ""
    with pytest.raises(ValueError) as e:
        registry.get("zzzz")
    assert "did you mean" not in str(e.value) and "registered: " in str(e.value)


def test_cli_choices_print_as_their_spelling() -> None:
    """typer < 0.29 maps a parsed option back to its member through str(value): a choice must print as its
    spelling, or every typed option (--scenario, --router, --format, ...) arrives as None there."""
    from pic.cli.choices import Backend, Format, Gpu, Router, Scenario

    for choices in (Router, Gpu, Format, Backend, Scenario):
        for member in choices:
            assert str(member) == member.value and member == member.value
