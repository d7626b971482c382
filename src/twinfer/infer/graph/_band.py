"""The banded posterior's algebra: cliques of a Gauss-Markov chain of subsystems, predicted and updated.

The subsystems, in the graph's order ``b_1 .. b_p``, carry only the joint covariances of every window of
``L + 1`` consecutive subsystems (the cliques ``C_s = Cov(b_s .. b_{s+L})``, optionally with global states
held in every clique). The posterior is the maximum-entropy Gaussian with those marginals, whose
precision is block-banded with bandwidth ``L`` (the junction-tree form
``P^-1 = sum_s E_s C_s^-1 E_s^T - sum_s E_s' S_s^-1 E_s'^T``, S the separators). A prediction completes
each clique's window by regression on its separator (:func:`_window_cov`) and propagates it; the update
works in information form, its band inverted by one forward and one backward sweep over super-blocks of
L subsystems (the block-tridiagonal RTS recursion, in space: :func:`_sweeps`), the log-likelihood from
the matrix determinant lemma. Everything is computed in correlation coordinates. The design and its
measurements are in ``docs/design-banded.md``.

References:
    U. A. Khan & J. M. F. Moura, "Distributing the Kalman filter for large-scale systems", IEEE Trans.
    Signal Process. 56(10), 2008 (banded precision, L-banded cliques).
    S. Sarkka & L. Svensson, *Bayesian Filtering and Smoothing*, 2nd ed., 2023, sec. 9.4 (statistical
    linear regression of the outputs).

"""

from __future__ import annotations

import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


def _scaled_solve(a: Any, b: Any) -> Any:
    """``a^-1 b`` for a symmetric positive definite ``a`` of mixed scales (symmetric diagonal scaling)."""
    d = jnp.sqrt(jnp.diagonal(a))
    x = jnp.linalg.solve(a / (d[:, None] * d[None, :]), b / d.reshape((-1,) + (1,) * (b.ndim - 1)))
    return x / d.reshape((-1,) + (1,) * (b.ndim - 1))


class _Layout(eqx.Module):
    """Static shapes: p blocks of b padded states each, bandwidth L, window of nw blocks, g global states.

    The padded ("ext") state vector is the p blocks (``p b``) followed by the g global states, which
    every clique holds after its blocks (:func:`_clique_index`).
    """

    p: int = eqx.field(static=True)
    b: int = eqx.field(static=True)
    L: int = eqx.field(static=True)
    nw: int = eqx.field(static=True)
    reach: int = eqx.field(static=True)
    g: int = eqx.field(static=True, default=0)

    @property
    def n_cliques(self) -> int:
        return self.p - self.L

    @property
    def width(self) -> int:
        """The blocks' part of a clique, ``(L + 1) b``."""
        return (self.L + 1) * self.b

    @property
    def ext(self) -> int:
        """A clique's size, its blocks and the global states."""
        return self.width + self.g

    @property
    def n_pad(self) -> int:
        return self.p * self.b


def _clique_index(lay: _Layout) -> np.ndarray:
    """(n_c, W + g) padded state indices of every clique: its blocks, then the global states."""
    blocks = np.arange(lay.n_cliques)[:, None] * lay.b + np.arange(lay.width)[None, :]
    glob = np.broadcast_to(lay.n_pad + np.arange(lay.g), (lay.n_cliques, lay.g))
    return np.concatenate([blocks, glob], axis=1)


def _window_starts(lay: _Layout) -> np.ndarray:
    s = np.arange(lay.n_cliques)
    return np.clip(s - lay.reach, 0, lay.p - lay.nw)


def _window_cov(lay: _Layout, cliques: Any, a: Any) -> Any:
    """Covariance of blocks ``a .. a + nw - 1`` and the global states (last) of the Markov chain."""
    b, L, g, W, nb = lay.b, lay.L, lay.g, lay.width, lay.nw * lay.b
    glob = nb + np.arange(g)
    emb = np.concatenate([np.arange(W), glob])
    sigma = jnp.zeros((nb + g, nb + g), cliques.dtype).at[np.ix_(emb, emb)].set(cliques[a])
    sep_c = np.concatenate([np.arange(L * b), W + np.arange(g)])  # a clique's separator: L blocks, g
    new_c = np.arange(L * b, W)
    for t in range(1, lay.nw - L):
        c = cliques[a + t]
        gain = _scaled_solve(c[np.ix_(sep_c, sep_c)], c[np.ix_(sep_c, new_c)]).T  # Cov(b_j, S) Cov(S)^-1
        l0, s0 = (L + t) * b, t * b
        known = np.concatenate([np.arange(l0), glob])
        sep = np.concatenate([np.arange(s0, s0 + L * b), glob])
        row = gain @ sigma[np.ix_(sep, known)]
        sigma = sigma.at[l0 : l0 + b, known].set(row).at[known, l0 : l0 + b].set(row.T)
        sigma = sigma.at[l0 : l0 + b, l0 : l0 + b].set(c[np.ix_(new_c, new_c)])
    return sigma


