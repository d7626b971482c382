"""Measured benchmark loaders: checksums verified first, clear errors, expected contents."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from twinfer.data import load_elcentro, load_emps, load_silverbox, verified_path
from twinfer.data._benchmarks import default_data_root


def test_silverbox_contents():
    """SNLS80mV: 131072 samples of V1/V2 at 610.35 Hz, the arrow head first (growing amplitude)."""
    data = load_silverbox()
    assert data["u"].shape == data["y"].shape == (131072,)
    np.testing.assert_allclose(data["t"][1], 1 / 610.3515625)
    assert np.std(data["y"][30000:40000]) > 2 * np.std(data["y"][1000:10000])


def test_emps_contents():
    """DATA_EMPS: 24841 samples at 1 kHz; force = gtau * vir; the pulses set is the same length."""
    train, test = load_emps(), load_emps(pulses=True)
    assert train["q"].shape == (24841,) and test["q"].shape == (24841,)
    np.testing.assert_allclose(np.diff(train["t"][:3]), 1e-3, rtol=1e-3)
    assert 0.0 < np.max(train["q"]) < 0.3


def test_elcentro_contents():
    """The El Centro record of the 6-DOF case: 2502 samples at 0.02 s to 50.02 s, peak 3.417 m/s^2."""
    data = load_elcentro()
    assert data["t"].shape == data["a"].shape == (2502,)
    np.testing.assert_allclose(np.diff(data["t"]), 0.02, atol=1e-9)
    assert np.max(np.abs(data["a"])) == pytest.approx(3.417, abs=1e-3)


def test_missing_and_changed_files_raise(tmp_path):
    with pytest.raises(FileNotFoundError, match="SNLS80mV.mat"):
        load_silverbox(tmp_path)
    (tmp_path / "emps").mkdir()
    src = default_data_root() / "emps" / "DATA_EMPS.mat"
    shutil.copy(src, tmp_path / "emps" / "DATA_EMPS.mat")
    with open(tmp_path / "emps" / "DATA_EMPS.mat", "ab") as handle:
        handle.write(b"x")
    with pytest.raises(ValueError, match="expected sha256 6cf6814a"):
        load_emps(tmp_path)
    with pytest.raises(KeyError, match="Unknown benchmark file"):
        verified_path("silverbox/other.mat")
