"""A grid's turbines simulated standalone, each driven by the electrical torque of a coupled record.

The compositional-inference paper's reference for the turbines embedded in a network (section 3.7,
[REPO]): each 19-state unit of a :class:`~twinfer.models.TurbineGrid` integrated alone, with the grid's
coupling replaced by the electrical torque ``T_e(t)`` a coupled record gives, so an embedded estimate can be
compared with what each turbine does on its own.

References:
    Ghorbani & Hackl, SI section 3.7, eq. (S144)-(S150); specs/compositional-inference.md 3.7 [REPO].

"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from twinfer.errors import TwinferValueError
from twinfer.models import TurbineGrid
from twinfer.models.turbine_parts import grid_unit_rhs
from twinfer.sim._batch import simulate_batch
from twinfer.sim._steps import heun_step


def simulate_standalone_units(
    model: TurbineGrid, states: Float[ArrayLike, "T+1 n"], dt: float, substeps: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each unit of ``model`` alone from the record's first state, driven by the record's ``T_e``.

    ``T_e`` of each generator is evaluated at the record's states (the bus angles) and averaged over each
    step's two ends, held over the step; each unit takes ``substeps`` Heun steps per ``dt``.

    Args:
        model: the network of turbines.
        states: a coupled record's states (T + 1, n) in the model's state order, every ``dt``.
        dt: the record's step [s].
        substeps: Heun steps per ``dt``.

    Returns:
        ``(units, t_e)``: the units' states (U, T + 1, 19) and the record's ``T_e`` (T + 1, U) [N m].

    Raises:
        TwinferValueError: ``states`` not (T + 1, n) with at least two rows.

    """
    x = jnp.asarray(states)
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] != len(model.state_names):
        raise TwinferValueError(
            f"simulate_standalone_units states: expected (T + 1, {len(model.state_names)}) with T >= 1; "
            f"received shape {tuple(x.shape)}."
        )
    t_e = np.asarray(jax.vmap(model.electrical_torque)(x))
    mid = 0.5 * (t_e[:-1] + t_e[1:])
    units = jax.tree.map(lambda *v: jnp.stack([jnp.asarray(a) for a in v]), *model.units)
    x0 = model.unit_states(x[0])
    out = simulate_batch(grid_unit_rhs, heun_step, units, x0, jnp.asarray(mid.T), dt, substeps)
    return np.asarray(out), t_e
