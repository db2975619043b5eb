"""Each prompt's longest prefix shared with an earlier prompt, decided from the segment structure.

The trace-level oracle (:func:`engine.coverage.prompt_oracle`) counts, besides the reusable windows, the
longest exact prefix a prompt shares with any earlier one: what inserting the prompts one by one into a
token radix tree walks (:func:`resident_prefixes_radix`, the reference). Here it is computed for the whole
trace at once, over segments instead of tokens:

1. every segment row used gets a *content class*: rows with the same tokens share it (an opaque row's
   class is its ``(stream, length)``; rows that agree on their length and a few tokens are compared in
   full, so two rows of equal tokens are one class whatever their rows or streams);
2. the prompts' class sequences form a trie, built level by level (a node is its parent and a class:
   exact ids from one sort per depth, no hashing); an item's pieces down to the deepest node an earlier
   item made are its shared whole segments, ``k`` of them;
3. past them, the item's next segment ``x`` differs (as a whole) from the next segment ``y`` of every
   earlier item through that node; the shared prefix goes on by ``lcp(x, y)`` tokens, and only siblings
   with the same first token can share any: for each group of such siblings, the longest common prefix
   with the earlier ones (neighbours in the group's sorted order) is computed from their tokens.

This equals the token-level answer when no segment of such a group is a proper prefix of another one of
it (then a match ends inside the segment where two prompts part, and a prompt parting at a shallower
depth shares less than ``k`` whole segments); that is checked, and a trace where it fails goes to the
radix tree. Empty pieces are dropped first (they hold no token).
"""

from __future__ import annotations

from bisect import bisect_left, insort

import numpy as np
import xxhash

from pic.engine.rolling import ramp, unique_inverse
from pic.traces.content import OPAQUE_VOCAB, splitmix64


def resident_prefixes(seg, rows: np.ndarray, item_offs: np.ndarray, points: list | None = None) -> np.ndarray:
    """int64 per item: its longest prefix (tokens) shared with an earlier item. Item ``i`` concatenates the
    segment rows ``rows[item_offs[i]:item_offs[i+1]]`` of ``seg`` (a :class:`~pic.traces.content.Segments`).
    Same values as :func:`resident_prefixes_radix`. ``points``: a list, given :func:`_from_structure`'s points
    where it answered (else left empty)."""
    got = _from_structure(seg, np.asarray(rows, np.int64), np.asarray(item_offs, np.int64), points)
    return got if got is not None else resident_prefixes_radix(seg, rows, item_offs)


def resident_prefixes_radix(seg, rows: np.ndarray, item_offs: np.ndarray) -> np.ndarray:
    """:func:`resident_prefixes` by inserting each item into a token radix tree (the reference; the
    fallback for segments that are proper prefixes of their siblings).

    NOTE (memory): the tree (~1 KB per prompt) is freed before returning; items are converted to Python
    values a block at a time."""
    import gc

    from pic.engine.radix import RadixTree
    from pic.engine.seq import Seq

    lens = np.diff(seg.offsets)
    I = item_offs.shape[0] - 1
    tree, pfx = RadixTree(evicts=False), np.zeros(I, np.int64)
    for i0 in range(0, I, 1 << 16):
        i1 = min(I, i0 + (1 << 16))
        o0 = int(item_offs[i0])
        r = rows[o0:int(item_offs[i1])]
        bounds = np.zeros(r.shape[0] + 1, np.int64)
        np.cumsum(lens[r], out=bounds[1:])
        io = (item_offs[i0:i1 + 1] - o0).tolist()
        for i in range(i1 - i0):
            a, b = io[i], io[i + 1]
            q = Seq.of_segments(seg, r[a:b], bounds[a:b + 1] - bounds[a])
            pfx[i0 + i] = q.end - tree.insert(q, 0)[0]
    del tree
    gc.collect()                                      # a radix tree's parent links are cycles
    return pfx


