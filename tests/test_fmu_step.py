"""A whole integrator step of an FMU in one callback (issue #56: fewer callbacks per filter step).

:meth:`twinfer.models.FMU.host_step` takes every stage and substep of Euler, Heun or RK4 on the host and,
under differentiation, the step's forward sensitivities in the same callback. References: the same
integrator of :mod:`twinfer.sim` called stage by stage through the FMU's ``vector_field`` (one callback
per stage), the JAX-written Van der Pol, and central finite differences of the step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from twinfer.data._benchmarks import default_data_root
from twinfer.infer.filters._augment import augment
from twinfer.models import FMU, VanDerPol
from twinfer.sim import discretise, integrator_step, substep_loop

FMUS = default_data_root().parent / "fmus"
VDP = FMUS / "VanDerPol.fmu"
pytestmark = pytest.mark.skipif(not VDP.is_file(), reason=f"Reference FMUs not found under {FMUS}")

XS = jnp.array([[2.0, 0.5], [1.0, 1.0], [0.3, -0.2], [-1.0, 0.0], [1.5, -2.0]])
MUS = jnp.array([1.0, 1.5, 1.0, 2.0, 0.7])  # four distinct values, one shared by two points


def _stagewise(model, method: str, dt: float, substeps: int):
    """The same step of :mod:`twinfer.sim`, each stage one call of the model's ``vector_field``."""
    step, h = integrator_step(method), dt / substeps

    def transition(t, x, mu):
        f = lambda tt, xx: model.vector_field(tt, xx, jnp.zeros(0), {"mu": mu})
        return substep_loop(lambda j, xx: step(f, t + j * h, xx, h), x, substeps)

    return transition


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("method", "substeps"), [("euler", 1), ("heun", 3), ("rk4", 1), ("rk4", 6)])
def test_a_batch_step_is_one_callback_and_equals_the_stagewise_step(method, substeps):
    """A vmapped step of a batch with four distinct parameter values is one callback, equal to the
    stage-by-stage step through ``vector_field`` to 1e-13 and to the JAX-written model to 1e-12; with
    fewer instances than parameter values (points then share an instance) the result is the same."""
    model = FMU(VDP)
    stepped = discretise(model, 0.1, method, substeps)
    run = jax.jit(jax.vmap(lambda x, mu: stepped.transition(0.2, x, jnp.zeros(0), {"mu": mu})))
    before = model.calls
    got = np.asarray(run(XS, MUS))
    assert model.calls - before == 1
    stagewise = jax.vmap(lambda x, mu: _stagewise(model, method, 0.1, substeps)(0.2, x, mu))(XS, MUS)
    np.testing.assert_allclose(got, np.asarray(stagewise), rtol=0, atol=1e-13)
    jax_model = discretise(VanDerPol(), 0.1, method, substeps)
    want = jax.vmap(lambda x, mu: jax_model.transition(0.2, x, None, {"mu": mu}))(XS, MUS)
    np.testing.assert_allclose(got, np.asarray(want), rtol=0, atol=1e-12)
    shared = FMU(VDP)
    shared.runtime._max_instances = 2  # four parameter vectors on two instances: set in turn
    again = jax.vmap(
        lambda x, mu: discretise(shared, 0.1, method, substeps).transition(0.2, x, jnp.zeros(0), {"mu": mu})
    )
    np.testing.assert_allclose(np.asarray(again(XS, MUS)), got, rtol=0, atol=1e-13)
    assert len(model.runtime._components) == 4 and len(shared.runtime._components) == 2


@pytest.mark.timeout(120)
@pytest.mark.parametrize("derivatives", ["directional", "finite_differences"])
def test_the_step_jacobian_is_one_callback_and_equals_finite_differences(derivatives):
    """``jacfwd`` of the step of the mu-augmented model (the EKF's linearisation, with the value from the
    same pass) is one callback; with respect to time, state and mu it equals central differences of the
    step to 1e-6, and the JAX-written model's exact Jacobian to 1e-6."""
    model = FMU(VDP, derivatives=derivatives)
    aug = discretise(augment(model, ["mu"]), 0.1, "rk4", 2)
    z, t = jnp.array([1.3, -0.7, 1.2]), 0.4

    def f(tt, zz):
        return aug.transition(tt, zz, jnp.zeros(0), model.params)

    lin = jax.jit(jax.jacfwd(lambda tt, zz: (y := f(tt, zz), y), argnums=(0, 1), has_aux=True))
    before = model.calls
    (jac_t, jac_z), value = lin(t, z)
    assert model.calls - before == 1
    np.testing.assert_allclose(np.asarray(value), np.asarray(f(t, z)), rtol=0, atol=1e-15)
    h = 1e-6
    fd_z = np.stack(
        [(np.asarray(f(t, z + h * e)) - np.asarray(f(t, z - h * e))) / (2 * h) for e in jnp.eye(3)], 1
    )
    fd_t = (np.asarray(f(t + h, z)) - np.asarray(f(t - h, z))) / (2 * h)
    np.testing.assert_allclose(np.asarray(jac_z), fd_z, rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(jac_t), fd_t, rtol=0, atol=1e-6)
    exact = discretise(augment(VanDerPol(), ["mu"]), 0.1, "rk4", 2)
    want = jax.jacfwd(lambda zz: exact.transition(t, zz, None, VanDerPol().params))(z)
    np.testing.assert_allclose(np.asarray(jac_z), np.asarray(want), rtol=0, atol=1e-6)


@pytest.mark.timeout(60)
def test_outputs_that_are_states_are_read_without_a_callback_and_instances_are_freed():
    """Van der Pol's outputs are its states (the same value references): reading them makes no callback.
    Every instance a step created is freed with the model."""
    model = FMU(VDP)
    before = model.calls
    y = jax.jit(jax.vmap(lambda x: model.output(0.0, x, jnp.zeros(0), model.params)))(XS)
    assert model.calls == before
    np.testing.assert_array_equal(np.asarray(y), np.asarray(XS))
    jax.vmap(lambda x, mu: discretise(model, 0.1).transition(0.0, x, jnp.zeros(0), {"mu": mu}))(XS, MUS)
    runtime = model.runtime
    assert len(runtime._components) == 4 and runtime._active == 0
    model.close()
    assert not runtime.alive


@pytest.mark.timeout(60)
def test_nested_vmaps_over_any_axis_are_one_call():
    """A ``vmap`` of a ``vmap`` (records of sigma points), batched along a non-leading axis, is one host
    call whose points equal the JAX-written model's."""
    model = FMU(VDP)
    xs = jnp.stack([XS, XS[::-1] * 0.5, XS + 0.1])  # (3, 5, 2)
    mus = jnp.stack([MUS, MUS[::-1], MUS + 0.2])  # (3, 5)

    def points(m):
        return jax.vmap(lambda x, mu: m.vector_field(0.0, x, jnp.zeros(0), {"mu": mu}))

    before = model.calls
    transposed = (jnp.swapaxes(xs, 0, 1), jnp.swapaxes(mus, 0, 1))  # records along axis 1
    got = jax.jit(jax.vmap(points(model), in_axes=(1, 1)))(*transposed)
    assert model.calls - before == 1
    want = jax.vmap(points(VanDerPol()))(xs, mus)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=1e-14)