def _holders(lay: _Layout) -> tuple[np.ndarray, np.ndarray]:
    """The first clique holding every block (p,) and that block's entries in it (p, b)."""
    blocks = np.arange(lay.p)
    holder = np.minimum(blocks, lay.n_cliques - 1)
    return holder, (blocks - holder)[:, None] * lay.b + np.arange(lay.b)[None, :]


def _block_diagonal(lay: _Layout, cliques: Any) -> Any:
    """(p b + g) diagonal of every block, read from the first clique holding it, and the global states'."""
    holder, entry = _holders(lay)
    glob = lay.width + np.arange(lay.g)
    return jnp.concatenate([cliques[holder[:, None], entry, entry].reshape(-1), cliques[0, glob, glob]])


def _sigma_offsets(cov: Any, real: Any, root_c: Any) -> tuple[Any, Any, Any]:
    """Sigma points' offsets ``0, +-sqrt(c) l e_i`` (2n + 1, n) of ``N(0, cov)``, none along padding.

    ``l = diag(d) lc`` is factorised in correlation coordinates (mixed scales); ``lc`` and ``d`` are
    returned with the offsets.
    """
    d = jnp.sqrt(jnp.diagonal(cov))
    lc = jnp.linalg.cholesky(cov / (d[:, None] * d[None, :]))
    spread = root_c * (lc * d[:, None]).T * real[:, None]  # row i = sqrt(c) l e_i
    return jnp.concatenate([jnp.zeros_like(spread[:1]), spread, -spread]), lc, d


def _shared_evaluations(fn_pad: Any, mean: Any, offs: Any, cols: Any, groups: Any) -> Any:
    """``fn_pad`` at every sigma point of every group of cliques, each group's offsets added at once.

    ``offs`` (n_c + 1, pts, k) with a zero dummy last, ``cols`` (n_c + 1, k) the padded states they
    move (the dummy's the spare state ``n_pad``), ``groups`` (n_g, m) cliques whose offsets do not meet
    what the others' outputs read. Returns (n_g, pts, ...).
    """
    n_pad = mean.shape[0]

    def group(members: Any) -> Any:
        add = jnp.swapaxes(offs[members], 0, 1).reshape(offs.shape[1], -1)
        delta = jnp.zeros((offs.shape[1], n_pad + 1), mean.dtype).at[:, cols[members].reshape(-1)].add(add)
        return jax.vmap(fn_pad)(mean[None] + delta[:, :n_pad])

    return jax.lax.map(group, groups)


def _logdet(a: Any) -> Any:
    return jnp.linalg.slogdet(a)[1]


def _predict(lay: _Layout, F_cw: Any, Q_c: Any, cliques: Any) -> Any:
    """The predicted cliques ``F_{s,W} Cov(W) F_{s,W}^T + Q_s``.

    ``F_cw`` (n_c, W, nw b): each clique's rows of the transition's Jacobian on its window; ``Q_c``
    (n_c, W, W).
    """
    starts = jnp.asarray(_window_starts(lay))

    def one(f: Any, q: Any, a: Any) -> Any:
        return f @ _window_cov(lay, cliques, a) @ f.T + q

    out = jax.vmap(one)(F_cw, Q_c, starts)
    return 0.5 * (out + jnp.swapaxes(out, 1, 2))


