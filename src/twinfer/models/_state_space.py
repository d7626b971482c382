"""A discrete-time system written as plain functions or matrices, as other filtering libraries take it.

    x_{k+1} = f(x_k, u_k) + w_k,    w_k ~ N(0, Q)
    y_k     = h(x_k, u_k) + v_k,    v_k ~ N(0, R)

or, linear, ``f(x, u) = F x + B u`` and ``h(x, u) = H x + D u`` (:meth:`StateSpace.linear`). The step is
one sample of the record: nothing is integrated, so a transition written for another library
(dynamax's ``dynamics_function``, filterpy's ``fx``) is used exactly as it is. ``twinfer.estimate`` and
``twinfer.compile`` filter it with :class:`~twinfer.Central` (KF, EKF, UKF) and take full covariances
(``state_cov``, ``process_cov``, ``noise_cov``) or standard deviations.

Time convention (twinfer's, :class:`~twinfer.data.Dataset`): row 0 of a record holds the prior's time;
the filter moves from row k to row k+1 by ``f(x_k, u_k)`` and reads row k+1's outputs by
``h(x_{k+1}, u_{k+1})`` (with ``alignment="sampled"``, the record's default).

References:
    Särkkä & Svensson, Bayesian Filtering and Smoothing (2nd ed.), Eq. 4.1-4.2 (the linear Gaussian
    model) and Eq. 7.1 (the non-linear model with additive noise).

"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer._config import ensure
from twinfer.errors import TwinferValueError


def _names(field: str, value: int | Sequence[str], base: str) -> tuple[str, ...]:
    """``value`` as names: a count ``n`` gives ``base1..basen``; a sequence of distinct non-empty strings."""
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        if value < 0:
            raise TwinferValueError(f"StateSpace {field}: expected a count >= 0 or names; received {value}.")
        return tuple(f"{base}{i + 1}" for i in range(int(value)))
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TwinferValueError(
            f"StateSpace {field}: expected a count or a sequence of names, e.g. ['x', 'v']; received "
            f"{value!r}."
        )
    names = tuple(value)
    if not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise TwinferValueError(
            f"StateSpace {field}: expected distinct non-empty strings; received {list(value)!r}."
        )
    return names


def _matrix(field: str, value: Any, shape: tuple[int, int]) -> Any:
    arr = np.asarray(value)
    if arr.dtype.kind not in "fiu" or arr.dtype in (np.float16, np.float32):
        raise TwinferValueError(
            f"StateSpace.linear {field}: expected a float64 matrix of shape {shape}; received dtype "
            f"{arr.dtype}."
        )
    if arr.shape != shape:
        raise TwinferValueError(f"StateSpace.linear {field}: expected shape {shape}; received {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise TwinferValueError(f"StateSpace.linear {field}: expected finite entries.")
    return jnp.asarray(arr, dtype=jnp.float64)


class StateSpace(eqx.Module):
    """A discrete-time system ``x_{k+1} = f(x_k, u_k)``, ``y_k = h(x_k, u_k)`` with named columns.

    Args:
        f: the transition ``f(x, u) -> x_next`` over one record step (JAX-traceable; ``u`` has length 0
            for a system without inputs).
        h: the measurement ``h(x, u) -> y``.
        states: the state names, or their count (names ``x1``, ``x2``, ...).
        outputs: the output names (a record's output columns), or their count (``y1``, ...).
        inputs: the input names (a record's input columns), or their count (``u1``, ...); none by default.

    Raises:
        ValueError: names that are not distinct strings, or ``f``/``h`` returning another shape than
            the names say (found by tracing them once, nothing computed), named.

    """

    f: Callable[[Any, Any], Any] | None = eqx.field(static=True)
    h: Callable[[Any, Any], Any] | None = eqx.field(static=True)
    state_names: tuple[str, ...] = eqx.field(static=True)
    output_names: tuple[str, ...] = eqx.field(static=True)
    input_names: tuple[str, ...] = eqx.field(static=True)
    matrices: tuple[Any, Any, Any, Any] | None = None

    def __init__(
        self,
        f: Callable[[Any, Any], Any] | None,
        h: Callable[[Any, Any], Any] | None,
        *,
        states: int | Sequence[str],
        outputs: int | Sequence[str],
        inputs: int | Sequence[str] = (),
        matrices: tuple[Any, Any, Any, Any] | None = None,
    ) -> None:
        ensure("StateSpace")
        self.state_names = _names("states", states, "x")
        self.output_names = _names("outputs", outputs, "y")
        self.input_names = _names("inputs", inputs, "u")
        self.matrices = matrices
        if matrices is None:
            for field, fn in (("f", f), ("h", h)):
                if not callable(fn):
                    raise TwinferValueError(
                        f"StateSpace {field}: expected a function {field}(x, u); received {fn!r} (a linear "
                        "system: StateSpace.linear(F, H, B, D))."
                    )
        self.f, self.h = f, h
        x = jax.ShapeDtypeStruct((len(self.state_names),), jnp.float64)
        u = jax.ShapeDtypeStruct((len(self.input_names),), jnp.float64)
        for field, fn, names in (
            ("f", self.transition, self.state_names),
            ("h", self.output, self.output_names),
        ):
            try:
                shape = jax.eval_shape(fn, x, u).shape
            except Exception as error:  # the user's function, traced once: its own error, named
                raise TwinferValueError(
                    f"StateSpace {field}: calling {field}(x, u) with x of shape {x.shape} and u of shape "
                    f"{u.shape} failed: {type(error).__name__}: {error}"
                ) from error
            if shape != (len(names),):
                raise TwinferValueError(
                    f"StateSpace {field}: expected {field}(x, u) of shape ({len(names)},), one per "
                    f"{', '.join(names)}; received shape {shape}."
                )

    @classmethod
    def linear(
        cls,
        F: Any,
        H: Any,
        B: Any = None,
        D: Any = None,
        *,
        states: int | Sequence[str] | None = None,
        outputs: int | Sequence[str] | None = None,
        inputs: int | Sequence[str] | None = None,
    ) -> StateSpace:
        """The linear system ``x_{k+1} = F x_k + B u_k``, ``y_k = H x_k + D u_k`` (Kalman's, Eq. 4.1-4.2).

        Args:
            F: (n, n) transition matrix.
            H: (m, n) measurement matrix.
            B: (n, p) input matrix (None: no inputs, or zeros when ``D`` has inputs).
            D: (m, p) feed-through matrix (None: zeros).
            states: names or count (default: ``F``'s size, ``x1``, ...).
            outputs: names or count (default: ``H``'s rows, ``y1``, ...).
            inputs: names or count (default: ``B``'s or ``D``'s columns, ``u1``, ...).

        """
        ensure("StateSpace")
        F_arr, H_arr = np.asarray(F), np.asarray(H)
        n = F_arr.shape[0] if F_arr.ndim == 2 else -1
        m = H_arr.shape[0] if H_arr.ndim == 2 else -1
        p = next((np.shape(a)[1] for a in (B, D) if a is not None and np.ndim(a) == 2), 0)
        F_m = _matrix("F", F, (n, n))
        H_m = _matrix("H", H, (m, n))
        B_m = jnp.zeros((n, p)) if B is None else _matrix("B", B, (n, p))
        D_m = jnp.zeros((m, p)) if D is None else _matrix("D", D, (m, p))
        return cls(
            None,
            None,
            states=n if states is None else states,
            outputs=m if outputs is None else outputs,
            inputs=p if inputs is None else inputs,
            matrices=(F_m, B_m, H_m, D_m),
        )

    @property
    def is_linear(self) -> bool:
        """Whether the system was given as matrices (:meth:`linear`): the Kalman filter's case."""
        return self.matrices is not None

    def transition(self, x: Any, u: Any) -> Any:
        """``x_{k+1}`` from ``x_k`` and the input ``u_k`` held over the step."""
        if self.matrices is None:
            return jnp.asarray(self.f(x, u))  # type: ignore[misc]
        F, B, _, _ = self.matrices
        return F @ x + B @ u

    def output(self, x: Any, u: Any) -> Any:
        """``y_k`` from ``x_k`` and the input ``u_k`` sampled with it."""
        if self.matrices is None:
            return jnp.asarray(self.h(x, u))  # type: ignore[misc]
        _, _, H, D = self.matrices
        return H @ x + D @ u
