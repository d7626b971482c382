"""A Kuramoto power network's record as the compositional-inference paper simulates it (S79, Table S4).

References:
    Ghorbani & Hackl, SI (S79), Table S4 (specs/compositional-inference.md 3.5, 7 item 9).

"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from twinfer.models import KuramotoNetwork, wrap_angle
from twinfer.sim._discretise import discretise
from twinfer.sim._simulate import simulate_discrete


def simulate_grid(
    model: KuramotoNetwork, dt: float, steps: int, substeps: int, sigma: float, key: jax.Array
) -> dict[str, np.ndarray]:
    """Truth (T+1, 2N) by Heun steps (S79), wrapped phase and frequency measurements at t_1..t_T.

    Draws (Table S4): theta_0 ~ U(-0.5, 0.5), omega_0 ~ U(-0.2, 0.2), noise N(0, sigma^2), and the
    initial estimate perturbation N(0, 0.2^2) (specs 7 item 9: 0.04 is a variance), in that order from
    ``key``. The truth takes ``substeps`` Heun steps per ``dt`` and is sampled every ``dt``.

    Returns:
        ``states`` (T+1, 2N), ``observations`` (T, 2N) and the initial estimate ``init`` (2N,).

    """
    n = model.n_bus
    k_th, k_om, k_noise, k_init = jax.random.split(key, 4)
    theta0 = jax.random.uniform(k_th, (n,), minval=-0.5, maxval=0.5)
    omega0 = jax.random.uniform(k_om, (n,), minval=-0.2, maxval=0.2)
    x0 = jnp.concatenate([theta0, omega0])
    step = discretise(model, dt, "heun", substeps=substeps)  # the record's steps only are kept
    traj = simulate_discrete(step, x0, None, n_steps=steps)
    states = np.asarray(traj.states)
    clean = np.concatenate([np.asarray(wrap_angle(states[1:, :n])), states[1:, n:]], axis=1)
    noise = sigma * np.asarray(jax.random.normal(k_noise, clean.shape))
    y = clean + noise
    y[:, :n] = np.asarray(wrap_angle(y[:, :n]))
    init = np.asarray(x0) + 0.2 * np.asarray(jax.random.normal(k_init, (2 * n,)))
    return {"states": states, "observations": y, "init": init}