def _from_structure(seg, rows: np.ndarray, offs: np.ndarray, points: list | None = None) -> np.ndarray | None:
    """:func:`resident_prefixes` from the segment trie, or None where a sibling group holds a segment that
    is a proper prefix of another (the trie's answer could then be short). ``points``: where it answers, a list
    given ``(shared, last, partial)``: per item the trie node (an int64 id, -1: none) of its shared whole
    segments and of all its (non-empty) segments, and whether its prefix goes on inside its next segment. Two
    nodes are the same token string exactly when their ids are equal (a sibling that is a proper prefix of
    another declines the trie; rows of equal tokens are one class): a radix tree's nodes (``prefix_told``).

    NOTE (memory): besides ``rows``, three arrays per piece (lengths, classes, nodes); a depth's pieces are
    found from the items (sorted by piece count, those deep enough are a prefix), not by sorting the pieces
    (chat 10^6: ~10^7 pieces)."""
    I = offs.shape[0] - 1
    out = np.zeros(I, np.int64)
    small = rows.shape[0] < 1 << 31                 # (int32 per piece where it fits)
    L = np.diff(seg.offsets)[rows].astype(np.int32 if small else np.int64)
    keep = L > 0
    if not keep.all():
        cnt = np.bincount(np.repeat(np.arange(I), np.diff(offs))[keep], minlength=I)
        rows, L = rows[keep], L[keep]
    else:
        cnt = np.diff(offs)
    del keep
    P = rows.shape[0]
    if not P:
        if points is not None:
            points[:] = [np.full(I, -1, np.int64), np.full(I, -1, np.int64), np.full(I, -1, np.int64)]
        return out
    start = np.zeros(I, np.int64)
    np.cumsum(cnt[:-1], out=start[1:])
    cls, rep, first = _classes(seg, rows)
    if small:
        cls = cls.astype(np.int32)
    C = rep.shape[0]
    # trie nodes, a depth at a time: a node is (parent node, class), made by the first item that has it;
    # an item's pieces down to its deepest node made by an earlier item are shared with it
    node = np.empty(P, np.int32 if small else np.int64)
    made = 0
    if points is not None:
        shared, last = np.full(I, -1, np.int64), np.full(I, -1, np.int64)
    news = []                                       # per depth: (item, parent node + 1, class) of the new nodes
    # NOTE (speed): an item alone at its node is followed no deeper: every deeper node of its is new, made by it, and
    # its parent's only child (no sibling group holds it; its end, a node of its own, gets a fresh id). Mooncake
    # conversation: 161,671 of its 288,500 pieces sorted
    act, upto = np.flatnonzero(cnt > 0), np.full(I, -1, np.int64)
    for d in range(int(cnt.max())):
        it = act[cnt[act] > d]
        if not it.shape[0]:
            break
        p = start[it] + d
        par = node[p - 1].astype(np.int64) if d else np.full(p.shape[0], -1, np.int64)
        # NOTE (speed): the node ids are the keys' ranks and each node's first item the least in its key's run,
        # from one (unstable) argsort: no stable sort, no ufunc.at
        key = cls[p] if d == 0 else par * C + cls[p]
        order = np.argsort(key)
        sk = key[order]
        head = np.ones(sk.shape[0], bool)
        head[1:] = sk[1:] != sk[:-1]
        ids = np.empty(sk.shape[0], np.int64)
        ids[order] = np.cumsum(head) - 1
        node[p] = made + ids
        at = np.flatnonzero(head)
        born = np.minimum.reduceat(it[order], at)
        made += born.shape[0]
        old = born[ids] < it
        out[it[old]] += L[p[old]]
        upto[it] = d
        if points is not None:
            last[it] = node[p]
            shared[it[old]] = node[p[old]]
        nw = ~old
        news.append((it[nw], par[nw] + 1, cls[p[nw]]))
        act = it[np.diff(np.append(at, head.shape[0]))[ids] > 1]
    if points is not None:
        tail = np.flatnonzero(upto < cnt - 1)          # (items not followed to their end)
        last[tail] = made + np.arange(tail.shape[0])
    del node
    item, parent, c = (np.concatenate(x) for x in zip(*news, strict=True))
    del news
    # the pieces that made a node (each node once, by its first item): sibling groups by first token. NOTE (speed):
    # only a node whose parent has another child can have a sibling: those alone are sorted (Mooncake conversation:
    # 15,780 of 182,790 nodes; ~9 ms CPU)
    sib = np.flatnonzero(np.bincount(parent)[parent] > 1)
    item, parent, c = item[sib], parent[sib], c[sib].astype(np.int64)
    f = first[c] - int(first.min())
    g = unique_inverse(parent * (int(f.max(initial=0)) + 1) + f)[1]
    size = np.bincount(g)
    multi = np.flatnonzero(size[g] > 1)
    partial = np.full(I, -1, np.int64) if points is not None else None
    if not multi.shape[0]:
        if points is not None:
            points[:] = [shared, last, partial]
        return out
    # nodes of groups of two or more siblings, by group then item: the longest prefix shared with earlier ones
    m = multi[np.lexsort((item[multi], g[multi]))]
    key = None if points is None else np.full(m.shape[0], -1, np.int64)
    extra = _sibling_lcps(seg, rep, g[m], c[m], key)
    if extra is None:
        return None
    np.add.at(out, item[m], extra)
    if points is not None:
        k = np.flatnonzero(extra > 0)
        partial[item[m][k]] = key[k]
        points[:] = [shared, last, partial]
    return out


