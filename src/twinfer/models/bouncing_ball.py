"""Two-dimensional bouncing ball in a unit box, with optional quadratic air friction.

State ``x = [s_x, v_x, s_y, v_y]`` (eq. 23), discrete state ``z = [n]`` (bounce counter). Walls at
x = +-1 and y = +-1; with ball radius r the four event indicators are (eq. 27)

    c(x) = [1 + s_x - r, 1 - s_x - r, 1 + s_y - r, 1 - s_y - r]     (left, right, bottom, top)

and each fires when it crosses zero from above. The update (eq. 28) puts the ball back on the wall and
reverses the normal velocity with restitution 1 - d. The vector field is eq. 26, which is the friction-free
physics model eq. 25 when mu = 0.

References:
    Thummerer & Mikelsons, "Learnable & Interpretable Model Combination in Dynamical Systems Modeling",
    eqs. (23)-(28); constants of specs/model-combination.md 3.2 (m = 1 from the authors' code).

"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jaxtyping import Array

from twinfer.models._base import AbstractModel, Input, Output, Params, State

WALLS = ("left", "right", "bottom", "top")
PLANAR_STATES = ("s_x", "v_x", "s_y", "v_y")
"""The state (and outputs) of :class:`AbstractPlanarMotion`: positions and velocities in x and y."""


class AbstractPlanarMotion(AbstractModel):
    """A body moving in a plane, observed whole, driven by no input: ``[s_x, v_x, s_y, v_y]``.

    The state and the outputs are the positions and velocities. The bouncing ball and the neural ODEs
    learned in its place (model-combination paper A.9) share this interface, so a learned model stands
    in for the physics one column for column.
    """

    @property
    def state_names(self) -> tuple[str, ...]:
        return PLANAR_STATES

    @property
    def input_names(self) -> tuple[str, ...]:
        return ()

    @property
    def output_names(self) -> tuple[str, ...]:
        return PLANAR_STATES

    def output(self, t: Any, x: State, u: Input, params: Params) -> Output:
        return x


class BouncingBall2D(AbstractPlanarMotion):
    """The bouncing ball of experiment 1 (ground truth with ``mu = 0.15``, physics model with ``mu = 0``).

    Args:
        mu: air-friction coefficient.
        g: gravity [m/s^2].
        r: ball radius [m].
        d: energy-dissipation factor (restitution 1 - d).
        m: mass [kg].

    """

    params: Params

    def __init__(self, mu: float = 0.15, g: float = 9.81, r: float = 0.1, d: float = 0.1, m: float = 1.0):
        for name, value in (("g", g), ("r", r), ("m", m)):
            if not value > 0:
                raise ValueError(f"BouncingBall2D {name}: expected a positive value; received {value}.")
        if not 0 <= d < 1:
            raise ValueError(f"BouncingBall2D d: expected 0 <= d < 1; received {d}.")
        if not mu >= 0:
            raise ValueError(f"BouncingBall2D mu: expected mu >= 0; received {mu}.")
        self.params = {
            name: jnp.asarray(float(v)) for name, v in (("mu", mu), ("g", g), ("r", r), ("d", d), ("m", m))
        }

    @property
    def discrete_state_names(self) -> tuple[str, ...]:
        return ("n",)

    @property
    def n_events(self) -> int:
        return 4

    def vector_field(self, t: Any, x: State, u: Input, params: Params) -> State:
        """Eq. (26): free flight under gravity with quadratic drag ``-v |v| mu / m``."""
        speed = jnp.sqrt(x[1] ** 2 + x[3] ** 2)
        drag = params["mu"] / params["m"] * speed
        return jnp.stack([x[1], -x[1] * drag, x[3], -params["g"] - x[3] * drag])

    def event_indicators(self, t: Any, x: State, z: Array, u: Input, params: Params) -> Array:
        """Eq. (27): distance of the ball's surface to each wall."""
        r = params["r"]
        return jnp.stack([1 + x[0] - r, 1 - x[0] - r, 1 + x[2] - r, 1 - x[2] - r])

    def event_update(
        self, t: Any, x: State, z: Array, u: Input, params: Params, which: Array
    ) -> tuple[State, Array]:
        """Eq. (28): reset onto the wall, reverse and damp the normal velocity, count the bounce."""
        r, e = params["r"], 1 - params["d"]
        hit_x = which[0] | which[1]
        hit_y = which[2] | which[3]
        s_x = jnp.where(which[0], -1 + r, jnp.where(which[1], 1 - r, x[0]))
        s_y = jnp.where(which[2], -1 + r, jnp.where(which[3], 1 - r, x[2]))
        v_x = jnp.where(hit_x, -x[1] * e, x[1])
        v_y = jnp.where(hit_y, -x[3] * e, x[3])
        return jnp.stack([s_x, v_x, s_y, v_y]), z + jnp.sum(which)
