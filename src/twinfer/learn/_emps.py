"""Least-squares references of the EMPS benchmark: the open-loop floor of a model, the controller's fit.

References:
    Longbottom, Champneys & Rogers (pn-smc paper), Sec. 4.3, Eq. (28); Janot, Gautier & Brunot (2019),
    "Data set and reference models of EMPS", Eq. 6; Ljung (1999), Sec. 7.3 (output-error criterion).

"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from twinfer.learn._least_squares import gain_fit, output_error_fit
from twinfer.models import EMPS
from twinfer.models.emps import pd_voltage
from twinfer.sim import open_loop_simulator


def open_loop_floor(
    model: EMPS,
    names: tuple[str, ...],
    start: np.ndarray,
    positive: Sequence[bool],
    data: Mapping[str, np.ndarray],
    m: int,
    fs: float,
    substeps: int,
    hold: str,
) -> tuple[float, np.ndarray]:
    """The lowest open-loop RMSE found for Eq. 28 on ``data``: parameters least-squares fitted to it.

    Gauss-Newton (trust region, :func:`twinfer.learn.output_error_fit`) from ``start`` on the residual of
    :func:`twinfer.sim.open_loop_simulator` over the first ``m`` samples, the parameters marked in
    ``positive`` kept positive. Fitted to the very set it is scored on, it is a floor for the open-loop
    protocol that no posterior of another record can beat (up to local minima of the fit).

    Args:
        model: the EMPS model.
        names: the fitted parameters, in order.
        start: (len(names),) the starting values, non-zero.
        positive: per parameter, whether it is kept positive.
        data: the record (``force``, ``q``).
        m: samples fitted.
        fs: the sampling rate [Hz].
        substeps: RK4 steps per sample.
        hold: how the force is held between samples.

    Returns:
        The RMSE [m] and the fitted parameters.

    """
    simulate = open_loop_simulator(model, names, data, m, fs, substeps, hold)
    return output_error_fit(simulate, np.asarray(data["q"][:m]), start, positive)


def controller_checks(
    train: Mapping[str, np.ndarray], test: Mapping[str, np.ndarray], fs: float
) -> dict[str, float]:
    """How well the controller law explains the measured voltage (evidence for the closed-loop protocol).

    ``vir - nu(q measured)`` (:func:`twinfer.models.emps.pd_voltage`) on the estimation set (rms, against
    the rms of ``vir``), and on the validation set its least-squares gain on ``pulses_N``
    (:func:`twinfer.learn.gain_fit`) and the rms left after removing it.

    Args:
        train: the estimation record (``q``, ``qg``, ``vir``, ``kp``, ``kv``).
        test: the validation record (the same and ``pulses_N``).
        fs: the sampling rate [Hz].

    Returns:
        ``reference.controller.<train|test>.resid_rms`` / ``.vir_rms`` and, where pulses were added,
        ``.pulse_gain``.

    """
    out: dict[str, float] = {}
    for prefix, data in (("train", train), ("test", test)):
        q = data["q"]
        nu = pd_voltage(data["qg"][2:], q[2:], q[:-2], float(data["kp"]), float(data["kv"]), 1.0 / fs)
        resid = data["vir"][2:] - np.asarray(nu)
        if "pulses_N" in data:
            p = data["pulses_N"][2:]
            gain = gain_fit(p, resid)
            out[f"reference.controller.{prefix}.pulse_gain"] = gain
            resid = resid - gain * p
        out[f"reference.controller.{prefix}.resid_rms"] = float(np.sqrt(np.mean(resid**2)))
        out[f"reference.controller.{prefix}.vir_rms"] = float(np.sqrt(np.mean(data["vir"] ** 2)))
    return out
