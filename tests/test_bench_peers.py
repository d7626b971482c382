"""``twinfer bench peers``: the worker protocol each library's process speaks, on twinfer's own side.

dynamax and cuthbert are optional (``make peers``) and never installed for the tests; their workers speak
the same protocol from the same script. Here the twinfer worker, a separate process as in the benchmark,
compiles a tiny case, writes its filtered means and times a task on request; the means are checked
against the covariance-form Kalman filter written out in NumPy (an independent reference).
"""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import numpy as np

from twinfer.bench import peers


def _numpy_kf(F, H, Q, R, m, P, ys):
    means = []
    for y in ys:
        m, P = F @ m, F @ P @ F.T + Q
        S = H @ P @ H.T + R
        K = np.linalg.solve(S, H @ P).T
        m, P = m + K @ (y - H @ m), P - K @ S @ K.T
        means.append(m)
    return np.array(means)


def test_the_twinfer_worker_compiles_writes_its_means_and_times_on_request(tmp_path):
    entries = peers._linear_case("kf", 3, 12, 1, jax.random.key(0))
    case = {"problems": np.asarray(["kf"])}
    case.update({f"kf.{name}": np.asarray(value) for name, value in entries.items()})
    case["kf.first_mean"], case["kf.first_chol"] = peers._first_prediction(case, "kf")
    np.savez(tmp_path / "case.npz", allow_pickle=False, **case)

    proc = subprocess.run(
        [sys.executable, "-m", "twinfer.bench._peer_worker", "twinfer", str(tmp_path / "case.npz"), tmp_path],
        input="kf 3\n\n",
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    ready, timed = (json.loads(line) for line in proc.stdout.splitlines())
    assert ready["ready"] == "twinfer" and set(ready["compile_s"]) == {"kf"}
    assert timed["task"] == "kf" and len(timed["seconds"]) == 3 and min(timed["seconds"]) > 0

    chol_P0, chol_Q, chol_R = entries["chol_P0"], entries["chol_Q"], entries["chol_R"]
    reference = _numpy_kf(
        entries["F"], entries["H"], chol_Q @ chol_Q.T, chol_R @ chol_R.T, entries["m0"], chol_P0 @ chol_P0.T,
        entries["ys"][0],
    )  # fmt: skip
    np.testing.assert_allclose(np.load(tmp_path / "twinfer.kf.npy"), reference, rtol=1e-9, atol=1e-12)
    # dynamax's initial moments are those of x_1: twinfer's first prediction
    F, P0 = entries["F"], chol_P0 @ chol_P0.T
    np.testing.assert_allclose(case["kf.first_mean"], F @ entries["m0"], atol=1e-14)
    first_cov = case["kf.first_chol"] @ case["kf.first_chol"].T
    np.testing.assert_allclose(first_cov, F @ P0 @ F.T + chol_Q @ chol_Q.T, rtol=1e-12, atol=1e-15)
