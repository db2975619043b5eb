"""The policy registry's name -> module table (``engine.policies.MODULES``): policy modules are imported on a
name's first lookup, so the table must name every policy, each with the module that registers it."""

from __future__ import annotations

import importlib
import subprocess
import sys

from pic.engine import policies


def test_modules_register_exactly_their_names():
    for name, module in policies.MODULES.items():
        mod = importlib.import_module(f"pic.engine.policies.{module}")
        cls = policies.get(name)
        assert cls.name == name
        assert cls.__module__ == mod.__name__, (name, cls.__module__)
    assert set(policies._REGISTRY) == set(policies.MODULES)
    assert policies.names() == sorted(policies.MODULES)


def test_every_policy_module_is_in_the_table():
    from pathlib import Path

    folder = Path(policies.__file__).parent
    registering = {p.stem for p in folder.glob("[!_]*.py") if "\n@register\n" in p.read_text()}
    assert registering == set(policies.MODULES.values())


def test_lookup_imports_only_the_policy_asked_for():
    code = ("import sys; from pic.engine import policies as r; "
            "assert 'irminsul' in r.names() and 'pic.engine.policies.irminsul' not in sys.modules; "
            "r.make_config('prefix'); "
            "assert 'pic.engine.policies.prefix' in sys.modules; "
            "assert 'pic.engine.policies.irminsul' not in sys.modules, sorted(sys.modules); "
            "r.get('prefix+rdr'); assert 'pic.engine.policies.rdr' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_name_still_lists_every_policy():
    import pytest

    with pytest.raises(ValueError, match="registered: block-hash, fixed-chunk, irminsul"):
        policies.get("prefx")