def _unmet_past_prefix(store, rows: np.ndarray, item_offs: np.ndarray, pfx: np.ndarray, W: int,
                       own: list | None = None) -> bool:
    """Whether every token of every item past its prefix ``pfx`` is met there for the first time: every non-empty
    piece opaque, and no earlier item holds its stream (``key ^ salt``: a row is the first tokens of its stream)
    at an offset it has past the prefix. A window touching such a token is then in no earlier item (equal
    tokens sit at the same stream offsets, but by chance: 1 in 2^17 a token, ``W >= _UNMET_MIN`` of them), so
    each item's reuse is its prefix alone. Per piece, the longest row of its stream in an earlier item (one
    stable sort by stream, a running maximum) ends at or before the piece's first offset past the prefix.

    ``own``: where True, given ``prefix_told.own_once``'s answer (no piece empty, and no stream offset held twice past
    the prefixes: two pieces of different items cannot, by the above; those of one item are tested). NOTE (speed):
    from this sort (~0.011 CPU s of ``prefix`` told on Mooncake conversation)."""
    L = np.diff(store.offsets)[rows]
    if W < _UNMET_MIN or store.keys is None or not rows.shape[0] or not (store.opaque_mask[rows] | (L == 0)).all():
        return False
    cnt = np.diff(item_offs)
    item = np.repeat(np.arange(cnt.shape[0], dtype=np.int64), cnt)
    cum = np.zeros(L.shape[0] + 1, np.int64)
    np.cumsum(L, out=cum[1:])
    past = np.maximum(pfx[item] - (cum[:-1] - cum[item_offs[:-1]][item]), 0)    # its first offset past the prefix
    ident = (store.keys ^ store.salts)[rows]
    o = np.argsort(ident, kind="stable")                     # by stream, then item
    s, it, n = ident[o], item[o], L[o]
    new = np.ones(o.shape[0], bool)
    new[1:] = s[1:] != s[:-1]
    g = np.cumsum(new) - 1
    span = int(L.max()) + 1
    top = np.maximum.accumulate(g * span + n) - g * span     # the stream's longest row so far
    run = new.copy()
    run[1:] |= it[1:] != it[:-1]                              # (stream, item) runs: an item's own rows are not earlier
    first = np.maximum.accumulate(np.where(run, np.arange(o.shape[0]), 0))
    before = np.where(new[first], 0, top[np.maximum(first - 1, 0)])
    if not ((before <= past[o]) | (past[o] >= n)).all():
        return False
    if own is not None:
        from pic.engine.policies.prefix import disjoint

        twice = ~run                                          # a stream's second piece in one item, and its first
        twice[:-1] |= ~run[1:]
        k = np.flatnonzero(twice & (past[o] < n))
        own[:] = [bool((L > 0).all()) and disjoint(np.cumsum(run)[k], past[o][k], n[k])]
    return True


_UNMET_MIN = 8          # (coverage.UNMET_MIN)


_HEAD = 32          # tokens of each sibling read first; all of them only where two siblings agree on these


