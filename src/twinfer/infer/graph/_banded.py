"""A Kalman filter whose posterior is Markov along an ordered chain of subsystems (banded precision).

The model is the graph's central one (:meth:`~twinfer.infer.graph.Graph.monolithic`, the same
discretisation and noise as the distributed estimator); the posterior keeps the joint covariance of
every window of ``L + 1`` consecutive subsystems (:mod:`twinfer.infer.graph._band`), so each
subsystem's errors stay correlated with its neighbours' as far along the chain as they really are: the
long-range covariance that message passing drops. One step is a Gaussian filter: the transition
linearised by its Jacobian (compressed by colouring, Curtis, Powell & Reid 1974) or by each window's
sigma points; the output by its Jacobian, that Jacobian with its error's variance added to R (the
default, ``"compensated"``), or statistical linear regression on each clique's sigma points. Work and
memory per step are linear in p. With ``L = p - 1`` and ``update="taylor"`` it is the central EKF (a
test). The design, and the coverage measured against the central filter and message passing, are in
``docs/design-banded.md``.

References:
    U. A. Khan & J. M. F. Moura, "Distributing the Kalman filter for large-scale systems", IEEE Trans.
    Signal Process. 56(10), 2008.
    A. R. Curtis, M. J. D. Powell & J. K. Reid, "On the estimation of sparse Jacobian matrices",
    IMA J. Appl. Math. 13, 1974.
    X. Boyen & D. Koller, "Tractable inference for complex stochastic processes", UAI 1998 (the
    block-by-block projection this filter avoids).

"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, TypedDict, Unpack

import jax
import jax.numpy as jnp
import numpy as np

from twinfer.infer._estimate import Estimate
from twinfer.infer.filters import DivergenceError
from twinfer.infer.graph._band import (
    _block_diagonal,
    _clique_index,
    _Layout,
    _output_unscented,
    _predict,
    _predict_unscented,
    _update,
    _window_starts,
)
from twinfer.infer.graph._cache import BANDED, BANDED_JACOBIANS
from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._numbers import _columns
from twinfer.infer.graph._record import check_step
from twinfer.infer.graph._results import _merged, _warn_inconsistent
from twinfer.timing import kernel


def _colouring(k: int, conflict: Any) -> tuple[np.ndarray, np.ndarray]:
    """Greedy colouring of ``k`` items: each item's colour and the (colours, members) table (k: none)."""
    colour = np.full(k, -1)
    for s in range(k):
        taken = {colour[t] for t in range(s) if conflict(s, t)}
        colour[s] = min(set(range(k)) - taken)
    n_g = int(colour.max()) + 1 if k else 0
    m = max((int(np.sum(colour == g)) for g in range(n_g)), default=1)
    groups = np.full((max(n_g, 1), m), k)
    for g in range(n_g):
        members = np.flatnonzero(colour == g)
        groups[g, : members.size] = members
    return colour, groups


class _Sparsity(NamedTuple):
    """Static index tables that read the banded Jacobians off their compressed forms."""

    f_seed: Any  # (n, cf): the colours of the transition's states
    f_rows: Any  # (n_c, W) padded row of each clique entry
    f_cols: Any  # (n_c, nw b) colour of each window column
    f_mask: Any  # (n_c, W, nw b) 1.0 where the row reads that column's state
    f_eye: Any  # (n_c, W, nw b) 1.0 on a padding state's own column (it stays put)
    q_c: Any  # (n_c, W, W) process noise of each clique
    h_seed: Any  # (n, ch)
    h_lo: Any  # (n_y,) first block each output reads
    h_cols: Any  # (n_y, (L + 1) b) colour of each local column
    h_mask: Any  # (n_y, (L + 1) b)
    u_win: Any  # (n_c + 1, nw b) padded state of each window column (a dummy clique: the spare state)
    u_groups: Any  # (n_g, m) cliques sharing evaluations (n_c: none)
    u_group_of: Any  # (n_c,) each clique's group
    u_real: Any  # (n_c, nw b) 1.0 on a window's real states
    u_c: Any  # (n_c,) the spread c of each window's sigma points (its real dimension)
    u_wm: Any  # (n_c, 2 nw b + 1) mean weights (0 on the points along padding states)
    u_wc: Any  # (n_c, 2 nw b + 1) covariance weights
    u_pad_eye: Any  # (n_c, W, W) 1.0 on a padding state's own variance (it stays 1)
    c_rows: Any  # (n_c + 1, W) padded states of each clique (a dummy: the spare state)
    h_groups: Any  # (n_h, m) cliques holding outputs that share evaluations of the output (n_c: none)
    h_group_of: Any  # (n_c,) each holder's group
    c_real: Any  # (n_c, W) 1.0 on a clique's real states
    c_c: Any  # (n_c,) the spread c of each clique's sigma points
    c_wm: Any  # (n_c, 2 W + 1)
    c_wc: Any  # (n_c, 2 W + 1)


