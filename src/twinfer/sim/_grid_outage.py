"""A Kuramoto power network's record with a line outage: the coupling of one line removed mid-record.

A line outage in the second-order Kuramoto model of a grid (S73-S74) is the loss of the line's coupling
``K_ij = K_ji`` between its two buses: both entries of the padded neighbour lists become 0 from the
outage on. The record is two segments with state continuity, as an acquisition of the event would see
it: the intact network by :func:`~twinfer.sim.simulate_grid` (the paper's Heun scheme and Table S4's
draws) up to the outage step, then the network without the line from the state the first one reached.

References:
    Ghorbani & Hackl, SI (S73)-(S74), (S79), Table S4 (specs/compositional-inference.md 3.5).

"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from twinfer.errors import TwinferValueError
from twinfer.models import KuramotoNetwork, wrap_angle
from twinfer.sim._discretise import discretise
from twinfer.sim._grid import simulate_grid
from twinfer.sim._simulate import simulate_discrete


def without_line(model: KuramotoNetwork, line: tuple[int, int]) -> KuramotoNetwork:
    """``model`` with the coupling of ``line`` (buses i, j, from 0) removed both ways: ``K_ij = K_ji = 0``.

    Raises:
        TwinferValueError: ``line`` is not a coupled pair of buses of ``model``.

    """
    i, j = (int(b) for b in line)
    index, weight = np.asarray(model.index), np.array(model.weight)
    hit_ij = (index[i] == j) & (weight[i] > 0) if 0 <= i < model.n_bus else np.zeros(0, bool)
    hit_ji = (index[j] == i) & (weight[j] > 0) if 0 <= j < model.n_bus else np.zeros(0, bool)
    if i == j or not hit_ij.any() or not hit_ji.any():
        raise TwinferValueError(
            f"without_line line: expected two coupled buses (K_ij > 0 and K_ji > 0, from 0) of the "
            f"{model.n_bus}-bus network; received {line!r}."
        )
    weight[i, hit_ij] = 0.0
    weight[j, hit_ji] = 0.0
    return KuramotoNetwork(index, weight, model.params["d"], model.params["Omega"])


def simulate_grid_outage(
    model: KuramotoNetwork,
    dt: float,
    steps: int,
    substeps: int,
    sigma: float,
    key: jax.Array,
    outage: tuple[int, tuple[int, int]],
) -> dict[str, np.ndarray]:
    """A :func:`~twinfer.sim.simulate_grid` record whose line ``outage[1]`` trips at step ``outage[0]``.

    Steps ``1..onset`` are the intact network's (the same draws as :func:`~twinfer.sim.simulate_grid`
    with ``key``); from the state at ``t_onset`` on, :func:`without_line`'s network takes the remaining
    ``steps - onset`` steps by the same Heun scheme, measured with fresh noise ``N(0, sigma^2)`` (wrapped
    phases and frequencies, S79).

    Args:
        model: the intact network.
        dt: the sampling step [s].
        steps: the record's length T in steps.
        substeps: Heun sub-steps per ``dt``.
        sigma: the measurement noise's standard deviation.
        key: the draws' key.
        outage: ``(onset step in 1..T-1, (bus i, bus j))``, buses from 0.

    Returns:
        ``states`` (T+1, 2N), ``observations`` (T, 2N) at t_1..t_T and the initial estimate ``init`` (2N,).

    Raises:
        TwinferValueError: an onset outside ``1..T-1`` or a line that is not one (:func:`without_line`).

    """
    onset, line = int(outage[0]), outage[1]
    if not 1 <= onset < steps:
        raise TwinferValueError(
            f"simulate_grid_outage outage: expected an onset step in 1..{steps - 1}; received {onset}."
        )
    cut = without_line(model, line)
    first = simulate_grid(model, dt, onset, substeps, sigma, key)
    n = model.n_bus
    step = discretise(cut, dt, "heun", substeps=substeps)  # the record's steps only are kept
    rest = steps - onset
    traj = simulate_discrete(step, jnp.asarray(first["states"][-1]), None, n_steps=rest)
    states = np.asarray(traj.states)
    noise = sigma * np.asarray(jax.random.normal(jax.random.fold_in(key, onset), (rest, 2 * n)))
    y = np.concatenate([np.asarray(wrap_angle(states[1:, :n])), states[1:, n:]], axis=1) + noise
    y[:, :n] = np.asarray(wrap_angle(y[:, :n]))  # as simulate_grid measures (S79)
    return {
        "states": np.concatenate([first["states"], states[1:]]),
        "observations": np.concatenate([first["observations"], y]),
        "init": first["init"],
    }