def _sibling_lcps(seg, rep: np.ndarray, group: np.ndarray, cls: np.ndarray,
                  key: np.ndarray | None = None) -> np.ndarray | None:
    """int64 per sibling (``group`` sorted, each group's members in the order they were made, ``cls`` their
    content classes, ``rep`` a row per class): the longest common prefix with an earlier member of its
    group (neighbours in the group's sorted order); None when a member is a proper prefix of another.
    ``key``: filled, for each member whose value ``e`` is above 0, with an id of the point ``e`` tokens into it
    (equal for two members exactly when they agree on their first ``e`` tokens: the first member, in the
    group's sorted order, of the run of neighbours sharing ``e`` tokens, and ``e``).

    NOTE (speed): the first ``_HEAD`` tokens of every member are read in one vectorized call; a member's
    whole segment only when another one of its group starts with the same ``_HEAD`` tokens."""
    r = rep[cls]
    n = np.diff(seg.offsets)[r]
    k = np.minimum(n, _HEAD)
    at = np.zeros(r.shape[0] + 1, np.int64)
    np.cumsum(k, out=at[1:])
    head = _ordered(seg.tokens_at(np.repeat(r, k), ramp(k)))
    arrs = [head[a:b] for a, b in zip(at[:-1].tolist(), at[1:].tolist(), strict=True)]
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]]).tolist()
    extra = np.zeros(r.shape[0], np.int64)
    rows, lens = r.tolist(), n.tolist()
    for h, e in zip(starts, starts[1:] + [r.shape[0]], strict=True):
        mem = range(h, e)
        keys = {i: arrs[i].tobytes() for i in mem}
        order = sorted(mem, key=keys.__getitem__)
        tied = {i for x, y in zip(order[:-1], order[1:], strict=False) if keys[x] == keys[y] for i in (x, y)}
        if tied:                                   # (equal first _HEAD tokens: read the whole segments)
            for i in tied:
                arrs[i] = _ordered(seg.segment(rows[i]))
                keys[i] = arrs[i].tobytes()
            order = sorted(mem, key=keys.__getitem__)
        for x, y in zip(order[:-1], order[1:], strict=False):
            if lens[x] < lens[y] and keys[y].startswith(keys[x]):
                return None                         # a proper prefix of a sibling: the radix tree decides
        rank = dict(zip(order, range(len(order)), strict=True))
        seen: list[int] = []
        for i in mem:
            q = rank[i]
            j = bisect_left(seen, q)
            best = _lcp(arrs[i], arrs[order[seen[j - 1]]]) if j else 0
            if j < len(seen):
                best = max(best, _lcp(arrs[i], arrs[order[seen[j]]]))
            extra[i] = best
            insort(seen, q)
        if key is not None:
            _point_keys(arrs, order, rank, extra, key, range(h, e))
    return extra


def _point_keys(arrs: list, order: list, rank: dict, extra: np.ndarray, key: np.ndarray, mem: range) -> None:
    """:func:`_sibling_lcps`' ``key`` of one group's members (``order``: sorted, ``rank`` their places there)."""
    adj: dict[int, int] = {}
    for i in mem:
        e = int(extra[i])
        if e <= 0:
            continue
        q = rank[i]
        while q:
            if q not in adj:
                adj[q] = _lcp(arrs[order[q - 1]], arrs[order[q]])
            if adj[q] < e:
                break
            q -= 1
        key[i] = order[q] * (1 << 32) + e


