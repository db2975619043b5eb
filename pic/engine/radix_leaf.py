"""The ``children`` of every radix-tree leaf (:mod:`engine.radix`): one shared empty mapping, :data:`_LEAF`."""

from __future__ import annotations

from typing import Any


class _NoChildren(dict):
    """The ``children`` of every leaf: one shared empty mapping, never written (the tree gives a node a dict of its
    own with its first child, and the shared one back when its last child goes). Copies and pickles as itself.

    NOTE (memory): most nodes of the irminsul chunk tries and of an exact-prefix tree are leaves: an empty dict
    each was 64 B (chat 10^4, irminsul: ~44 k leaves, 2.8 MB)"""

    __slots__ = ()

    def __reduce__(self) -> str:
        return "_LEAF"

    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a leaf's children are the shared empty mapping: assign a dict of its own first")

    __setitem__ = __delitem__ = setdefault = update = pop = popitem = clear = __ior__ = _read_only  # type: ignore[assignment]


_LEAF: dict = _NoChildren()
