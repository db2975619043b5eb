"""Built-in and Hugging Face tokenizers."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pic.traces.markers import MARKER_BASE
from pic.traces.tokenizer import ID_LIMIT, BuiltinTokenizer, HFTokenizer, load_tokenizer


def test_gpt2_style_pieces():
    """Pre-tokenization follows GPT-2: contractions, leading-space words, digit runs, punctuation."""
    tok = BuiltinTokenizer()
    assert tok.pieces("Hello world's 123 foo_bar!!\n\n") == ["Hello", " world", "'s", " 123", " foo", "_", "bar", "!!", "\n\n"]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_pieces_cover_text(text):
    """Pieces concatenate back to the input (nothing dropped), one id per piece."""
    tok = BuiltinTokenizer()
    pieces = tok.pieces(text)
    assert "".join(pieces) == text
    assert tok.encode(text).size == len(pieces)


def test_ids_stable_across_instances_and_below_marker_range():
    """Same text -> same ids in a fresh tokenizer; ids stay below the S2 marker range."""
    text = "def f(x):\n    return x ** 2  # ünïcode ✓ 42"
    a, b = BuiltinTokenizer().encode(text), BuiltinTokenizer().encode(text)
    assert a.dtype == np.int32 and np.array_equal(a, b)
    assert (a >= 0).all() and (a < ID_LIMIT).all() and ID_LIMIT <= MARKER_BASE


def test_repeated_piece_same_id_and_cache_hit():
    """A repeated piece maps to one id; the second encode reuses the cache."""
    tok = BuiltinTokenizer()
    ids = tok.encode(" cat cat cat")
    assert ids.size == 3 and len(set(ids.tolist())) == 1
    assert np.array_equal(tok.encode(" cat"), ids[:1])


def test_empty_text():
    """Empty text encodes to zero tokens."""
    assert BuiltinTokenizer().encode("").size == 0


def _tiny_tokenizer_json(path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    t = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1, "world": 2}, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    t.save(str(path))
    return path


def test_hf_tokenizer_from_file(tmp_path):
    """--tokenizer loads a tokenizer.json through HF tokenizers and yields its ids."""
    tok = load_tokenizer(_tiny_tokenizer_json(tmp_path / "tokenizer.json"))
    assert isinstance(tok, HFTokenizer)
    assert tok.encode("hello world zzz").tolist() == [1, 2, 0]
    assert tok.name == "hf:tokenizer.json"


@pytest.mark.parametrize("content", ["not json", json.dumps({"model": 3})], ids=["garbage", "bad-model"])
def test_hf_tokenizer_bad_file(tmp_path, content):
    """A file that is not a tokenizer.json gives a one-line ValueError naming the file."""
    p = tmp_path / "tok.json"
    p.write_text(content)
    with pytest.raises(ValueError, match=r"tok\.json: tokenizer: not a valid tokenizer\.json") as e:
        load_tokenizer(p)
    assert "\n" not in str(e.value)


def test_hf_tokenizer_missing_file(tmp_path):
    """A missing tokenizer path is a clear error."""
    with pytest.raises(ValueError, match="no such file"):
        load_tokenizer(tmp_path / "nope.json")
