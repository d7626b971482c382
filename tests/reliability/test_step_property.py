"""Issue #52, item 1: a step too large for the integrator is never a silent result 1e3 times off.

Property-based: chains whose stiffness, mass and sample step span several decades each, filtered and
simulated with the explicit integrators. Every draw must end in a named error
(:class:`~twinfer.sim.StepSizeError`, :class:`~twinfer.infer.filters.DivergenceError`), a named warning
(:class:`~twinfer.sim.StepSizeWarning`, :class:`~twinfer.infer.filters.FilterConsistencyWarning`), or a
result within 10x of the truth's scale. Before #52 a stiff chain (k 2e8, m 100, dt 1e-2) with RK4 gave
filter means of 4.5e3 for a truth of 3.9e-5, and ``simulate_dataset(truth="euler")`` states of 1e68,
without a word.

The truth is the matrix exponential (exact at any step); the record's noise is 5 % of each output's rms.
"""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twinfer.data import Dataset
from twinfer.infer.filters import DivergenceError, FilterConsistencyWarning, ParameterBoundWarning, run_filter
from twinfer.models import Chain
from twinfer.sim import StepSizeError, StepSizeWarning, simulate_dataset

STEPS = 120
NAMED_WARNINGS = (StepSizeWarning, FilterConsistencyWarning, ParameterBoundWarning)

decades = st.floats(min_value=0.0, max_value=1.0)
steps = st.sampled_from([1e-5, 1e-1])


def _draw(mass_exp: float, stiff_exp: float, dt: float, seed: int) -> tuple[Chain, Dataset, np.ndarray]:
    """A 3-mass chain (mass 10^[-1, 3] kg, stiffness 10^[2, 9] N/m, 1 % damping), its exact record at
    step ``dt``, and each state's scale (its largest absolute value in the truth).

    The step is drawn from two values four decades apart (each new step compiles the filter anew: a step
    is static in a discretised model); with the stiffness and mass, ``dt omega`` spans 3e-6 to 1e4.
    """
    mass, stiffness = 10.0 ** (-1.0 + 4.0 * mass_exp), 10.0 ** (2.0 + 7.0 * stiff_exp)
    damping = 0.02 * np.sqrt(stiffness * mass)
    chain = Chain(mass=[mass] * 3, stiffness=[stiffness] * 3, damping=[damping] * 3, outputs=("a1", "a3"))
    force = stiffness * 1e-3 * np.random.default_rng(seed).normal(size=(STEPS + 1, chain.n_input))
    clean = simulate_dataset(chain, force, dt, 0.0, jax.random.key(seed))
    sd = 0.05 * np.sqrt(np.mean(clean.observations**2, axis=0)) + 1e-300
    noisy = clean.observations + sd * np.random.default_rng(seed + 1).normal(size=clean.observations.shape)
    data = Dataset(**{**clean.to_dict(), "observations": noisy, "metadata": clean.metadata})
    return chain, data, np.max(np.abs(clean.truth_states), axis=0) + 1e-300


def _outcome(run) -> tuple[str, object]:
    """("error", exc), ("warning", categories) or ("result", value) of ``run()``; anything else fails."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = run()
        except (StepSizeError, DivergenceError) as error:
            return "error", error
    named = [w.category.__name__ for w in caught if issubclass(w.category, NAMED_WARNINGS)]
    return ("warning", named) if named else ("result", value)


@settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow])
@given(
    mass_exp=decades,
    stiff_exp=decades,
    dt=steps,
    method=st.sampled_from([("kf", "rk4"), ("kf", "euler"), ("ukf", "rk4")]),
)
@pytest.mark.timeout(600)
def test_property_a_filter_on_any_chain_and_step_errs_warns_or_is_within_10x(mass_exp, stiff_exp, dt, method):
    estimator, integrator = method
    chain, data, scale = _draw(mass_exp, stiff_exp, dt, seed=3)
    sd = 0.05 * np.sqrt(np.mean(data.observations**2, axis=0)) + 1e-300
    kind, value = _outcome(
        lambda: run_filter(
            chain,
            data,
            estimator=estimator,
            integrator=integrator,
            noise_sd=sd,
            state_sd=scale,  # the size of the motion expected, state by state
            process_sd=1e-6 * scale,
        )
    )
    if kind == "result":  # every state within 10x of its own scale
        error = np.max(np.abs(np.asarray(value.means) - data.truth_states), axis=0)
        assert np.all(error <= 10.0 * scale), (chain.params, data.dt, estimator, integrator, error, scale)


@settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow])
@given(
    mass_exp=decades,
    stiff_exp=decades,
    dt=steps,
    truth=st.sampled_from(["euler", "heun", "rk4", "semi-implicit-euler"]),
)
@pytest.mark.timeout(600)
def test_property_a_fixed_step_simulation_errs_warns_or_is_within_10x_of_the_exact_one(
    mass_exp, stiff_exp, dt, truth
):
    chain, exact, scale = _draw(mass_exp, stiff_exp, dt, seed=5)
    kind, value = _outcome(
        lambda: simulate_dataset(chain, exact.inputs, exact.dt, 0.0, jax.random.key(0), truth=truth)
    )
    if kind == "result":
        error = np.max(np.abs(value.truth_states - exact.truth_states), axis=0)
        assert np.all(error <= 10.0 * scale), (chain.params, exact.dt, truth, error, scale)


def test_the_issues_stiff_chain_is_refused_by_every_filter_and_the_euler_simulation():
    """Issue #52's reproduction: k 2e8, m 100, dt 1e-2 with RK4: each estimator is refused before it runs
    with the fastest mode, the growth and the substeps that fix it; the Euler simulation likewise."""
    chain = Chain(mass=[100.0] * 4, stiffness=[2e8] * 4, damping=[1e3] * 4, outputs=("a1", "a3", "a4"))
    force = 1e3 * np.random.default_rng(0).normal(size=(101, chain.n_input))
    data = simulate_dataset(chain, force, 1e-2, 1e-3, jax.random.key(0))
    for estimator, unknown in (("ekf", None), ("kf", None), ("ukf", {"k4": (2e8, 2e7, 0.0)})):
        with pytest.raises(StepSizeError, match=r"dt/substeps \|lambda\| = 26\.[56]") as info:
            run_filter(chain, data, estimator=estimator, unknown=unknown, noise_sd=1e-3, state_sd=1e-3)
        assert "use substeps=10 or more" in str(info.value), str(info.value)
    with pytest.raises(StepSizeError, match="simulate_dataset integrator: the step dt = 0.01") as info:
        simulate_dataset(chain, force, 1e-2, 1e-3, jax.random.key(0), truth="euler")
    # the suggestion holds: RK4 with 10 substeps runs (its model error then shows in the NIS check)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FilterConsistencyWarning)
        est = run_filter(chain, data, estimator="kf", substeps=10, noise_sd=1e-3, state_sd=1e-3)
    assert np.max(np.abs(np.asarray(est.means) - data.truth_states)) < np.max(np.abs(data.truth_states))
