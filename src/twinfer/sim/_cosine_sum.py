"""A long sum of cosines evaluated by blocks: multisines of thousands of lines on fine grids.

A random-phase multisine ``s_k = sum_j cos(2 pi f_j k dt + phi_j)`` over ``n`` samples and ``J`` lines
costs ``n J`` cosines directly: at the Bouc-Wen benchmark's 131 kHz truth grid with 2000 lines, 8e8 of
them. :func:`cosine_sum` splits the sample index by angle addition into two small matrix products.
"""

from __future__ import annotations

import numpy as np


def cosine_sum(freqs: np.ndarray, phases: np.ndarray, n: int, dt: float, block: int = 512) -> np.ndarray:
    """``s_k = sum_j cos(2 pi f_j k dt + phi_j)`` for ``k = 0..n-1``, by two matrix products.

    With ``k = a B + b`` (``B = block``), ``cos(w_j (aB + b) dt + phi_j)`` splits by angle addition into
    ``cos(A_aj) cos(B_bj) - sin(A_aj) sin(B_bj)``, ``A_aj = w_j a B dt + phi_j``, ``B_bj = w_j b dt``: a
    ``(n/B, J) x (J, B)`` product instead of ``n J`` cosines. Equal to the direct sum to rounding (the
    angles are the same up to one addition).

    Args:
        freqs: the lines' frequencies f_j (J,) [Hz].
        phases: their phases phi_j (J,) [rad].
        n: the number of samples.
        dt: the sample spacing [s].
        block: the block length B.

    Returns:
        The signal (n,), float64.

    """
    freqs, phases = np.asarray(freqs, np.float64), np.asarray(phases, np.float64)
    n_a = -(-n // block)
    ang_a = 2 * np.pi * np.outer(np.arange(n_a) * (block * dt), freqs) + phases[None, :]
    ang_b = 2 * np.pi * np.outer(np.arange(block) * dt, freqs)
    out = np.cos(ang_a) @ np.cos(ang_b).T - np.sin(ang_a) @ np.sin(ang_b).T
    return out.ravel()[:n]
