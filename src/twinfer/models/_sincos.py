"""Sine and cosine together, as element-wise arithmetic that XLA fuses and vectorises on the CPU.

XLA's CPU backend evaluates a float64 ``sin`` or ``cos`` as one scalar library call per element (about
25 ns each on this project's machine), which made the phases' sines the largest single cost of the grid
filters' Heun sigma points. Here both come from one range reduction and two polynomials:

* ``k = round(x / (pi/2))`` and ``r = x - k pi/2`` with pi/2 split in two parts (Cody & Waite), so
  ``|r| <= pi/4`` is exact to rounding for ``|x|`` up to about 1e6;
* ``sin r`` and ``cos r`` from their Taylor series through ``r^17`` and ``r^18``: the first omitted terms
  are below ``(pi/4)^19 / 19! ~ 8e-20`` and ``(pi/4)^20 / 20! ~ 3e-21``, far under float64 rounding;
* the quadrant ``k mod 4`` selects and signs them.

The results agree with ``jnp.sin``/``jnp.cos`` to about one unit in the last place (tested) at roughly
a sixth of the cost, and the operations fuse with their neighbours into one loop.

References:
    W. J. Cody and W. Waite, Software Manual for the Elementary Functions (1980), ch. 8 (reduction).

"""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp

_PIO2_HI = 1.5707963267341256
"""pi/2 rounded to 33 significant bits, so ``k * _PIO2_HI`` is exact for ``|k| < 2^20``."""
_PIO2_LO = 6.077100506506192e-11
"""The rest of pi/2, from its decimal expansion (``math.pi / 2 - _PIO2_HI`` would carry math.pi's own
rounding, 6e-17, into every reduction multiplied by k)."""
_SIN = tuple((-1) ** m / math.factorial(2 * m + 1) for m in range(9))
_COS = tuple((-1) ** m / math.factorial(2 * m) for m in range(10))


def _horner(coefficients: tuple[float, ...], z: Any) -> Any:
    acc = jnp.full_like(z, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        acc = acc * z + c
    return acc


def sincos(x: Any) -> tuple[Any, Any]:
    """``(sin x, cos x)`` element-wise for real float arrays (see the module docstring for accuracy)."""
    k = jnp.round(x * (2.0 / math.pi))
    r = (x - k * _PIO2_HI) - k * _PIO2_LO
    r2 = r * r
    s = r * _horner(_SIN, r2)
    c = _horner(_COS, r2)
    quadrant = k - 4.0 * jnp.floor(0.25 * k)  # 0, 1, 2, 3 without a floating-point modulo call
    odd = (quadrant == 1.0) | (quadrant == 3.0)
    sin = jnp.where(odd, c, s)
    cos = jnp.where(odd, s, c)
    sin = jnp.where(quadrant >= 2.0, -sin, sin)
    cos = jnp.where((quadrant == 1.0) | (quadrant == 2.0), -cos, cos)
    return sin, cos
