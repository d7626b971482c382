"""A tiny checkpointed case (IBIS on a Gaussian mean, seconds to run) registered for the CLI tests."""

from __future__ import annotations

from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pydantic
import pytest
from typer.testing import CliRunner

from twinfer.experiments import _case
from twinfer.experiments._checkpointing import CheckpointSettings, case_checkpoint
from twinfer.infer.smc import TransformedNormalPrior, ibis
from twinfer.report import RunArtifacts


class GaussMean(eqx.Module):
    """``y_k ~ N(mu, 1)``: the incremental log-likelihood of IBIS needs no filter state."""

    ys: jax.Array

    @property
    def n_steps(self) -> int:
        return int(self.ys.shape[0])

    def init(self, theta):
        return jnp.zeros(())

    def step(self, carry, theta, k):
        return carry, -0.5 * (self.ys[k] - theta[0]) ** 2 - 0.5 * jnp.log(2 * jnp.pi)


PRIOR = TransformedNormalPrior.from_spec({"mu": ("normal", 0.0, 2.0)})


def gauss_data(n_obs: int, offset: float = 0.0) -> GaussMean:
    return GaussMean(jnp.asarray(1.5 + offset + np.random.default_rng(7).normal(size=n_obs)))


class TinyConfig(CheckpointSettings):
    n_obs: int = pydantic.Field(40, ge=2)
    n_particles: int = pydantic.Field(64, ge=2)


@dataclass
class Control:
    """What the tiny case does besides sampling: stop early, then raise; make figures fail."""

    stop_at: int | None = None
    fail_compute: BaseException | None = None
    fail_figures: BaseException | None = None
    calls: int = 0


@pytest.fixture
def tiny_case(monkeypatch):
    """Register the case ``tiny-smc`` for one test; returns its :class:`Control`."""
    control = Control()

    def run(config: TinyConfig, progress) -> RunArtifacts:
        control.calls += 1
        ckpt = case_checkpoint("tiny-smc", config, "smc")
        lik = gauss_data(config.n_obs)
        res = ibis(jax.random.key(config.seed), lik, PRIOR, config.n_particles, checkpoint=ckpt,
                   checkpoint_every=5, stop_at=control.stop_at, progress=progress)  # fmt: skip
        if control.fail_compute is not None:
            raise control.fail_compute
        w = np.exp(res.log_w - res.log_w.max())
        mean = float(np.sum(w * res.theta[:, 0]) / w.sum())
        arrays = {"theta": res.theta, "log_w": res.log_w}
        return RunArtifacts(metrics={"posterior.mu.mean": mean}, arrays=arrays)

    def figures(arrays, config):
        import matplotlib.pyplot as plt

        if control.fail_figures is not None:
            raise control.fail_figures
        fig, ax = plt.subplots()
        ax.hist(np.asarray(arrays["theta"])[:, 0])
        return {"posterior": fig}

    case = _case.Case("tiny-smc", "IBIS on a Gaussian mean (test case)", TinyConfig, run, figures)
    monkeypatch.setitem(_case.REGISTRY, "tiny-smc", case)
    return control


@pytest.fixture
def cli():
    """``cli(*args)``: invoke ``twinfer`` in-process; the result has ``exit_code`` and ``output``."""
    from twinfer.cli import app

    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def gauss():
    """``(data, prior)``: ``data(n_obs, offset=0.0)`` builds the Gaussian-mean likelihood of the tiny case."""
    return gauss_data, PRIOR
