"""irminsul's prompt tokens from a position (``irminsul_layout.tokens_from``): the tokens ``req.tokens`` has there,
from the compiled path over a store's opaque columns and from the numpy path, for every start position."""

from __future__ import annotations

import numpy as np
import pytest

from pic import accel
from pic.engine.policies import RequestView
from pic.engine.policies.irminsul_layout import tokens_from
from pic.traces.content import Segments


def _store(opaque_only: bool) -> Segments:
    """Segments: opaque ones of various lengths (one empty), and unless ``opaque_only`` stored ones too."""
    lens = np.array([5, 0, 17, 1, 64, 9, 33, 2], np.int64)
    offs = np.zeros(lens.size + 1, np.int64)
    np.cumsum(lens, out=offs[1:])
    stored = np.zeros(lens.size, bool) if opaque_only else np.array([0, 0, 1, 0, 0, 1, 0, 0], bool)
    slens = np.where(stored, lens, 0)
    toff = np.zeros(lens.size + 1, np.int64)
    np.cumsum(slens, out=toff[1:])
    rng = np.random.default_rng(3)
    toks = rng.integers(0, 1000, int(toff[-1]), dtype=np.int32)
    keys = rng.integers(0, 2**63, lens.size, dtype=np.int64).astype(np.uint64)
    salts = rng.integers(0, 2**63, lens.size, dtype=np.int64).astype(np.uint64)
    return Segments(np.arange(lens.size, dtype=np.uint64), np.zeros(lens.size, np.uint8), offs, toks, toff, keys, salts)


def _view(store: Segments, rows: list[int]) -> RequestView:
    r = np.array(rows, np.int64)
    lens = store.offsets[r + 1] - store.offsets[r]
    sb = np.zeros(r.size + 1, np.int64)
    np.cumsum(lens, out=sb[1:])
    return RequestView(0, "s", None, sb, store.ids[r], store.kinds[r], r, store)


@pytest.mark.parametrize("mode", ["0", "1"])
@pytest.mark.parametrize("opaque_only", [True, False])
@pytest.mark.parametrize("rows", [[0, 2, 4, 6, 7], [4, 1, 3, 4, 0], [6], [1, 4], [3, 5, 6, 2, 0]])
def test_tokens_from_every_position_is_the_prompts_tokens(mode: str, opaque_only: bool, rows: list[int]) -> None:
    if mode == "1":
        pytest.importorskip("numba")
    store = _store(opaque_only)
    accel.set_mode(mode)
    try:
        want = store.gather(np.array(rows, np.int64))
        for lo in range(want.shape[0]):
            req = _view(store, rows)
            got = tokens_from(req, lo)
            assert got.dtype == np.int32 and np.array_equal(got, want[lo:]), (lo, rows)
        req = _view(store, rows)
        assert np.array_equal(req.tokens, want) and np.array_equal(tokens_from(req, 0), want)  # (read once made)
    finally:
        accel.set_mode(None)


def test_compiled_path_is_taken_for_opaque_prompts(monkeypatch) -> None:
    """The opaque-only store's prompts take the columns' kernel call (not Segments.gather)."""
    pytest.importorskip("numba")
    store = _store(True)
    accel.set_mode("1")
    try:
        monkeypatch.setattr(Segments, "gather", lambda *a: pytest.fail("gathered"))
        req = _view(store, [0, 2, 4, 6, 7])
        assert tokens_from(req, 11).shape[0] == req.num_tokens - 11
    finally:
        accel.set_mode(None)