def _seed(lay: _Layout, pad_index: np.ndarray, period: int) -> tuple[np.ndarray, np.ndarray]:
    """The seed (n, period b + g) of a compressed Jacobian and the colour of every padded state.

    States whose blocks are ``period`` apart share a colour (Curtis, Powell & Reid 1974): one directional
    derivative per colour, ``period * b`` of them whatever the number of blocks; each global state has a
    colour of its own.
    """
    b, n_pad = lay.b, lay.n_pad
    colour_pad = np.concatenate(
        [((np.arange(n_pad) // b) % period) * b + np.arange(n_pad) % b, period * b + np.arange(lay.g)]
    )
    seed = np.zeros((pad_index.size, period * b + lay.g))
    seed[np.arange(pad_index.size), colour_pad[pad_index]] = 1.0
    return seed, colour_pad


def _sigma_weights(weights: Any, real: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and covariance weights (k, 2 n + 1) and spread c (k,) of each row's sigma points (S13-S15).

    Only the row's real states have points (those along padding states get weight 0); c is the real
    dimension's.
    """
    wm_all = np.zeros((real.shape[0], 2 * real.shape[1] + 1))
    wc_all, c_all = np.zeros_like(wm_all), np.zeros(real.shape[0])
    for s, r in enumerate(real):
        wm, wc, c = weights.weights(int(r.sum()))
        on = np.concatenate([[True], r, r])
        wm_all[s, on], wc_all[s, on], c_all[s] = np.asarray(wm), np.asarray(wc), c
    return wm_all, wc_all, c_all


def _sparsity(
    lay: _Layout,
    f_blocks: np.ndarray,
    h_blocks: np.ndarray,
    pad_index: np.ndarray,
    q_pad: np.ndarray,
    weights: Any,
) -> _Sparsity:
    """The index tables of one structure.

    ``f_blocks`` (n, p + g) and ``h_blocks`` (n_y, p + g) say which blocks every row of the transition
    and the output reads (the global states last, one each).
    """
    b, L, p, g = lay.b, lay.L, lay.p, lay.g
    n_pad = lay.n_pad
    n_ext = n_pad + g
    real = np.zeros(n_ext, dtype=bool)
    real[pad_index] = True
    block = np.concatenate([np.arange(n_pad) // b, p + np.arange(g)])  # each global state its own
    owner = block[pad_index]
    f_pattern = np.zeros((p + g, p + g), dtype=bool)  # block i's equations read block j
    for i in range(p + g):
        f_pattern[i] = f_blocks[owner == i].any(axis=0)
    f_seed, f_colour = _seed(lay, pad_index, min(2 * lay.reach + 1, p))
    rows = _clique_index(lay)
    glob = np.broadcast_to(n_pad + np.arange(g), (lay.n_cliques, g))
    wins = np.concatenate([_window_starts(lay)[:, None] * b + np.arange(lay.nw * b)[None, :], glob], axis=1)
    mask = f_pattern[block[rows][:, :, None], block[wins][:, None, :]]
    mask &= real[rows][:, :, None] & real[wins][:, None, :]
    eye = (rows[:, :, None] == wins[:, None, :]) & ~real[rows][:, :, None]
    h_seed, h_colour = _seed(lay, pad_index, min(L + 1, p))
    n_y = h_blocks.shape[0]
    lo = np.zeros(n_y, dtype=int)
    for o, row in enumerate(h_blocks):
        reads = np.flatnonzero(row[:p])
        lo[o] = min(int(reads.min()), p - 1 - L) if reads.size else 0
    local = np.concatenate([lo[:, None] * b + np.arange(lay.width)[None, :], glob[:1].repeat(n_y, 0)], axis=1)
    h_mask = h_blocks[np.arange(n_y)[:, None], block[local]] & real[local]
    # cliques that may share evaluations for the unscented prediction: neither one's rows read the
    # other's window (greedy colouring in the chain's order; the global states are in every window)
    starts = _window_starts(lay)
    reads = [
        f_pattern[np.r_[np.arange(s, s + L + 1), p + np.arange(g)]].any(axis=0) for s in range(lay.n_cliques)
    ]
    windows = [np.isin(np.arange(p + g), np.r_[np.arange(a, a + lay.nw), p + np.arange(g)]) for a in starts]
    colour, groups = _colouring(
        lay.n_cliques,
        lambda s, t: (
            bool((reads[s] & windows[t]).any() or (reads[t] & windows[s]).any())
            or bool((windows[s][:p] & windows[t][:p]).any())
        ),
    )
    # for the unscented update: cliques holding outputs (each output's lo), disjoint ones sharing points;
    # a holder whose outputs read a global state shares with none (every clique's points move it)
    holders = np.unique(lo) if n_y else np.zeros(1, dtype=int)
    global_reader = (
        np.asarray([bool(h_blocks[lo == k][:, p:].any()) for k in holders]) if n_y else np.zeros(1, bool)
    )
    hold_colour, h_groups = _colouring(
        holders.size,
        lambda s, t: (
            abs(int(holders[s]) - int(holders[t])) <= L
            or (g > 0 and bool(global_reader[s] or global_reader[t]))
        ),
    )
    h_group_of = np.zeros(lay.n_cliques, dtype=int)
    h_group_of[holders] = hold_colour
    h_groups = np.where(
        h_groups < holders.size, holders[np.minimum(h_groups, holders.size - 1)], lay.n_cliques
    )
    c_real = real[rows]
    h_wm, h_wc, h_c = _sigma_weights(weights, c_real)
    u_win = np.concatenate([wins, np.full((1, wins.shape[1]), n_ext)])
    u_real = real[wins]
    u_wm, u_wc, u_c = _sigma_weights(weights, u_real)
    pad_eye = np.zeros((lay.n_cliques, lay.ext, lay.ext))
    diag = np.arange(lay.ext)
    pad_eye[:, diag, diag] = ~real[rows]
    return _Sparsity(
        f_seed,
        rows,
        f_colour[wins],
        mask.astype(float),
        eye.astype(float),
        q_pad[rows[:, :, None], rows[:, None, :]],
        h_seed,
        lo,
        h_colour[local],
        h_mask.astype(float),
        u_win,
        groups,
        colour,
        u_real.astype(float),
        u_c,
        u_wm,
        u_wc,
        pad_eye,
        np.concatenate([rows, np.full((1, lay.ext), n_ext)]),
        h_groups,
        h_group_of,
        c_real.astype(float),
        h_c,
        h_wm,
        h_wc,
    )


def _scan_of(step: Any) -> Any:
    """The scan of ``step`` (:func:`_step_of`) over a record; every number is an argument."""

    def scan(numbers: Any, x_init: Any, cl_init: Any, us: Any, ys: Any, masks: Any) -> Any:
        return jax.lax.scan(lambda c, i: step(numbers, c, i), (x_init, cl_init), (us, ys, masks))[1]

    return scan


def _step_of(
    transition: Any,
    output: Any,
    lay: _Layout,
    pad_index: np.ndarray,
    prediction: str,
    update: str,
) -> Any:
    """One step of the banded filter for one structure: ``step(numbers, (mean, cliques), (u, y, mask))``."""
    n_pad = lay.n_pad + lay.g
    pidx = jnp.asarray(pad_index)

    def step(numbers: Any, carry: Any, inp: Any) -> Any:
        mean, cliques = carry
        u_row, y, mask = inp
        sp = numbers["sparsity"]
        half = u_row.shape[0] // 2  # [u_k, u_meas]: Dataset.step_inputs
        u = _columns(u_row[:half], numbers["inputs"])
        u_meas = _columns(u_row[half:], numbers["inputs"])
        zero_m = jnp.zeros((0,), mean.dtype)
        params = numbers["params"]
        f = lambda x: transition(x, u, zero_m, params)  # noqa: E731
        h = lambda x: output(x, u_meas, zero_m, params)  # noqa: E731
        if prediction == "unscented":
            f_pad = lambda xp: xp.at[pidx].set(f(xp[pidx]))  # noqa: E731 (padding states stay put)
            mean_in = jnp.zeros(n_pad, mean.dtype).at[pidx].set(mean)
            mean_pp, cl_p = _predict_unscented(lay, f_pad, mean_in, cliques, sp.q_c, sp)
            mean_p = mean_pp[pidx]
        else:
            comp = jax.jacfwd(lambda z: f(mean + sp.f_seed @ z))(jnp.zeros(sp.f_seed.shape[1], mean.dtype))
            comp = jnp.zeros((n_pad, comp.shape[1]), mean.dtype).at[pidx].set(comp)
            F_cw = comp[sp.f_rows[:, :, None], sp.f_cols[:, None, :]] * sp.f_mask + sp.f_eye
            mean_p = f(mean)
            cl_p = _predict(lay, F_cw, sp.q_c, cliques)
        mean_pad = jnp.zeros(n_pad, mean.dtype).at[pidx].set(mean_p)
        H_jac = None
        if update != "unscented":
            hcomp = jax.jacfwd(lambda z: h(mean_p + sp.h_seed @ z))(jnp.zeros(sp.h_seed.shape[1], mean.dtype))
            H_jac = jnp.take_along_axis(hcomp, sp.h_cols, axis=1) * sp.h_mask
        if H_jac is not None and update == "taylor":
            H_raw, y_pred, var_r = H_jac, h(mean_p), numbers["r"]
        else:
            h_pad = lambda xp: h(xp[pidx])  # noqa: E731
            lo = jnp.asarray(sp.h_lo)
            H_raw, y_pred, omega = _output_unscented(lay, h_pad, mean_pad, cl_p, lo, sp, H_jac)
            var_r = numbers["r"] + omega
        sd_r = jnp.sqrt(var_r)
        H_loc = jnp.where(mask[:, None], H_raw / sd_r[:, None], 0.0)
        nu = jnp.where(mask, (y - y_pred) / sd_r, 0.0)
        logdet_r = jnp.sum(jnp.where(mask, jnp.log(var_r), 0.0))
        new_pad, cl_u, loglik, maha = _update(
            lay, mean_pad, cl_p, H_loc, jnp.asarray(sp.h_lo), nu, logdet_r, jnp.sum(mask)
        )
        new = new_pad[pidx]
        return (new, cl_u), (new, _block_diagonal(lay, cl_u)[pidx], loglik, maha)

    return step


def _structure(graph: Graph) -> tuple[list[Any], Any, list[tuple[int, int]]]:
    subs, _ = graph.flatten()
    if graph.fields:
        raise ValueError(f"banded_estimate: graph {graph.name!r} is coupled by a field; expected interfaces.")
    mono = graph.monolithic()
    slices = list(graph.state_slices().values())
    return subs, mono, slices


def _jacobian(fn: Any) -> Any:
    """``fn``'s Jacobian in the state, ``(x, u, params) -> d fn(x, u, [], params) / dx``, one program.

    Taken op by op, a ten-mass chain's step dispatched and compiled 345 small programs (12 s of a 14 s
    setup). Kept per central model's function (``BANDED_JACOBIANS``): the input and the parameters are
    arguments, so every graph of one structure (another bandwidth, update or record) reuses the program
    rather than tracing and compiling it again (~2 s a call on a ten-mass chain).
    """
    zero_m = jnp.zeros((0,))
    return BANDED_JACOBIANS.get(
        lambda: fn, lambda: jax.jit(jax.jacfwd(lambda x, u, params: fn(x, u, zero_m, params)))
    )


def _reach(jac: Any, x: Any, u: Any, params: Any, owner: np.ndarray, n_blocks: int) -> np.ndarray:
    """Block incidence (rows' blocks x columns' blocks) of the Jacobian ``jac(x, u, params)``.

    ``jac`` is :func:`_jacobian` of the central model's transition or output.
    """
    jac = np.asarray(jac(x, u, params))
    out = np.zeros((jac.shape[0], n_blocks), dtype=bool)
    for j in range(n_blocks):
        out[:, j] = np.any(jac[:, owner == j] != 0.0, axis=1)
    return out


class BandedOptions(TypedDict, total=False):
    """The banded filter's options (:func:`banded_estimate`, :func:`banded_setup`), every one optional."""

    prediction: str
    update: str
    parameters: str
    key: Any


def banded_estimate(
    graph: Graph, dataset: Any, bandwidth: int = 2, **options: Unpack[BandedOptions]
) -> Estimate:
    """Estimate the states of ``graph`` with a posterior that is Markov of order ``bandwidth`` along it.

    The subsystems are taken in the graph's order (a chain's from its fixed end); the model is the
    graph's central one (:meth:`~twinfer.infer.graph.Graph.monolithic`, the same discretisation and noise
    as the distributed estimator), linearised at each step by Jacobians or sigma points. See
    ``docs/design-banded.md`` for the method and the coverage it reaches where the message-passing
    estimators under-cover.

    Args:
        graph: subsystems joined by interfaces (e.g. from :meth:`~twinfer.infer.graph.Graph.from_model`),
            ordered so that every interface joins subsystems at most ``bandwidth`` apart.
        dataset: the record (:class:`twinfer.data.Dataset`), as for :func:`twinfer.infer.estimate`.
        bandwidth: L, the number of neighbours on each side whose correlation each subsystem keeps
            (1 <= L; L >= p - 1 is the central filter). The window a step reads is found from the
            Jacobian's structure at a random draw from the prior.
        prediction: ``"taylor"`` (the transition's Jacobian at the mean) or ``"unscented"`` (each
            window's sigma points, with the graph's :class:`~twinfer.infer.gaussian.UnscentedWeights`).
        update: ``"compensated"`` (the output's Jacobian at the predicted mean, the variance of its
            error at each clique's sigma points added to R), ``"taylor"`` (the Jacobian alone) or
            ``"unscented"`` (statistical linear regression on each clique's sigma points, its residual
            added to R); ``docs/design-banded.md`` says what each covers.
        parameters: where the unknown parameters' correlations are kept: ``"local"`` (each unknown in
            its subsystem's block, correlated only with the L neighbours on each side) or ``"global"``
            (every clique holds every unknown, so each is correlated with the whole chain: the
            precision is an arrow on the band; each clique grows by the number of unknowns). Neither is
            better everywhere: ``docs/design-banded.md`` has the measurements.
        key: a PRNG key for that draw (default ``jax.random.key(0)``).

    Returns:
        An :class:`~twinfer.infer.Estimate` in the graph's state order (means, standard deviations,
        parameters, log-likelihood and NIS; no full covariance).

    Raises:
        ValueError: for a bandwidth below 1, a dataset whose output or input names are not the graph's
            (:meth:`~twinfer.infer.graph.Graph.check_dataset`), an unknown prediction or update, a graph
            coupled by a field, a subsystem with memory, or an output that reads subsystems more than
            ``bandwidth`` apart (naming it).
        DivergenceError: at the first step with a non-finite mean or a non-positive variance, naming it.

    """
    setup = banded_setup(graph, dataset, bandwidth, **options)
    return banded_result(graph, dataset, setup, setup.numbers, setup.x0)


class BandedSetup(NamedTuple):
    """The banded filter of one graph and window structure: its step, its compiled scan and its numbers.

    ``numbers`` is ``(the step's numbers, the prior's clique covariances)``; ``outputs`` the record
    columns the central model reads (-1: none); ``subs``/``slices`` the subsystems and their columns.
    """

    step: Any
    run: Any
    numbers: Any
    x0: Any
    outputs: np.ndarray
    subs: list[Any]
    slices: list[tuple[int, int]]
    P0: np.ndarray


def banded_setup(
    graph: Graph,
    dataset: Any,
    bandwidth: int = 2,
    *,
    prediction: str = "taylor",
    update: str = "compensated",
    parameters: str = "local",
    key: Any = None,
) -> BandedSetup:
    """Check the options, find the window structure at a prior draw and build the step's numbers.

    Raises:
        ValueError: as :func:`banded_estimate`.

    """
    if int(bandwidth) != bandwidth or bandwidth < 1:
        raise ValueError(f"banded_estimate bandwidth: expected an integer >= 1; received {bandwidth!r}.")
    graph.check_dataset(dataset, "banded_estimate")
    subs, mono, slices = _structure(graph)
    check_step([s.dynamics.dt for s in subs if s.dynamics is not None], dataset, "banded_estimate")
    if prediction not in ("taylor", "unscented"):
        raise ValueError(
            f"banded_estimate prediction: expected 'taylor' or 'unscented'; received {prediction!r}."
        )
    if update not in ("compensated", "taylor", "unscented"):
        raise ValueError(
            f"banded_estimate update: expected 'compensated', 'taylor' or 'unscented'; received {update!r}."
        )
    if parameters not in ("global", "local"):
        raise ValueError(
            f"banded_estimate parameters: expected 'global' or 'local'; received {parameters!r}."
        )
    p = len(slices)
    L = min(int(bandwidth), max(p - 1, 1))
    unknown = np.zeros(slices[-1][1], dtype=bool)  # the unknown parameters among the central model's states
    for sub, (a, _) in zip(subs, slices, strict=True):
        names = list(sub.state_names or ())
        for name in sub.parameters:
            unknown[a + names.index(name)] = True
    glob = unknown if parameters == "global" else np.zeros_like(unknown)
    g = int(glob.sum())
    sizes = [int(np.sum(~glob[a:c])) for a, c in slices]  # each block's own states
    b = max(max(sizes), 1)
    n_pad = p * b
    pad_index = np.zeros(unknown.size, dtype=int)  # real -> padded: blocks, then the global states
    owner = np.zeros(unknown.size, dtype=int)  # real -> block (p + k for the k-th global state)
    for i, (a, c) in enumerate(slices):
        mine = np.arange(a, c)[~glob[a:c]]
        pad_index[mine], owner[mine] = i * b + np.arange(mine.size), i
    pad_index[glob], owner[glob] = n_pad + np.arange(g), p + np.arange(g)
    inputs = jnp.asarray(mono.inputs, dtype=int)
    outputs = np.asarray(mono.outputs, dtype=int)
    params = mono.params
    x0 = jnp.asarray(mono.x0, dtype=jnp.float64)
    P0 = np.asarray(mono.P0, dtype=np.float64)
    # the structure of one step, at a draw from the prior (a zero state hides terms such as k x)
    key = jax.random.key(0) if key is None else key
    draw = x0 + jnp.sqrt(jnp.diag(jnp.asarray(P0))) * jax.random.normal(key, x0.shape)
    us_all = np.zeros((dataset.n_steps, 0)) if dataset.inputs is None else np.asarray(dataset.inputs)
    u_draw = _columns(jnp.asarray(us_all[0]), inputs)
    f_blocks = _reach(_jacobian(mono.transition), draw, u_draw, params, owner, p + g)
    if g and f_blocks[glob][:, :p].any():
        names = [n for sub in subs for n in sub.parameters]
        raise ValueError(
            f"banded_estimate parameters: the unknown parameters {names} are held global (in every "
            "clique), which expects each to evolve by itself (a random walk); received one whose "
            "transition reads a subsystem's states. Use parameters='local'."
        )
    reach = 0
    for i in range(p):
        cols = np.flatnonzero(f_blocks[owner == i][:, :p].any(axis=0))
        reach = max(reach, int(np.max(np.abs(cols - i))) if cols.size else 0)
    if outputs.size:
        h_blocks = _reach(_jacobian(mono.output), draw, u_draw, params, owner, p + g)
    else:
        h_blocks = np.zeros((0, p + g), bool)
    for o, row in enumerate(h_blocks):
        cols = np.flatnonzero(row[:p])
        if cols.size and cols.max() - cols.min() > L:
            raise ValueError(
                f"banded_estimate bandwidth: output {o} (data column {outputs[o]}) reads subsystems "
                f"{[subs[c].name for c in cols]}, more than {L} apart; expected a bandwidth >= "
                f"{int(cols.max() - cols.min())}."
            )
    nw = min(L + 1 + 2 * reach, p)
    lay = _Layout(p, b, L, nw, reach, g)
    n_ext = n_pad + g
    dummy = np.ones(n_ext)
    dummy[pad_index] = 0.0
    Q_pad = np.zeros((n_ext, n_ext))
    Q_pad[np.ix_(pad_index, pad_index)] = np.asarray(mono.Q)
    P0_pad = np.diag(dummy)
    P0_pad[np.ix_(pad_index, pad_index)] = P0
    idx = _clique_index(lay)
    cliques0 = jnp.asarray(P0_pad[idx[:, :, None], idx[:, None, :]])
    R = np.asarray(mono.R, dtype=np.float64)
    if np.any(R - np.diag(np.diag(R))):
        raise ValueError(
            "banded_estimate R: expected uncorrelated measurement noise (a diagonal R in every subsystem); "
            "received correlated outputs."
        )
    numbers = {
        "params": params,
        "r": jnp.asarray(np.diag(R)),
        "inputs": inputs,
        "sparsity": _Sparsity(
            *(jnp.asarray(a) for a in _sparsity(lay, f_blocks, h_blocks, pad_index, Q_pad, mono.weights))
        ),
    }
    step = _step_of(mono.transition, mono.output, lay, pad_index, prediction, update)
    run = BANDED.get(
        lambda: (
            mono.transition,
            mono.output,
            lay,
            tuple(pad_index.tolist()),
            prediction,
            update,
        ),
        lambda: jax.jit(_scan_of(step)),
    )
    return BandedSetup(step, run, (numbers, cliques0), x0, outputs, subs, slices, P0)


def banded_result(graph: Graph, dataset: Any, setup: BandedSetup, numbers: Any, x0: Any) -> Estimate:
    """The banded filter's compiled scan over ``dataset`` and its :class:`Estimate` in the graph's order.

    The scan is the run's kernel (:func:`twinfer.timing.kernel`: :func:`twinfer.timing.timed` times it).

    Raises:
        DivergenceError: at the first step with a non-finite mean or a non-positive variance.

    """
    run, outputs, subs, slices, P0 = setup.run, setup.outputs, setup.subs, setup.slices, setup.P0
    numbers, cliques0 = numbers
    us = jnp.asarray(dataset.step_inputs())  # per step: the input held over it, the one y was read with
    ys_all = np.nan_to_num(np.asarray(dataset.observations))[1:]
    mask_all = np.asarray(dataset.mask)[1:]
    seen = outputs >= 0
    safe = np.where(seen, outputs, 0)
    ys = jnp.asarray(ys_all[:, safe])
    masks = jnp.asarray(mask_all[:, safe] & seen[None, :])
    means, variances, logliks, mahas = kernel(run, numbers, x0, cliques0, us, ys, masks)
    means, variances = np.asarray(means), np.asarray(variances)
    bad = ~(np.isfinite(means).all(axis=1) & np.all(variances > 0, axis=1))
    if bad.any():
        k = int(np.argmax(bad))
        raise DivergenceError(
            f"banded_estimate diverged at step {k + 1} (t = {float(np.asarray(dataset.times)[k + 1]):g}): a "
            "non-finite mean or a non-positive variance. Try a larger process noise, a smaller time step "
            "or a larger bandwidth."
        )
    means = np.concatenate([np.asarray(x0)[None], means])
    stds = np.sqrt(np.concatenate([np.diag(P0)[None], variances]))
    result = {}
    for i, (s, (a, c)) in enumerate(zip(subs, slices, strict=True)):
        result[s.name] = (means[:, a:c], stds[:, a:c], float(np.sum(logliks)) if i == 0 else 0.0)
    est = _merged(graph, result, dataset, None)
    n_obs = int(np.asarray(masks).sum())
    nis = float(np.sum(mahas)) / n_obs if n_obs else None
    _warn_inconsistent(
        "banded_estimate", nis, {"the banded filter": (float(np.sum(mahas)), n_obs)}, est.loglik
    )
    return dataclasses.replace(est, nis=nis)
