"""The reference scores of the EMPS case: the IDIM estimates and the open-loop least-squares fits.

What a posterior of Eq. 28 on the EMPS benchmark is compared with: the benchmark's own IDIM estimates
simulated open loop (the paper's protocol) and inside the PD loop (the benchmark's validation), the
controller's fit to the data, and two output-error least-squares fits (:func:`twinfer.learn.open_loop_floor`),
one to the test set itself (the floor of the open-loop protocol) and one to the training set (the floor of
anything fitted to it), both scored on the test set.

References:
    Longbottom, Champneys & Rogers (pn-smc paper), Sec. 4.3, Eq. (28); Janot, Gautier & Brunot (2019),
    "Data set and reference models of EMPS", Eq. 6 and Sec. 3.5; Ljung (1999), Sec. 7.3.

"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from twinfer.learn._emps import controller_checks, open_loop_floor
from twinfer.metrics import rmse_per_particle
from twinfer.models import EMPS
from twinfer.sim import open_loop_simulator, simulate_closed_loop


def emps_references(
    model: EMPS,
    idim: Mapping[str, float],
    train: Mapping[str, np.ndarray],
    test: Mapping[str, np.ndarray],
    n: int,
    m: int,
    fs: float,
    substeps: int,
    hold: str,
) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """The references' metrics (``reference.*``, the controller's checks) and the two fits' parameters.

    Args:
        model: the EMPS model.
        idim: the IDIM estimates of the fitted parameters, in order (``M``, ``Fv``, ``Fc``, ``offset``):
            the fits' start; M, Fv and Fc are kept positive (the prior samples them in log space).
        train: the estimation record (``force``, ``q`` and the controller's signals).
        test: the validation record.
        n: training samples fitted.
        m: test samples scored.
        fs: the sampling rate [Hz].
        substeps: RK4 steps per sample.
        hold: how the force is held between samples.

    Returns:
        The metrics ``reference.idim.test.rmse``, ``reference.idim.closedloop.test.rmse``,
        ``reference.openloop_best_fit.*`` (the test set's own fit: its RMSE and parameters),
        ``reference.openloop_train_fit.*`` (the training set's fit: its training and test RMSE and
        parameters) and :func:`twinfer.learn.controller_checks`'; the training fit's and the test fit's
        parameters.

    """
    names = tuple(idim)
    start = np.array([idim[name] for name in names])
    positive = [name != "offset" for name in names]
    q_test = test["q"][:m]

    def open_loop(thetas: np.ndarray) -> np.ndarray:
        return open_loop_simulator(model, names, test, m, fs, substeps, hold)(thetas)

    metrics = {"reference.idim.test.rmse": float(rmse_per_particle(open_loop(start[None]), q_test)[0])}
    ref_cl = simulate_closed_loop(model, names, start[None], test, m, fs, substeps)
    metrics["reference.idim.closedloop.test.rmse"] = float(rmse_per_particle(ref_cl, q_test)[0])
    metrics.update(controller_checks(train, test, fs))
    floor, best = open_loop_floor(model, names, start, positive, test, m, fs, substeps, hold)
    metrics["reference.openloop_best_fit.test.rmse"] = floor
    for name, value in zip(names, best, strict=True):
        metrics[f"reference.openloop_best_fit.{name}"] = float(value)
    # the same output-error fit on the training data: the open-loop floor of anything fitted to it
    train_floor, train_fit = open_loop_floor(model, names, start, positive, train, n, fs, substeps, hold)
    metrics["reference.openloop_train_fit.train.rmse"] = train_floor
    ref_train = open_loop(train_fit[None])
    metrics["reference.openloop_train_fit.test.rmse"] = float(rmse_per_particle(ref_train, q_test)[0])
    for name, value in zip(names, train_fit, strict=True):
        metrics[f"reference.openloop_train_fit.{name}"] = float(value)
    return metrics, train_fit, best
