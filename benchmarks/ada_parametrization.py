"""Which spherical parametrization for ADA key codes? Measured error at equal bits (CPU, float64 torch).

Three ways to code the direction u = Πk/‖k‖ of a D-dim key (Π a random rotation), each at the same
number of bits per key:

* hyperspherical angles φ_1..φ_{D-1} (φ_j ∈ [0, π], last one ∈ [0, 2π)), a Lloyd–Max codebook per angle
  (fit to each angle's distribution), b bits each; decode = cumulative product of sines;
* recursive polar tree (PolarQuant-style): level-1 angles of the D/2 pairs (uniform) + the angles
  between pair radii up a binary tree (Lloyd–Max per level), b bits each;
* pairwise polar: D/2 (ρ_i, θ_i), θ uniform (bθ bits), ρ Lloyd–Max (bρ bits), bθ + bρ = 2b.

Prints the relative logit error ‖Q·K̃ − Q·K‖/‖Q·K‖ and the attention-output error vs exact attention,
on Gaussian keys and on heavy-tailed keys (4 outlier channels × 20, shared offset). Usage:
``python benchmarks/ada_parametrization.py [--keys 4000]`` (about a minute on one core).
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch

D = 128


def lloyd(samples: np.ndarray, bits: int, iters: int = 60) -> tuple[torch.Tensor, torch.Tensor]:
    s = np.sort(samples.ravel())
    k = 2 ** bits
    c = np.quantile(s, (np.arange(k) + 0.5) / k)
    for _ in range(iters):
        idx = np.searchsorted((c[1:] + c[:-1]) / 2, s)
        cnt = np.bincount(idx, None, k)
        c = np.where(cnt > 0, np.bincount(idx, s, k) / np.maximum(cnt, 1), c)
    return torch.tensor(c), torch.tensor((c[1:] + c[:-1]) / 2)


def q_lloyd(x: torch.Tensor, cb) -> torch.Tensor:
    c, t = cb
    return c.to(x.dtype)[torch.searchsorted(t.to(x.dtype).contiguous(), x.contiguous())]


def q_uniform(a: torch.Tensor, bits: int, lo: float, hi: float) -> torch.Tensor:
    w = (hi - lo) / 2 ** bits
    return lo + (torch.clamp(torch.floor((a - lo) / w), 0, 2 ** bits - 1) + 0.5) * w


def pairwise(u, bt, br, cb):
    x, y = u[:, :D // 2], u[:, D // 2:]
    th = q_uniform(torch.atan2(y, x) % (2 * math.pi), bt, 0, 2 * math.pi)
    rho = q_lloyd(torch.sqrt(x * x + y * y), cb)
    return torch.cat([rho * torch.cos(th), rho * torch.sin(th)], 1)


def tree_angles(u):
    x = u.reshape(len(u), D // 2, 2)
    levels = [torch.atan2(x[..., 1], x[..., 0]) % (2 * math.pi)]
    r = x.norm(dim=-1)
    while r.shape[1] > 1:
        rr = r.reshape(len(u), -1, 2)
        levels.append(torch.atan2(rr[..., 1], rr[..., 0]))
        r = rr.norm(dim=-1)
    return levels


def tree_decode(levels):
    r = torch.ones(levels[0].shape[0], 1, dtype=levels[0].dtype)
    for a in reversed(levels[1:]):
        r = torch.stack([r * torch.cos(a), r * torch.sin(a)], -1).reshape(len(r), -1)
    a = levels[0]
    return torch.stack([r * torch.cos(a), r * torch.sin(a)], -1).reshape(len(r), -1)


def hyper_angles(u):
    tail = torch.sqrt(torch.flip(torch.cumsum(torch.flip(u * u, [1]), 1), [1]))
    phi = torch.acos(torch.clamp(u[:, :-2] / tail[:, :-2].clamp_min(1e-30), -1, 1))
    return phi, torch.atan2(u[:, -1], u[:, -2]) % (2 * math.pi)


def hyper_decode(phi, last):
    pre = torch.cat([torch.ones(len(phi), 1, dtype=phi.dtype), torch.cumprod(torch.sin(phi), 1)], 1)
    out = torch.empty(len(phi), D, dtype=phi.dtype)
    out[:, :-2] = pre[:, :-1] * torch.cos(phi)
    out[:, -2], out[:, -1] = pre[:, -1] * torch.cos(last), pre[:, -1] * torch.sin(last)
    return out


def errors(k, k_hat, g):
    q = torch.randn(64, D, dtype=torch.float64, generator=g)
    s, sh = q @ k.T, q @ k_hat.T
    v = torch.randn(len(k), D, dtype=torch.float64, generator=g)
    o, oh = torch.softmax(s / math.sqrt(D), 1) @ v, torch.softmax(sh / math.sqrt(D), 1) @ v
    return float((sh - s).norm() / s.norm()), float((oh - o).norm() / o.norm())


def ls_scale(u, u_hat):
    return (u_hat * u).sum(1, keepdim=True) / (u_hat * u_hat).sum(1, keepdim=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=4000)
    args = ap.parse_args()
    g = torch.Generator().manual_seed(0)
    pi = torch.linalg.qr(torch.randn(D, D, dtype=torch.float64, generator=g))[0]
    train = torch.randn(20000, D, dtype=torch.float64, generator=g) @ pi.T
    train = train / train.norm(dim=1, keepdim=True)
    rho_cb = {b: lloyd(torch.sqrt(train[:, :D // 2] ** 2 + train[:, D // 2:] ** 2).numpy(), b) for b in range(1, 9)}
    tree_cb = {b: [lloyd(a.numpy(), b) for a in tree_angles(train)[1:]] for b in (2, 3, 4, 8)}
    hyper_phi = hyper_angles(train)[0]
    hyper_cb = {b: [lloyd(hyper_phi[:, j].numpy(), b, 30) for j in range(D - 2)] for b in (2, 3, 4)}
    print(f"{'keys':8s} {'bits/coord':>10s} {'hyperspherical':>16s} {'polar tree':>16s} "
          f"{'pairwise (b,b)':>16s} {'pairwise best':>22s}   (logit rel. err / output rel. err)")
    for kind in ("gaussian", "outlier"):
        k = torch.randn(args.keys, D, dtype=torch.float64, generator=g)
        if kind == "outlier":
            k[:, :4] *= 20
            k = k + 3 * torch.randn(1, D, dtype=torch.float64, generator=g)
        r = k.norm(dim=1, keepdim=True)
        u = (k / r) @ pi.T
        for b in (8, 4, 3, 2):
            row = []
            if b in hyper_cb:
                phi, last = hyper_angles(u)
                uh = hyper_decode(torch.stack([q_lloyd(phi[:, j], hyper_cb[b][j]) for j in range(D - 2)], 1),
                                  q_uniform(last, b, 0, 2 * math.pi))
                row.append(errors(k, (r * ls_scale(u, uh) * uh) @ pi, g))
            else:
                row.append((math.nan, math.nan))
            lv = tree_angles(u)
            ut = tree_decode([q_uniform(lv[0], b, 0, 2 * math.pi)]
                             + [q_lloyd(a, cb) for a, cb in zip(lv[1:], tree_cb[b], strict=True)])
            row.append(errors(k, (r * ls_scale(u, ut) * ut) @ pi, g))
            up = pairwise(u, b, b, rho_cb[b])
            row.append(errors(k, (r * ls_scale(u, up) * up) @ pi, g))
            best = None
            for bt in range(b, 2 * b):
                up = pairwise(u, bt, 2 * b - bt, rho_cb[2 * b - bt])
                e = errors(k, (r * ls_scale(u, up) * up) @ pi, g)
                if best is None or e[0] < best[1][0]:
                    best = ((bt, 2 * b - bt), e)
            cells = [f"{a:.4f}/{o:.4f}" for a, o in row]
            print(f"{kind:8s} {b:10d} {cells[0]:>16s} {cells[1]:>16s} {cells[2]:>16s} "
                  f"{f'{best[1][0]:.4f}/{best[1][1]:.4f} θ{best[0][0]}ρ{best[0][1]}':>22s}", flush=True)


if __name__ == "__main__":
    main()