def _predict_unscented(
    lay: _Layout, f_pad: Any, mean: Any, cliques: Any, Q_c: Any, sp: Any
) -> tuple[Any, Any]:
    """The predicted cliques and mean by the unscented transform of each clique's window.

    Each clique's rows of the transition read only its window (``L + 1 + 2 w`` subsystems), so the
    sigma points of the window's Gaussian (completed from the cliques as in :func:`_predict`) give the
    clique's predicted covariance exactly as a UKF on the whole state would give that block (S13-S15).
    Cliques whose windows and rows do not meet share their evaluations of the whole model (one colour of
    ``sp.u_groups``): ``n_colours (2 nw b + 1)`` evaluations per step whatever the number of subsystems.
    Every block's mean is read from the first clique holding it.
    """
    starts = jnp.asarray(_window_starts(lay))
    covs = jax.vmap(lambda a: _window_cov(lay, cliques, a))(starts)
    offs = jax.vmap(_sigma_offsets)(covs, sp.u_real, jnp.sqrt(sp.u_c))[0]  # (n_c, pts, nw b)
    offs = jnp.concatenate([offs, jnp.zeros_like(offs[:1])])  # a dummy clique for the groups' padding
    vals = _shared_evaluations(f_pad, mean, offs, sp.u_win, sp.u_groups)  # (n_g, pts, n_pad)
    rows = jnp.asarray(sp.f_rows)
    y = jax.vmap(lambda g, r: vals[g][:, r])(jnp.asarray(sp.u_group_of), rows)  # (n_c, npts, W)
    mu = jnp.einsum("ci,cia->ca", sp.u_wm, y)
    dev = y - mu[:, None, :]
    out = jnp.einsum("cia,ci,cib->cab", dev, sp.u_wc, dev) + Q_c + sp.u_pad_eye
    out = 0.5 * (out + jnp.swapaxes(out, 1, 2))
    holder, entry = _holders(lay)
    return jnp.concatenate([mu[holder[:, None], entry].reshape(-1), mu[0, lay.width :]]), out


def _output_unscented(
    lay: _Layout, h_pad: Any, mean: Any, cliques: Any, lo: Any, sp: Any, H_jac: Any = None
) -> tuple[Any, Any, Any]:
    """Statistical linear regression of every output on the sigma points of the clique holding it.

    With ``H_jac`` (the outputs' Jacobians at the mean, on their cliques' coordinates) the linearisation
    is kept and only its error is measured: ``e_i = y_i - y_0 - (x_i - m)^T H_jac`` at every point, and
    ``Omega_o`` is their weighted variance ``sum_i wc_i (e_i - e_bar)^2``, ``e_bar = sum_i wm_i e_i``;
    ``H_jac`` and ``h(m)`` are returned with it (``update="compensated"``).

    For output ``o`` read from clique ``s = lo_o`` (covariance ``C = l l^T``, spread ``c``, points
    ``m +- sqrt(c) l e_i``, values ``y_i^+-``, ``y_0`` at the centre): the unscented mean ``mu_o``, the
    regression ``H_o = C^-1 Cov(x, y_o) = l^-T g / (2 sqrt(c))`` with ``g_i = y_i^+ - y_i^-``, and its
    residual variance ``Omega_o = wc_0 (y_0 - mu_o)^2 + sum_i ((y_i^+ + y_i^-) / 2 - mu_o)^2 / c``, which
    the update adds to the output's noise variance (the redrawn UKF's measurement update, Sarkka &
    Svensson 2023, Sec. 9.4, with the outputs' residuals taken as uncorrelated). Cliques that hold no
    common subsystem share their evaluations of the whole output (``sp.h_groups``).
    """
    W = lay.ext
    root_c = jnp.sqrt(sp.c_c)
    offs, lc, d = jax.vmap(_sigma_offsets)(cliques, sp.c_real, root_c)  # (n_c, 2W+1, W); C = (d lc)(d lc)^T
    offs = jnp.concatenate([offs, jnp.zeros_like(offs[:1])])
    vals = _shared_evaluations(h_pad, mean, offs, sp.c_rows, sp.h_groups)  # (n_h, 2W+1, n_y)
    n_y = lo.shape[0]
    y = vals[sp.h_group_of[lo], :, jnp.arange(n_y)]  # (n_y, 2W+1)
    wm, wc = sp.c_wm[lo], sp.c_wc[lo]
    if H_jac is not None:
        err = y - y[:, :1] - jnp.einsum("oia,oa->oi", offs[lo], H_jac)
        err = err - jnp.sum(wm * err, axis=1, keepdims=True)
        return H_jac, y[:, 0], jnp.sum(wc * err**2, axis=1)
    mu = jnp.sum(wm * y, axis=1)
    g = y[:, 1 : W + 1] - y[:, W + 1 :]
    solve = jax.vmap(lambda low, v: jax.scipy.linalg.solve_triangular(low, v, trans="T", lower=True))
    H = solve(lc[lo], g / (2.0 * root_c[lo])[:, None]) / d[lo]
    mid = 0.5 * (y[:, 1 : W + 1] + y[:, W + 1 :]) - mu[:, None]
    omega = wc[:, 0] * (y[:, 0] - mu) ** 2 + jnp.sum(sp.c_real[lo] * mid**2, axis=1) / sp.c_c[lo]
    return H, mu, omega


