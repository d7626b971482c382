import jax
import jax.numpy as jnp
import numpy as np
import pytest

from twinfer.infer.filters import _small


@pytest.mark.parametrize("n", [1, 3, 4, 7])
def test_small_cholesky_and_solves_equal_lapack(n):
    """The written-out factorisation and solves equal LAPACK's to rounding, below and above UNROLL_MAX."""
    key = jax.random.key(n)
    a = jax.random.normal(key, (n, n))
    spd = a @ a.T + n * jnp.eye(n)
    b = jax.random.normal(jax.random.key(n + 100), (n, 2))
    low = _small.cholesky(spd)
    np.testing.assert_allclose(low, jnp.linalg.cholesky(spd), rtol=0, atol=1e-12)
    np.testing.assert_allclose(_small.cho_solve(low, b), jnp.linalg.solve(spd, b), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        _small.solve_lower(low, b[:, 0]),
        jax.scipy.linalg.solve_triangular(low, b[:, 0], lower=True),
        rtol=1e-12,
        atol=1e-12,
    )


def test_small_cholesky_is_nan_on_indefinite_and_vmaps():
    """An indefinite matrix gives NaN (so the filters' divergence check fires); vmap works."""
    bad = jnp.array([[1.0, 2.0], [2.0, 1.0]])
    assert bool(jnp.any(jnp.isnan(_small.cholesky(bad))))
    mats = jnp.stack([jnp.eye(3) * (i + 1.0) for i in range(4)])
    np.testing.assert_allclose(jax.vmap(_small.cholesky)(mats), jnp.linalg.cholesky(mats), atol=1e-14)
