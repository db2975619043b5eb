"""A lean irminsul store's prompt index takes a committed prompt's chunk list as all ready and whole when its admit
found it so (its own new chunks after kept ones found so, ``PromptIndex.add``'s 7th layout item): what asking each
chunk (``PromptIndex._served``) answers, and the same plans, stats and store."""

from __future__ import annotations

import math

import pytest

from pic import accel
from pic.engine import policies
from pic.engine.policies import PolicyContext
from pic.engine.policies import irminsul as irminsul_mod
from pic.engine.policies.irminsul_prompts import PromptIndex
from tests.policies.conftest import plans_of
from tests.policies.test_irminsul_straddle import _turns

pytest.importorskip("numba")


@pytest.mark.parametrize("tables", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lists_kept_whole_at_commit_are_whole(seed: int, tables: bool, monkeypatch) -> None:
    if tables:
        monkeypatch.setattr(irminsul_mod, "_TABLES_AT", 4)
        monkeypatch.setattr(irminsul_mod, "_TABLES_PER_LOOKUP", 0)
    served, add = PromptIndex._served, PromptIndex.add
    asked = {"kept": 0, "slow": 0}

    def checked(self, layout: tuple, num: int, i: int = -1) -> int:
        cs = layout[5] if len(layout) > 5 else None
        kept = cs is not None and (self._wf[i] if i >= 0 else id(cs) in self._whole)
        got = served(self, layout, num, i)
        if kept:
            asked["kept"] += 1
            whole, self._whole = self._whole, {}
            if i >= 0:
                self._wf[i] = 0
            try:
                assert served(self, layout, num, i) == got == num and (self._wf[i] if i >= 0 else id(cs) in self._whole)
            finally:
                self._whole = whole
                if i >= 0:
                    self._wf[i] = 1
        else:
            asked["slow"] += 1
        return got

    def run(keep: bool) -> tuple:
        monkeypatch.setattr(PromptIndex, "add", add if keep else lambda self, t, lay, *a: add(self, t, lay[:6], *a))
        pol = policies.build("irminsul", PolicyContext(math.inf, 2), {"avg_chunk": 128, "min_chunk": 32, "max_chunk": 256})
        plans = plans_of(pol, _turns(seed))
        st = pol._store
        return plans, dict(pol.stats.extra), pol.stats.hits, len(st.entries), st.num_extents, st.protected, \
            st.evictable, len(st.prompts._whole) + sum(st.prompts._wf)

    monkeypatch.setattr(PromptIndex, "_served", checked)
    try:
        accel.set_mode("1")
        want = run(False)
        slow, asked["slow"], asked["kept"] = asked["slow"], 0, 0
        got = run(True)
    finally:
        accel.set_mode(None)
    assert got[:-1] == want[:-1]
    assert asked["kept"] > 0 and asked["slow"] < slow         # (lists taken whole at commit: not asked again)
