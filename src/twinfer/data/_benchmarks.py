"""Loaders for the measured benchmark data (Silverbox, EMPS, El Centro), checked against their sha256 first.

The files live in ``../shared/data/`` relative to the project root (never downloaded); a different
folder can be given. A missing or changed file raises an error that names the file, the expected and
the received checksum.

References:
    Wigren & Schoukens (2013), Uppsala tech. report 2013-006 (Silverbox);
    Janot, Gautier & Brunot (2019), EMPS benchmark description.

"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

SHA256: dict[str, str] = {
    "silverbox/SNLS80mV.mat": "5c7413a52255af0cb4e2f93fb6903beb92b08965ba1e6ad0a6ffedfed8477ed4",
    "emps/DATA_EMPS.mat": "6cf6814ae14618795da0101aae2bb97ff0c6351b0501b5492751b02b07facf7e",
    "emps/DATA_EMPS_PULSES.mat": "0eab75bb1f6b16228ee78791343a88bf9bfd9a51036ac9807d7b5fc11c0e1704",
    "elcentro/elcentro.mat": "55bd1787da7b60387800f6289670f0b19b90a1a408f5ac7f285e63d9d396dd0d",
}
SILVERBOX_FS = 1e7 / 2**14
"""Silverbox sampling rate, 610.3515625 Hz."""


def default_data_root() -> Path:
    """``$TWINFER_DATA_ROOT`` if set, else the nearest ``shared/data`` folder above this package."""
    env = os.environ.get("TWINFER_DATA_ROOT")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "shared" / "data").is_dir():
            return parent / "shared" / "data"
    return Path.cwd().parent / "shared" / "data"


def verified_path(relative: str, root: str | Path | None = None) -> Path:
    """Path of a benchmark file after checking that it exists and its sha256 matches.

    Raises:
        KeyError: unknown file name.
        FileNotFoundError: the file is missing (names the expected location).
        ValueError: the checksum differs (names expected and received digests).

    """
    if relative not in SHA256:
        raise KeyError(f"Unknown benchmark file {relative!r}; expected one of {sorted(SHA256)}.")
    path = Path(root if root is not None else default_data_root()) / relative
    if not path.is_file():
        raise FileNotFoundError(
            f"Benchmark file {relative}: expected it at {path}; it is missing. The measured data are read "
            "from ../shared/data (see its README), $TWINFER_DATA_ROOT, or the folder given as data_root."
        )
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SHA256[relative]:
        raise ValueError(
            f"Benchmark file {path}: expected sha256 {SHA256[relative]}; received {digest}. The file is "
            "not the published benchmark file (changed or truncated)."
        )
    return path


def _loadmat(path: Path) -> dict[str, Any]:
    from scipy.io import loadmat

    return loadmat(str(path))


def load_silverbox(root: str | Path | None = None) -> dict[str, np.ndarray]:
    """Silverbox ``SNLS80mV``: ``u`` = V1 (input voltage), ``y`` = V2 (output voltage), fs = 610.35 Hz.

    Returns:
        ``{"t", "u", "y"}``, each of length 131072 (index 0 is MATLAB sample 1).

    """
    mat = _loadmat(verified_path("silverbox/SNLS80mV.mat", root))
    u = np.asarray(mat["V1"], np.float64).ravel()
    y = np.asarray(mat["V2"], np.float64).ravel()
    return {"t": np.arange(u.size) / SILVERBOX_FS, "u": u, "y": y}


def load_emps(root: str | Path | None = None, *, pulses: bool = False) -> dict[str, np.ndarray]:
    """EMPS estimation (``DATA_EMPS``) or validation (``DATA_EMPS_PULSES``) set at 1 kHz.

    Returns:
        ``{"t", "force", "q", "qg", "vir", "kp", "kv", "gtau"}`` with ``force = gtau * vir`` [N], motor
        position ``q = qm`` [m], the controller gains ``kp`` [1/s], ``kv`` [V/(m/s)] and the drive gain
        ``gtau`` [N/V] as 0-d arrays; the validation set adds ``pulses_N`` (the applied pulses).

    """
    name = "emps/DATA_EMPS_PULSES.mat" if pulses else "emps/DATA_EMPS.mat"
    mat = _loadmat(verified_path(name, root))
    gtau = float(np.asarray(mat["gtau"]).ravel()[0])
    out = {
        "t": np.asarray(mat["t"], np.float64).ravel(),
        "force": gtau * np.asarray(mat["vir"], np.float64).ravel(),
        "q": np.asarray(mat["qm"], np.float64).ravel(),
        "qg": np.asarray(mat["qg"], np.float64).ravel(),
        "vir": np.asarray(mat["vir"], np.float64).ravel(),
        "gtau": np.asarray(gtau, np.float64),
    }
    for key in ("kp", "kv"):
        out[key] = np.asarray(np.asarray(mat[key], np.float64).ravel()[0])
    if "pulses_N" in mat:
        out["pulses_N"] = np.asarray(mat["pulses_N"], np.float64).ravel()
    return out


def load_elcentro(root: str | Path | None = None) -> dict[str, np.ndarray]:
    """The 1940 El Centro ground acceleration used by the compositional-inference paper's 6-DOF case.

    Returns:
        ``{"t", "a"}``: time 0..50.02 s at 0.02 s and the acceleration [m/s^2] (peak 3.417), the rows
        of the file's ``e`` (specs/compositional-inference.md 3.4; ../shared/data/README.md).

    """
    e = np.asarray(_loadmat(verified_path("elcentro/elcentro.mat", root))["e"], np.float64)
    if e.ndim != 2 or e.shape[0] != 2:
        raise ValueError(f"El Centro record: expected 'e' of shape (2, T); received {e.shape}.")
    return {"t": e[0].copy(), "a": e[1].copy()}