def _band_of_precision(lay: _Layout, cliques: Any) -> tuple[Any, Any, Any]:
    """The junction-tree precision of these (scaled) cliques, in three parts.

    Its band (p, L + 1, b, b), ``Y[i, i + k]``; the global states' rows ``Y[g, i]`` (p, g, b); and their
    own block ``Y[g, g]`` (g, g).
    """
    b, L, W, g = lay.b, lay.L, lay.width, lay.g
    inv_c = jax.vmap(jnp.linalg.inv)(cliques)  # (n_c, W + g, W + g)
    sep = np.arange(b, W + g)  # separators b_{s+1} .. b_{s+L} and the global states
    inv_s = jax.vmap(jnp.linalg.inv)(cliques[:-1][:, sep][:, :, sep])
    band = jnp.zeros((lay.p, L + 1, b, b), cliques.dtype)
    n_c = lay.n_cliques
    for i in range(L + 1):
        for j in range(i, L + 1):
            blk = inv_c[:, i * b : (i + 1) * b, j * b : (j + 1) * b]
            band = band.at[np.arange(n_c) + i, j - i].add(blk)
    for i in range(L):
        for j in range(i, L):
            blk = inv_s[:, i * b : (i + 1) * b, j * b : (j + 1) * b]
            band = band.at[np.arange(n_c - 1) + 1 + i, j - i].add(-blk)
    y_gb = jnp.zeros((lay.p, g, b), cliques.dtype)
    for i in range(L + 1):
        y_gb = y_gb.at[np.arange(n_c) + i].add(inv_c[:, W:, i * b : (i + 1) * b])
    for i in range(L):
        y_gb = y_gb.at[np.arange(n_c - 1) + 1 + i].add(-inv_s[:, L * b :, i * b : (i + 1) * b])
    y_gg = jnp.sum(inv_c[:, W:, W:], axis=0) - jnp.sum(inv_s[:, L * b :, L * b :], axis=0)
    return band, y_gb, y_gg


