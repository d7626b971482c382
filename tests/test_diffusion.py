"""Graph diffusion of a local defect (S17-S19) against closed forms and the paper's published numbers."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import expm

from twinfer.infer.graph._diffusion import diffuse, subsystem_laplacian

NAMES = ["V1", "V3", "V2"]
WEIGHTS = {("V1", "V3"): 0.4718, ("V3", "V2"): 0.5282}  # the paper's affinities eta13, eta23 (SI 3.4)


def test_heat_kernel_is_the_papers_source_column_and_conserves_the_defect():
    """H(0.9)[:, V3] on the path V1 - V3 - V2 with the paper's affinities is [0.2361, 0.5064, 0.2575]
    (SI section 3.4, [REPO run]); the shares of any defect sum to its magnitude."""
    q = np.array([2.0, -3.0, 0.5])
    s = diffuse(NAMES, WEIGHTS, "V3", q, "heat", beta=0.9)
    np.testing.assert_allclose([s[n][0] / 2.0 for n in NAMES], [0.2361, 0.5064, 0.2575], atol=5e-5)
    np.testing.assert_allclose(sum(s.values()), np.abs(q), rtol=1e-12)
    w = np.array([[0, 0.4718, 0], [0.4718, 0, 0.5282], [0, 0.5282, 0]])
    np.testing.assert_allclose([s[n][1] for n in NAMES], expm(-0.9 * (np.diag(w.sum(1)) - w))[:, 1] * 3.0)


def test_one_hop_shares_are_the_closed_form():
    """s_source = q / (1 + alpha), s_j = eta_j alpha q / (1 + alpha) for the neighbours (S17-S18)."""
    s = diffuse(NAMES, WEIGHTS, "V3", 10.0, alpha=0.6)
    assert s["V3"] == pytest.approx(10.0 / 1.6)
    assert s["V1"] == pytest.approx(0.4718 * 0.6 * 10.0 / 1.6)
    assert s["V2"] == pytest.approx(0.5282 * 0.6 * 10.0 / 1.6)
    edge = diffuse(NAMES, WEIGHTS, "V1", 10.0, alpha=0.6)  # one neighbour, the far node untouched
    assert edge["V3"] == pytest.approx(6.0 / 1.6) and edge["V2"] == 0.0
    assert sum(edge.values()) == pytest.approx(10.0)


def test_laplacian_and_errors():
    """Weights are normalised by their sum (L = D - W, zero row sums); bad input is a named error."""
    w, lap = subsystem_laplacian(NAMES, {("V1", "V3"): 2.0, ("V3", "V2"): 6.0})
    np.testing.assert_allclose(w[0, 1], 0.25)
    np.testing.assert_allclose(lap.sum(axis=1), 0.0, atol=1e-15)
    with pytest.raises(ValueError, match=r"unknown subsystems \['V9'\]"):
        subsystem_laplacian(NAMES, {("V1", "V9"): 1.0})
    with pytest.raises(ValueError, match="given twice"):
        subsystem_laplacian(NAMES, {("V1", "V3"): 1.0, ("V3", "V1"): 1.0})
    with pytest.raises(ValueError, match="expected a finite value >= 0; received -1.0"):
        subsystem_laplacian(NAMES, {("V1", "V3"): -1.0})
    with pytest.raises(ValueError, match="source: expected one of"):
        diffuse(NAMES, WEIGHTS, "V7", 1.0)
    with pytest.raises(ValueError, match="defect: expected finite values"):
        diffuse(NAMES, WEIGHTS, "V3", [1.0, np.nan])
    with pytest.raises(ValueError, match="beta: expected a finite value > 0"):
        diffuse(NAMES, WEIGHTS, "V3", 1.0, "heat", beta=0.0)