def _classes(seg, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Content classes of the (non-empty) segment rows ``rows``: ``(class per entry of rows, a row of each
    class, first token of each class)``; two rows share a class exactly when their tokens are equal."""
    used = np.flatnonzero(np.bincount(rows, minlength=len(seg)))
    if used.shape[0] == len(seg):           # (every row used: its own index)
        inv = rows
    else:
        at = np.zeros(len(seg), np.int64)
        at[used] = np.arange(used.shape[0])
        inv = at[rows]
        del at
    n = np.diff(seg.offsets)[used]
    # an opaque row's tokens are the first n of its stream (seeded by key ^ salt): one provisional class per
    # (seed, n); a stored row is its own
    opq = seg.opaque_mask[used]
    if opq.all():
        ident = seg.keys[used] ^ seg.salts[used]
        order = _by_ident(ident, n)
    else:
        ident = used.astype(np.uint64)
        if opq.any():
            k = np.flatnonzero(opq)
            ident[k] = seg.keys[used[k]] ^ seg.salts[used[k]]
        order = np.lexsort((n, ident, opq))
    head = np.ones(order.shape[0], bool)
    head[1:] = (ident[order][1:] != ident[order][:-1]) | (n[order][1:] != n[order][:-1]) \
        | (opq[order][1:] != opq[order][:-1]) | ~opq[order][1:]
    pcls = np.empty(order.shape[0], np.int64)
    pcls[order] = np.cumsum(head) - 1
    oh = order[head]
    rep = used[oh]                                  # a row per provisional class
    rn = n[oh]
    # rows that agree on (length, first, second, middle and last token) are compared in full. NOTE (speed): the
    # middle and last tokens read only for rows that agree on the first three (opaque rows: nearly none), the
    # signatures met twice found by one sort of them (a stable argsort was 5-15x its cost)
    ro, ri = opq[oh], ident[oh]
    t0, t1 = _tokens_at(seg, rep, ro, ri, (np.zeros(rep.shape[0], np.int64), np.minimum(1, rn - 1)))
    final, merged = np.arange(rep.shape[0], dtype=np.int64), False
    amb = _repeated_rows(rn, t0, t1)
    if amb.shape[0]:
        an = rn[amb]
        sig = _mix(an, t0[amb], t1[amb], *_tokens_at(seg, rep[amb], ro[amb], ri[amb], (an // 2, an - 1)))
        keep = _repeated(sig)
        same: dict[tuple[int, int], list[tuple[int, np.ndarray]]] = {}
        for c, sg in zip(amb[keep].tolist(), sig[keep].tolist(), strict=True):
            t = seg.segment(int(rep[c]))
            bucket = same.setdefault((sg, xxhash.xxh64_intdigest(t.tobytes())), [])
            for c0, t0_ in bucket:
                if np.array_equal(t, t0_):
                    final[c] = c0
                    merged = True
                    break
            else:
                bucket.append((c, t))
    if not merged:
        return pcls[inv], rep, t0
    _, fc, frow = unique_inverse(final, first=True)
    cls = fc[pcls][inv]
    return cls, rep[frow], t0[frow]


def _tokens_at(seg, rows: np.ndarray, opq: np.ndarray, ident: np.ndarray, cols: tuple) -> list[np.ndarray]:
    """``seg.tokens_at(rows, pos)`` for each ``pos`` of ``cols`` (the same int64 values; ``opq``: the rows that are
    opaque, ``ident`` their ``key ^ salt``): an opaque row's token ``j`` is ``mix(mix(key ^ salt) + j·golden)``
    masked to the vocabulary (:func:`traces.content.opaque_run`), each row's base mixed once for all of them."""
    k, o = np.flatnonzero(~opq), np.flatnonzero(opq)
    t = seg.offsets if seg.token_offsets is None else seg.token_offsets
    at = t[rows[k]]
    base = splitmix64(ident[o])
    out = []
    with np.errstate(over="ignore"):
        for pos in cols:
            x = np.empty(rows.shape[0], np.int64)
            x[k] = seg.tokens[at + pos[k]]
            x[o] = splitmix64(base + pos[o].astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) & _VOCAB_MASK
            out.append(x)
    return out


_VOCAB_MASK = np.uint64(OPAQUE_VOCAB - 1)


def _mix(*cols: np.ndarray) -> np.ndarray:
    """uint64 signature of the columns, row by row (splitmix-chained)."""
    sig = np.zeros(cols[0].shape[0], np.uint64)
    with np.errstate(over="ignore"):
        for col in cols:
            sig = splitmix64(sig * np.uint64(0x9E3779B97F4A7C15) + col.astype(np.uint64))
    return sig


def _by_ident(ident: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``np.lexsort((n, ident))``. NOTE (speed): where the ``ident`` are distinct, their stable argsort is that order
    (~0.2 ms on Mooncake conversation's 182,790 rows, whose idents come nearly sorted, against ~2.7 for the lexsort)."""
    o = np.argsort(ident, kind="stable")
    s = ident[o]
    return o if (s[1:] != s[:-1]).all() else np.lexsort((n, ident))


def _repeated_rows(n: np.ndarray, t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
    """:func:`_repeated` of the rows' ``(n, t0, t1)``: the rows another one agrees with on all three (where they fit
    in 64 bits, opaque tokens in 17: exactly; else by their :func:`_mix`). NOTE (speed): only rows whose packed key
    shares one of ~4 buckets a row with another are sorted (Mooncake conversation: ~0.03 of its 182,790 rows; ~5 ms)."""
    if not n.shape[0] or n.max() >= 1 << 29 or min(t0.min(), t1.min()) < 0 or max(t0.max(), t1.max()) >= _TOK:
        return _repeated(_mix(n, t0, t1))
    key = (n.astype(np.uint64) << np.uint64(34)) | (t0.astype(np.uint64) << np.uint64(17)) | t1.astype(np.uint64)
    bits = max(int(n.shape[0]).bit_length() + 2, 8)          # (buckets: 4-8 per row)
    with np.errstate(over="ignore"):
        b = ((key * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - bits)).astype(np.int64)
    cand = np.flatnonzero(np.bincount(b, minlength=1 << bits)[b] > 1)
    return cand[_repeated(key[cand])]


_TOK = 1 << 17


def _repeated(x: np.ndarray) -> np.ndarray:
    """Indices of the entries of ``x`` whose value occurs more than once (one sort)."""
    s = np.sort(x)
    dup = s[1:][s[1:] == s[:-1]]
    return np.flatnonzero(np.isin(x, dup)) if dup.shape[0] else np.zeros(0, np.int64)


def _ordered(tokens: np.ndarray) -> np.ndarray:
    """The tokens as big-endian uint32 whose bytes sort as the token sequence does (int32 order kept)."""
    return (tokens.astype(np.int64) + (1 << 31)).astype(">u4")


def _lcp(a: np.ndarray, b: np.ndarray) -> int:
    m = min(a.shape[0], b.shape[0])
    neq = a[:m] != b[:m]
    k = int(neq.argmax()) if m else 0
    return k if m and neq[k] else m
