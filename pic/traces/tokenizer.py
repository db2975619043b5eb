"""Tokenizers: a built-in one that needs no download, and any Hugging Face ``tokenizer.json``.

Built-in (:class:`BuiltinTokenizer`): GPT-2-style regex pre-tokenization, each piece mapped to a stable
id ``xxh64(piece UTF-8 bytes) mod 2_000_000_000`` (ids >= 2e9 are reserved for S2 markers, see
:mod:`traces.markers`). There is no vocabulary and no merge step, so one built-in token is one GPT-2
pre-token; a real BPE splits rare pieces further (see docs/trace-format.md for the measured ratio).
Repeated pieces are a dict hit, so encoding costs one regex scan plus one C-level map over pieces.

The pattern is GPT-2's with Python ``re`` classes: ``\\p{L}`` -> ``[^\\W\\d_]``, ``\\p{N}`` -> ``\\d``.
We use the standard ``re`` module on purpose even where the third-party ``regex`` module is installed:
on the miniswe prompts both give identical pieces, ``re`` is ~25% faster, and the ids then cannot depend
on which optional module happens to be present.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

import numpy as np
import xxhash

from pic.traces.markers import MARKER_BASE

#: ids of the built-in tokenizer lie in [0, ID_LIMIT); markers use MARKER_BASE = ID_LIMIT and up
ID_LIMIT = MARKER_BASE
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""
_CACHE_LIMIT = 2_000_000


class Tokenizer(Protocol):
    """Anything that turns text into int32 token ids."""

    name: str

    def encode(self, text: str) -> np.ndarray:
        """int32 [n] token ids of ``text`` (no special tokens added)."""
        ...


class BuiltinTokenizer:
    """GPT-2-style regex pre-tokenizer with hashed piece ids; deterministic, no files needed."""

    name = "builtin"

    def __init__(self) -> None:
        self._findall = re.compile(GPT2_PATTERN).findall
        self._cache: dict[str, int] = {}

    def pieces(self, text: str) -> list[str]:
        """The pre-tokenized pieces of ``text``; ``"".join(pieces(t)) == t``."""
        return self._findall(text)

    def encode(self, text: str) -> np.ndarray:
        """int32 [n]: one id per regex piece."""
        pieces = self._findall(text)
        cache = self._cache
        try:
            ids = list(map(cache.__getitem__, pieces))
        except KeyError:
            if len(cache) > _CACHE_LIMIT:
                cache.clear()
            h = xxhash.xxh64_intdigest
            for p in set(pieces).difference(cache):
                cache[p] = h(p.encode("utf-8", "surrogatepass")) % ID_LIMIT
            ids = list(map(cache.__getitem__, pieces))
        return np.array(ids, dtype=np.int32)


class HFTokenizer:
    """A Hugging Face ``tokenizer.json`` loaded through the ``tokenizers`` library."""

    def __init__(self, path: str | Path) -> None:
        from tokenizers import Tokenizer as _HF  # imported lazily: only needed with --tokenizer

        path = Path(path)
        if not path.is_file():
            raise ValueError(f"{path}: tokenizer: no such file")
        try:
            self._tok = _HF.from_file(str(path))
        except Exception as e:  # noqa: BLE001 - tokenizers raises plain Exception subclasses
            first = str(e).splitlines()[0] if str(e) else e.__class__.__name__
            raise ValueError(f"{path}: tokenizer: not a valid tokenizer.json ({first})") from None
        self.name = f"hf:{path.name}"

    def encode(self, text: str) -> np.ndarray:
        """int32 [n] token ids, without special tokens."""
        return np.asarray(self._tok.encode(text, add_special_tokens=False).ids, dtype=np.int32)


def load_tokenizer(spec: str | Path | Tokenizer | None = None) -> Tokenizer:
    """``None`` or ``"builtin"`` -> :class:`BuiltinTokenizer`; a path -> :class:`HFTokenizer`; objects pass."""
    if spec is None or (isinstance(spec, str) and spec == "builtin"):
        return BuiltinTokenizer()
    if isinstance(spec, (str, Path)):
        return HFTokenizer(spec)
    return spec
