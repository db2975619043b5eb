"""Prompt index of the ``irminsul`` chunk store (:mod:`engine.policies.irminsul_store`): a radix tree over
committed prompts (references to their segments, no KV; an unbounded store's in flat columns,
:class:`~engine.flat_trie.FlatTrie`) whose nodes carry each prompt's chunk layout, for
the exact-prefix stage: which committed prompt's resident chunks serve the longest exact prefix of a new one,
and which shares the longest prefix (its layout lets the new prompt resume CDC from an anchor)."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from itertools import compress, count
from operator import attrgetter, is_not, lt, ne, sub

import numpy as np

from pic.engine.flat_trie import FlatTrie
from pic.engine.policies.irminsul_layout import NO_CUTS
from pic.engine.policies.irminsul_records import Chunk, Run, shared_size
from pic.engine.radix import RadixTree, as_seq
from pic.engine.seq import Seq

_LAYOUTS = 16  # committed-prompt layouts tried for the exact prefix
_READY, _SIZE = attrgetter("ready"), attrgetter("size")
_CHAIN = 16     # a flat index's kept chunk list continues another's at most this many deep (else kept whole)
_RECENT = 4096  # the whole chunk lists of the latest layouts a flat index keeps at hand (PromptIndex._full)


class PromptIndex:
    """Committed prompts -> chunk layout; ``entries``: the store's registry (read, never written)."""

    def __init__(self, entries: dict[int, Chunk], evicts: bool = True) -> None:
        self.entries = entries
        # NOTE (memory): an unbounded cache's index never evicts: its prompts in a FlatTrie (columns, ~70 B per node),
        # each node's layout in ``_lays`` at the index its ``val`` holds; a bounded one keeps a RadixTree (its
        # recency and eviction). The same tree and walks either way (FlatTrie's module docstring): a RadixTree
        # node with its children dict, key and boxed ints was ~550 B per chat request
        self.tree: RadixTree | None = None if not evicts else RadixTree(evicts=True)
        self.flat: FlatTrie | None = FlatTrie(bits=12) if not evicts else None
        self._lays: list[tuple] = []
        # NOTE (memory): a flat index keeps a lean layout as the prompt it continues keeps it (``_up``: the index in
        # ``_lays`` of best_layout's ``other`` for the prompt; ``_k``: how many leading chunks, edges, fingerprints and
        # anchors the two share), and its own rest in a tuple ``(fingerprints and edges, anchors, hard)``, then its
        # chunks from ``[3]`` on (no list): the fingerprints then the edges in one tuple (which this admission's runs
        # keep too: ``irminsul_runs.run_edges``), the anchors as an int's bits (:func:`_mask`), ``hard`` None where it
        # has neither hard boundaries nor a marker (else ``(hard, marked)``); read back whole (:meth:`_view`). ``_wf``:
        # whether it was found all ready and whole (``_whole`` for a tree). Chat 10^4: ~11 chunks a prompt, all but ~2.7
        # the previous turn's (99 % of layouts). Chat 10^5: the whole chunk lists were ~300 B a request; the whole edge
        # and fingerprint lists that layouts and runs kept ~245 B, the layout's tuple and anchors ~150 B; ~215 B less
        # now (state_census.py)
        self._up, self._k, self._dep, self._wf = array("i"), array("i"), bytearray(), bytearray()
        # the last best_layout walk: (tokens, tree version, num, node); a flat index's: (tokens, num, node, depth,
        # index of ``other`` or -1)
        self._walk: tuple | None = None
        self._other: tuple = (None, -1)            # a flat index's last ``other``: (layout, index)
        # NOTE (speed): the latest ``_RECENT`` layouts added as they were added (index -> the layout, its whole lists): a
        # conversation's next turn reads its previous one's without a walk up its chain (~2.5 MB)
        self._full: dict[int, tuple] = {}
        # whether the layouts' chunks (``layout[5]``) are the registry's: the store is lean (ChunkStore._exact)
        self.lean = False
        # NOTE (speed): a lean store's kept chunk lists found all ready and whole (id -> the list): a lean store
        # never drops nor cuts a chunk, so they stay so, and a later walk of the layout asks nothing
        self._whole: dict[int, list] = {}

    def add(self, tokens: Seq | np.ndarray, layout: tuple, now_us: int, cap_tokens: float) -> None:
        """Index a committed prompt (its :class:`~engine.seq.Seq`: edges are references) with its chunk
        layout (``(bounds, fps, anchors, hard, marked, chunks)``: what the policy keeps of it; ``chunks``: those
        of ``fps`` in a lean store, else None; a 7th item, dropped: whether those are all ready and whole, which a
        lean store keeps so: :meth:`_served` then asks nothing of them); keep the index under ``cap_tokens``."""
        if self.flat is not None:
            self._add_flat(tokens, layout)
            return
        if len(layout) > 6:
            if layout[6] and self.lean and layout[5] is not None:
                self._whole[id(layout[5])] = layout[5]
            layout = layout[:6]
        w = self._walk
        if w is not None and w[0] is tokens and w[1] == self.tree.version:
            # NOTE (speed): the tree is as best_layout's walk of this prompt left it (its lookup, then admit and
            # commit with no other commit or split in between: every request of Mooncake and Azure
            # conversation): the new leaf goes where that walk stopped, without walking the prompt again
            _, node = self.tree.insert_walked(tokens, now_us, w[2], w[3])
        else:
            _, node = self.tree.insert(tokens, now_us)
        self._walk = None
        node.value = layout
        if self.tree.total_tokens > cap_tokens:
            self.tree.evict(int(self.tree.total_tokens - cap_tokens))

    def _add_flat(self, tokens: Seq | np.ndarray, layout: tuple) -> None:
        """:meth:`add` to a flat index (it never evicts): a prompt committed again takes a new slot in ``_lays``
        (the old one may be a later prompt's ``_up``). A layout kept as the one it continues gives the runs its admit
        made (:class:`~engine.policies.irminsul_records.Run`: those naming its edge list) the rests it keeps, their
        ``k`` counted from there (every one of them lies in the rest: a new chunk is not the other's)."""
        flat, lays = self.flat, self._lays
        q = as_seq(tokens)
        w, self._walk = self._walk, None
        cs = layout[5]
        whole = len(layout) > 6 and layout[6] and self.lean and cs is not None
        k = p = -1
        if w is not None and w[0] is tokens:
            # NOTE (speed): the trie is as best_layout's match of this prompt left it (no add since: every
            # chat request): the new leaf goes where that match stopped, without walking the prompt again
            # (chat 10^4: PromptIndex.add 0.71 -> 0.2 s cumulative, profiled)
            node = flat.insert_at(q, w[1], w[2], w[3])
            p = w[4]
            if p >= 0 and cs is not None and self.lean and self._dep[p] < _CHAIN:
                o, oi = self._other           # (its whole lists, as best_layout read them: no second walk up)
                po = o if oi == p else self._view(p)
                if po[5] is not None:         # (what both begin with: chunks by identity, edges, fingerprints and
                    k = _shared(cs, po[5], is_not)      # anchors by value; C-level passes)
                    b, f, a = layout[0], layout[1], layout[2]
                    # NOTE (speed): the first k of each alike (the list compares: most) tell it without the counts
                    if k > 0 and (b[:k] != po[0][:k] or f[:k] != po[1][:k] or a[:k] != po[2][:k]):
                        k = min(k, _shared(b, po[0], ne), _shared(f, po[1], ne), _shared(a, po[2], ne))
        else:
            node = flat.insert(q, 0, q.end)
        if cs is not None:
            full = self._full
            full[len(lays)] = layout if len(layout) == 6 else layout[:6]
            if len(full) > _RECENT:
                del full[next(iter(full))]
        if k > 0:
            # the rests: fingerprints then edges in one tuple, anchors, and hard boundaries with ``marked`` (None: none)
            bounds, hard, marked = layout[0], layout[3], layout[4]
            rest = (*layout[1][k:], *bounds[k:])
            for c in cs[k:]:                  # this admission's runs: their edges and fingerprints from the rest
                if type(c) is Run and c.bounds is bounds and c.k >= k:
                    c.bounds = c.fps = rest
                    c.k -= k
            layout = (rest, _mask(layout[2][k:]), None if not hard.size and not marked else (hard, marked), *cs[k:])
            self._up.append(p)
            self._k.append(k)
            self._dep.append(self._dep[p] + 1)
        else:
            if len(layout) > 6:
                layout = layout[:6]
            self._up.append(-1)
            self._k.append(0)
            self._dep.append(0)
        self._wf.append(whole)
        flat.val[node] = len(lays)
        flat.has[node] = 1
        lays.append(layout)

    def _view(self, i: int) -> tuple:
        """``_lays[i]`` as it was added: ``(bounds, fps, anchors, hard, marked, chunks)``, whole (new lists where it
        continues another's, unless at hand in ``_full``)."""
        up = self._up
        p = up[i]
        if p < 0:
            return self._lays[i]
        got = self._full.get(i)
        if got is not None:
            return got
        lays, ks = self._lays, self._k
        lay = lays[i]
        r, lim = lay[0], ks[i]
        n = len(r) >> 1
        bs, fs, ans, cs = [r[n:]], [r[:n]], [_flags(lay[1], n + 1)], [lay[3:]]
        while True:                           # full(p)[:lim] = full(up[p])[:min(lim, k[p])] + own(p)[:lim - k[p]]
            u, lp = up[p], lays[p]
            if u < 0:
                ob, of, oa, oc = lp[0][:lim], lp[1][:lim], lp[2][:lim], lp[5][:lim]
                break
            kp = ks[p]
            if lim > kp:
                n = lim - kp
                r = lp[0]
                m = len(r) >> 1
                bs.append(r[m:m + n])
                fs.append(r[:n])
                ans.append(_flags(lp[1], m + 1)[:n])
                cs.append(lp[3:3 + n])
                lim = kp
            p = u
        for part in reversed(bs):
            ob += part
        for part in reversed(fs):
            of += part
        for part in reversed(ans):
            oa += part
        for part in reversed(cs):
            oc += part
        h = lay[2]
        return (ob, of, oa, NO_CUTS, False, oc) if h is None else (ob, of, oa, h[0], h[1], oc)

    def found_whole(self, layout: tuple) -> bool:
        """Whether ``layout`` (the last :meth:`best_layout`'s ``other``) keeps a chunk list found all ready and whole."""
        if self.flat is not None:
            lay, i = self._other
            return layout is lay and i >= 0 and bool(self._wf[i])
        return id(layout[5]) in self._whole

    def layouts(self) -> list[tuple]:
        """The layout of every indexed prompt."""
        if self.flat is not None:
            f = self.flat
            return [self._view(f.val[nd]) for nd in range(len(f.src)) if f.has[nd]]
        out, stack = [], [self.tree.root]
        while stack:
            nd = stack.pop()
            stack.extend(nd.children.values())
            if nd.value is not None:
                out.append(nd.value)
        return out

    def best_layout(self, toks: Seq | np.ndarray) -> tuple[tuple | None, int, int, tuple | None]:
        """``(layout, num, shared, other)``: the layout (``(bounds, fps, ...)``) of the committed prompt whose
        resident chunks serve the longest exact prefix ``num`` of ``toks`` (trying at most ``_LAYOUTS``
        prompts, deepest shared prefix first; ``(None, 0)`` when none serves any), and the layout ``other``
        of a committed prompt sharing the longest prefix, ``shared`` tokens (None when none shares any)."""
        if self.flat is not None:
            return self._best_flat(toks, as_seq(toks))
        num, node = self.tree.match_prefix(toks, None, split=True)
        self._walk = (toks, self.tree.version, num, node)
        best, best_len, tried, depth, skip, other = None, 0, 0, num, None, None
        while node is not None and best_len < depth and tried < _LAYOUTS:
            # prompts below ``node`` (minus the branch done) share ``depth``; pre-order, children in order
            # NOTE: iterators, not lists of children: a hub node (a shared system prompt) has thousands
            stack = [iter((node,))]
            while stack and tried < _LAYOUTS and best_len < depth:
                nd = next(stack[-1], None)
                if nd is None:
                    stack.pop()
                    continue
                if nd is skip:
                    continue
                if nd.children:
                    stack.append(iter(nd.children.values()))
                if nd.value is not None:
                    tried += 1
                    if other is None and depth == num:
                        other = nd.value
                    got = self._served(nd.value, depth)
                    if got > best_len:
                        best, best_len = nd.value, got
            skip, depth, node = node, depth - node.n, node.parent
        return best, best_len, num, other

    def _best_flat(self, toks: Seq | np.ndarray, q: Seq) -> tuple[tuple | None, int, int, tuple | None]:
        """:meth:`best_layout` over the flat trie: the same layouts tried in the same order (pre-order below the node
        the match ends in, then below each ancestor less the branch done; FlatTrie keeps a dict's child order)."""
        f, view = self.flat, self._view
        num, node, up = f.match(q)
        walk = (num, node, up)
        has, val, kid, nxt, par, nn = f.has, f.val, f.kid, f.nxt, f.par, f.n
        best, best_len, tried, depth, skip, other, oi = None, 0, 0, num, -1, None, -1
        while node >= 0 and best_len < depth and tried < _LAYOUTS:
            nd = node
            while True:                       # pre-order below ``node``, ``skip``'s subtree left out
                if nd != skip:
                    if has[nd]:
                        tried += 1
                        i = val[nd]
                        lay = view(i)
                        if other is None and depth == num:
                            other, oi = lay, i
                        got = self._served(lay, depth, i)
                        if got > best_len:
                            best, best_len = lay, got
                        if tried >= _LAYOUTS or best_len >= depth:
                            break
                    c = kid[nd]
                    if c >= 0:
                        nd = c
                        continue
                while nd != node:
                    s = nxt[nd]
                    if s >= 0:
                        nd = s
                        break
                    nd = par[nd]
                else:
                    break
            skip, depth, node = node, up, par[node]
            up = up - nn[node] if node > 0 else 0
        self._walk = (toks, *walk, oi)
        self._other = (other, oi)
        return best, best_len, num, other

    def _served(self, layout: tuple, num: int, i: int = -1) -> int:
        """How many of the first ``num`` tokens the layout's resident chunks serve (up to its first chunk not
        ready, or a cut chunk's head); ``i``: its index in a flat index's ``_lays`` (its whole flag)."""
        bounds, fps = layout[0], layout[1]
        # NOTE (speed): a lean store's layouts keep their chunks (``layout[5]``, Irminsul.admit): read there, not
        # asked of the registry (the key's hash, the table's slot and entry: three memory reads fewer per chunk)
        cs = layout[5] if self.lean and len(layout) > 5 and layout[5] is not None else None
        if cs is not None:
            if self._wf[i] if i >= 0 else id(cs) in self._whole:
                return num
            # NOTE (speed): every chunk starting before ``num`` ready and whole (a lean store cuts none; the
            # common case) told in C-level passes; the loop below finds where one is not
            jn = bisect_left(bounds, num, 0, len(cs))
            head = cs[:jn]
            if all(map(_READY, head)) and not any(map(lt, map(_SIZE, head), map(sub, bounds[1:jn + 1], bounds))):
                rest = cs[jn:]
                if all(map(_READY, rest)) and not any(map(lt, map(_SIZE, rest), map(sub, bounds[jn + 1:],
                                                                                      bounds[jn:]))):
                    if i < 0:
                        self._whole[id(cs)] = cs
                    else:
                        self._wf[i] = 1
                return num
        else:
            cs = map(self.entries.get, fps)
        for j, c in enumerate(cs):
            if bounds[j] >= num:
                break
            if c is None or not c.ready:
                return bounds[j]
            if c.size < bounds[j + 1] - bounds[j]:     # cut chunk: its head only
                return min(num, bounds[j] + c.size)
        return num