def _tridiagonal(lay: _Layout, band: Any) -> tuple[Any, Any, int]:
    """Super-blocks of L blocks: diagonal D (m, Lb, Lb) and sub-diagonal B (m - 1, Lb, Lb) = Y[I+1, I]."""
    b, L = lay.b, lay.L
    m = -(-lay.p // L)
    pad = m * L - lay.p
    if pad:  # inert blocks: identity precision, no coupling
        extra = jnp.zeros((pad, L + 1, b, b), band.dtype).at[:, 0].set(jnp.eye(b))
        band = jnp.concatenate([band, extra])
    D = jnp.zeros((m, L * b, L * b), band.dtype)
    B = jnp.zeros((max(m - 1, 0), L * b, L * b), band.dtype)
    for r in range(L):
        for k in range(L - r):
            blk = band[np.arange(m) * L + r, k]  # Y[I L + r, I L + r + k]
            D = D.at[:, r * b : (r + 1) * b, (r + k) * b : (r + k + 1) * b].set(blk)
            if k:
                D = D.at[:, (r + k) * b : (r + k + 1) * b, r * b : (r + 1) * b].set(jnp.swapaxes(blk, 1, 2))
    for r in range(L):  # row block in super-block I + 1
        for rp in range(L):  # column block in super-block I
            k = L + r - rp
            if k > L or m < 2:
                continue
            blk = band[np.arange(m - 1) * L + rp, k]  # Y[I L + rp, (I + 1) L + r]
            B = B.at[:, r * b : (r + 1) * b, rp * b : (rp + 1) * b].set(jnp.swapaxes(blk, 1, 2))
    return D, B, pad


def _sweeps(D: Any, B: Any, rhs: Any) -> tuple[Any, Any, Any, Any]:
    """For block-tridiagonal ``Y``: ``Y^-1 rhs``, the diagonal and super-diagonal blocks of ``Y^-1``, log det.

    One forward sweep of Schur complements and one backward sweep (the RTS recursion, in space).
    """
    m = D.shape[0]

    def fwd(carry: Any, inp: Any) -> Any:
        s_prev_inv, z_prev = carry
        d, b_prev, r = inp
        s = d - b_prev @ s_prev_inv @ b_prev.T
        s = 0.5 * (s + s.T)
        z = r - b_prev @ s_prev_inv @ z_prev
        s_inv = jnp.linalg.inv(s)
        return (s_inv, z), (s_inv, z, _logdet(s))

    zero_b = jnp.zeros_like(D[0])
    b_prev = jnp.concatenate([zero_b[None], B]) if m > 1 else zero_b[None]
    init = (jnp.zeros_like(D[0]), jnp.zeros_like(rhs[0]))
    _, (s_inv, z, logdets) = jax.lax.scan(fwd, init, (D, b_prev, rhs))
    last = (s_inv[-1], s_inv[-1] @ z[-1])

    def bwd(carry: Any, inp: Any) -> Any:
        sig_next, x_next = carry
        si, zi, bi = inp  # bi = Y[I+1, I]
        gain = si @ bi.T
        x = si @ zi - gain @ x_next
        sig = si + gain @ sig_next @ gain.T
        off = -gain @ sig_next  # Sigma[I, I+1]
        return (sig, x), (sig, x, off)

    if m > 1:
        _, (sigs, xs, offs) = jax.lax.scan(bwd, last, (s_inv[:-1], z[:-1], B), reverse=True)
        sigs = jnp.concatenate([sigs, last[0][None]])
        xs = jnp.concatenate([xs, last[1][None]])
    else:
        sigs, xs, offs = last[0][None], last[1][None], jnp.zeros((0,) + D.shape[1:], D.dtype)
    return xs, sigs, offs, jnp.sum(logdets)


def _cliques_of(lay: _Layout, sigs: Any, offs: Any) -> Any:
    """The cliques from the super-blocks' diagonal and super-diagonal blocks of ``Y^-1``."""
    b, L = lay.b, lay.L
    m = sigs.shape[0]
    Lb = L * b
    # band of Sigma per block: (p_pad, L + 1, b, b), Sigma[i, i + k]
    full = jnp.zeros((m * L, L + 1, b, b), sigs.dtype)
    offs_pad = jnp.concatenate([offs, jnp.zeros((1, Lb, Lb), sigs.dtype)]) if m else offs
    for r in range(L):
        for k in range(L + 1):
            c = r + k
            if c < L:
                blk = sigs[:, r * b : (r + 1) * b, c * b : (c + 1) * b]
            else:
                c -= L
                blk = offs_pad[:, r * b : (r + 1) * b, c * b : (c + 1) * b]
            full = full.at[np.arange(m) * L + r, k].set(blk)
    n_c = lay.n_cliques
    out = jnp.zeros((n_c, lay.width, lay.width), sigs.dtype)
    for i in range(L + 1):
        for j in range(i, L + 1):
            blk = full[np.arange(n_c) + i, j - i]
            out = out.at[:, i * b : (i + 1) * b, j * b : (j + 1) * b].set(blk)
            if j > i:
                out = out.at[:, j * b : (j + 1) * b, i * b : (i + 1) * b].set(jnp.swapaxes(blk, 1, 2))
    return out


def _update(
    lay: _Layout, mean: Any, cliques: Any, H_loc: Any, lo: Any, nu: Any, logdet_r: Any, n_obs: Any
) -> Any:
    """Information-form update of the cliques (padded coordinates); mean, cliques, log-likelihood, NIS.

    ``H_loc`` (n_y, (L + 1) b + g): each whitened output's Jacobian on the L + 1 blocks from block
    ``lo`` and on the global states; ``nu`` the whitened innovation (0 where unobserved), ``logdet_r``
    log det R over the observed.

    With global states the posterior precision is an arrow, ``Y = [[A, C], [C^T, Y_gg]]`` with A
    block-banded: the sweeps solve ``A [x, V] = [r_B, C]`` at once, and the Schur complement
    ``S = Y_gg - C^T V`` gives ``Sigma_gg = S^-1``, ``Sigma_Bg = -V S^-1`` and the band of
    ``Sigma_BB = A^-1 + V S^-1 V^T``; ``log det Y = log det A + log det S``.
    """
    b, L, W, g, n_pad = lay.b, lay.L, lay.width, lay.g, lay.n_pad
    d = jnp.sqrt(_block_diagonal(lay, cliques))  # scaling per padded state
    idx = _clique_index(lay)
    scaled = cliques / (d[idx][:, :, None] * d[idx][:, None, :])
    cols = jnp.concatenate(
        [lo[:, None] * b + jnp.arange(W)[None, :], jnp.broadcast_to(n_pad + jnp.arange(g), (lo.shape[0], g))],
        axis=1,
    )
    G = H_loc * d[cols]  # R^-1/2 H D, on each output's blocks and the global states
    band, y_gb, y_gg = _band_of_precision(lay, scaled)
    outer = jnp.einsum("oa,ob->oab", G, G)
    for i in range(L + 1):
        for j in range(i, L + 1):
            band = band.at[lo + i, j - i].add(outer[:, i * b : (i + 1) * b, j * b : (j + 1) * b])
        y_gb = y_gb.at[lo + i].add(outer[:, W:, i * b : (i + 1) * b])
    y_gg = y_gg + jnp.sum(outer[:, W:, W:], axis=0)
    D, B, pad = _tridiagonal(lay, band)
    g_nu = jnp.zeros(n_pad + g, mean.dtype).at[cols].add(G * nu[:, None])  # G^T nu
    m, Lb = D.shape[0], L * b

    def super_blocks(a: Any) -> Any:  # (p b, k) -> (m, L b, k), inert padding blocks zero
        a = jnp.concatenate([a, jnp.zeros((pad * b, a.shape[1]), a.dtype)]) if pad else a
        return a.reshape(m, Lb, a.shape[1])

    C = jnp.swapaxes(y_gb, 1, 2).reshape(n_pad, g)  # Y[B, g]
    xs, sigs, offs, logdet_post = _sweeps(
        D, B, super_blocks(jnp.concatenate([g_nu[:n_pad, None], C], axis=1))
    )
    xs = xs.reshape(m * Lb, 1 + g)[:n_pad]
    x_b, V = xs[:, 0], xs[:, 1:]  # A^-1 r_B, A^-1 C
    new_scaled = _cliques_of(lay, sigs, offs)
    if g:
        schur = y_gg - C.T @ V
        schur = 0.5 * (schur + schur.T)
        s_gg = jnp.linalg.inv(schur)
        s_gg = 0.5 * (s_gg + s_gg.T)
        delta_g = s_gg @ (g_nu[n_pad:] - C.T @ x_b)
        delta = jnp.concatenate([x_b - V @ delta_g, delta_g])
        logdet_post = logdet_post + _logdet(schur)
        vc = V[idx[:, :W]]  # (n_c, W, g)
        blocks = new_scaled + vc @ s_gg @ jnp.swapaxes(vc, 1, 2)
        cross = -vc @ s_gg
        top = jnp.concatenate([blocks, cross], axis=2)
        bottom = jnp.concatenate(
            [jnp.swapaxes(cross, 1, 2), jnp.broadcast_to(s_gg, cross.shape[:1] + s_gg.shape)], axis=2
        )
        new_scaled = jnp.concatenate([top, bottom], axis=1)
    else:
        delta = x_b
    new = new_scaled * (d[idx][:, :, None] * d[idx][:, None, :])
    new = 0.5 * (new + jnp.swapaxes(new, 1, 2))
    sep = np.arange(b, W + g)
    logdet_prior = -(
        jnp.sum(jax.vmap(_logdet)(scaled)) - jnp.sum(jax.vmap(_logdet)(scaled[:-1][:, sep][:, :, sep]))
    )  # log det of the scaled prior precision
    maha = jnp.sum(nu**2) - jnp.dot(g_nu, delta)
    logdet_s = logdet_r + logdet_post - logdet_prior
    loglik = -0.5 * (maha + logdet_s + n_obs * math.log(2.0 * math.pi))
    return mean + d * delta, new, loglik, maha