_BITS, _UNBITS = bytes.maketrans(b"\x00\x01", b"01"), bytes.maketrans(b"01", b"\x00\x01")
_MASKS: dict[bytes, int] = {}


def _mask(anchors: bytes) -> int | bytes:
    """A rest's anchors (a byte 0/1 per edge) as an int, bit ``j`` the ``j``-th's (the records' shared int object for up
    to 16 edges), or as they are where one is neither 0 nor 1. NOTE (memory): a layout's rest holds ~3.7 edges (chat
    10^4): a ``bytes`` of them was ~40 B a request, a shared int is none."""
    m = _MASKS.get(anchors)
    if m is not None:
        return m
    if not anchors or anchors.translate(None, b"\x00\x01"):
        return anchors
    m = shared_size(int(anchors[::-1].translate(_BITS), 2))
    if len(anchors) <= 10:                # (NOTE (speed): the masks of short rests kept: a dict read, ~2k at most)
        _MASKS[anchors] = m
    return m


def _flags(mask: int | bytes, n: int) -> bytes:
    """The ``n`` anchors :func:`_mask` gave ``mask`` of."""
    return mask if type(mask) is bytes else format(mask, f"0{n}b")[::-1].encode().translate(_UNBITS)


def _shared(a, b, op) -> int:
    """How many leading items ``a`` and ``b`` share (``op``: the C-level test of a difference, ``is_not`` or ``ne``)."""
    return next(compress(count(), map(op, a, b)), min(len(a), len(b)))
