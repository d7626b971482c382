"""One verb and one noun: ``twinfer.estimate`` gives an Estimate, ``twinfer.compile`` a Program.

``estimate(system, data, method) -> Estimate``; ``compile(system, method) -> Program``.

``system`` is a twinfer model (continuous time) or a :class:`~twinfer.infer.graph.Graph` of subsystems;
``method`` a small frozen, validated strategy object:

- :class:`Central` (the default for a model): one square-root KF / EKF / UKF over the whole state, or
  its RTS smoother;
- :class:`Banded` (the default for a graph: the calibrated distributed route): a filter whose posterior
  keeps each subsystem's correlation with its ``bandwidth`` neighbours and every unknown's with all;
- :class:`Distributed`: the compositional paper's message passing between local filters (a Jacobi,
  Gauss-Seidel or Adams-Bashforth schedule), cheap and local, with bands that under-cover where the
  subsystems' errors are correlated (:func:`~twinfer.infer.graph.check_messages` measures it).

A model with :class:`Banded` or :class:`Distributed` is first split into subsystems
(:meth:`~twinfer.infer.graph.Graph.from_model`, with the method's ``partition``). The problem's numbers
(``x0``, ``state_sd``, ``process_sd``, ``noise_sd``, ``input_sd``, ``unknown``) are keywords of
:func:`estimate` and :func:`compile`, standard deviations as a data sheet gives them; a graph carries its
own and takes none. A string names a method with its defaults: ``"ukf"``, ``"ekf"``, ``"kf"``, ``"rts"``
(the UKF's smoother), ``"pn"`` (:class:`PN`, the probabilistic-numeric ODE filter), ``"banded"``,
``"distributed"``.

References:
    compositional-inference paper, Alg. 1-6; Särkkä & Svensson, Bayesian Filtering and Smoothing (2nd
    ed.), Sec. 9.4 and Alg. 9.3.

"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict, Unpack

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from twinfer._config import ensure
from twinfer.data import Dataset
from twinfer.data._checks import did_you_mean
from twinfer.infer._estimate import Estimate
from twinfer.infer._program import Program
from twinfer.infer.filters import run_filter, smooth
from twinfer.infer.filters._api import KERNELS, LINEARISATIONS, Layout, _run, _vector
from twinfer.infer.gaussian import UnscentedWeights
from twinfer.infer.graph import Graph, Schedule, default_bandwidth
from twinfer.infer.graph._banded import banded_estimate
from twinfer.infer.graph._chain import auto_partition
from twinfer.infer.graph._messages import SCHEDULES
from twinfer.infer.graph._program import graph_program
from twinfer.infer.graph._run import estimate as graph_estimate
from twinfer.infer.pn import PNFilter, PNProgram
from twinfer.models import AbstractModel, Chain, StateSpace
from twinfer.sim import METHODS as INTEGRATORS

__all__ = ["PN", "Banded", "Central", "Distributed", "Numbers", "compile", "estimate"]

FILTERS = ("ukf", "ekf", "kf")
"""The Gaussian filters of twinfer: unscented, extended (Taylor), Kalman (linear models)."""

MESSAGES = ("probabilistic", "deterministic")
"""How subsystems exchange interface values: mean and covariance, or means only."""


def _one_of(method: str, field: str, value: Any, allowed: Sequence[Any]) -> None:
    if value not in allowed:
        raise ValueError(
            f"{method} {field}: expected one of {', '.join(map(repr, allowed))}; received {value!r}."
            + did_you_mean(str(value), [str(a) for a in allowed])
        )


def _substeps(method: str, value: Any, integrator: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 1 <= value <= 100_000:
        raise ValueError(f"{method} substeps: expected an integer in 1..100000; received {value!r}.")
    if integrator == "exact" and value != 1:
        raise ValueError(f"{method} substeps: expected 1 with integrator 'exact'; received {value}.")


class Central(eqx.Module):
    """One Gaussian filter over the whole state (unknowns appended as random walks), or its smoother.

    Attributes:
        filter: ``"ukf"`` (unscented), ``"ekf"`` (Taylor) or ``"kf"`` (a linear model), square-root.
        linearisation: the UKF's ``"propagated"`` (default: the measurement read at the propagated sigma
            points, Alg. 6) or ``"redrawn"`` (statistical linear regression); None: the filter's first.
        smoother: the RTS smoother after the filter (each estimate uses the whole record; not a Program).
        integrator: ``"euler"``, ``"heun"``, ``"rk4"`` or ``"exact"`` (a linear model's exponential); a
            StateSpace is not integrated (its transition is one record step) and takes the default.
        substeps: integrator steps per record step (1..100000; 1 with ``"exact"``).
        weights: sigma-point weights of the UKF (None: Merwe alpha 1, beta 2, kappa 0).
        kernel: ``"qr"`` (stacked factors triangularised; robust to singular covariances) or ``"gram"``
            (covariances formed by products and factored by Cholesky: about 1.5 times faster for a 24-state
            EKF, where every covariance is positive-definite; :data:`~twinfer.infer.filters.Kernel`).

    """

    filter: Literal["ukf", "ekf", "kf"] = eqx.field(static=True, default="ukf")
    linearisation: str | None = eqx.field(static=True, default=None)
    smoother: bool = eqx.field(static=True, default=False)
    integrator: str = eqx.field(static=True, default="rk4")
    substeps: int = eqx.field(static=True, default=1)
    weights: UnscentedWeights | None = eqx.field(static=True, default=None)
    kernel: Literal["qr", "gram"] = eqx.field(static=True, default="qr")

    def __check_init__(self) -> None:
        _one_of("Central", "filter", self.filter, FILTERS)
        _one_of("Central", "kernel", self.kernel, KERNELS)
        if self.linearisation is not None:
            _one_of(
                "Central",
                f"linearisation (of {self.filter!r})",
                self.linearisation,
                LINEARISATIONS[self.filter],
            )
        _one_of("Central", "integrator", self.integrator, INTEGRATORS)
        _substeps("Central", self.substeps, self.integrator)
        if not isinstance(self.smoother, bool):
            raise ValueError(f"Central smoother: expected True or False; received {self.smoother!r}.")
        if self.weights is not None and (
            self.filter != "ukf" or not isinstance(self.weights, UnscentedWeights)
        ):
            raise ValueError(
                f"Central weights: expected UnscentedWeights with filter 'ukf'; received {self.weights!r} "
                f"with filter {self.filter!r}."
            )

    def whole(self, model: AbstractModel, dt: float, problem: Mapping[str, Any]) -> Graph:
        """``model`` as one subsystem holding its whole state: how this filter carries ``input_sd``.

        The inputs' noise enters through the graph's linearised input map as process noise
        (:meth:`~twinfer.infer.graph.Graph.from_model`); a chain is one group of all its DOFs, another
        model one group of all its states.
        """
        group = list(range(1, model.n_dof + 1)) if isinstance(model, Chain) else list(model.state_names)
        return Graph.from_model(
            model,
            [group],
            dt=dt,
            integrator=self.integrator,
            substeps=int(self.substeps),
            estimator=self.filter,
            messages="probabilistic",
            **{k: v for k, v in problem.items() if v is not None},
        )

    def options(self) -> dict[str, Any]:
        """The keywords of :func:`~twinfer.infer.filters.run_filter` this method stands for."""
        out: dict[str, Any] = dict(
            estimator=self.filter, integrator=self.integrator, substeps=int(self.substeps)
        )
        if self.linearisation is not None:
            out["linearisation"] = self.linearisation
        if self.weights is not None:
            out["weights"] = self.weights
        if self.kernel != "qr":
            out["kernel"] = self.kernel
        return out


class _Split(eqx.Module):
    """What a distributed method needs to split a model into subsystems (Graph.from_model)."""

    partition: Any = eqx.field(static=True, default=None)
    filter: Literal["ukf", "ekf", "kf"] = eqx.field(static=True, default="ukf")
    integrator: str = eqx.field(static=True, default="rk4")
    substeps: int = eqx.field(static=True, default=1)
    messages: str = eqx.field(static=True, default="probabilistic")
    rule: str | None = eqx.field(static=True, default=None)

    def _check(self, name: str) -> None:
        _one_of(name, "filter", self.filter, FILTERS)
        _one_of(name, "integrator", self.integrator, INTEGRATORS)
        _substeps(name, self.substeps, self.integrator)
        _one_of(name, "messages", self.messages, MESSAGES)
        if (
            self.partition is not None
            and self.partition != "auto"
            and (
                isinstance(self.partition, str)
                or not all(isinstance(g, Sequence) and not isinstance(g, str) for g in self.partition)
            )
        ):
            raise ValueError(
                f"{name} partition: expected None or 'auto' (automatic) or groups of DOFs, e.g. "
                f"[[1, 2], [3, 4]]; received {self.partition!r}."
            )

    def graph(
        self, model: AbstractModel, data: Dataset | None, dt: float, problem: Mapping[str, Any]
    ) -> Graph:
        """``model`` split into subsystems by ``partition`` (automatic when None), with its numbers."""
        options = {k: v for k, v in problem.items() if v is not None}
        if self.rule is not None:
            options["rule"] = self.rule
        partition = None if self.partition == "auto" else self.partition
        if partition is None and isinstance(model, Chain):
            partition = auto_partition(model)
        elif partition is None:
            raise ValueError(
                f"{type(self).__name__} partition: expected groups of {type(model).__name__}'s state names "
                "(an automatic partition is a chain's only); received None."
            )
        return Graph.from_model(
            model,
            [list(g) for g in partition],
            dt=dt,
            integrator=self.integrator,
            substeps=int(self.substeps),
            estimator=self.filter,
            messages=self.messages,
            **options,
        )


class Banded(_Split):
    """The banded filter on a graph: correlations kept up to ``bandwidth`` subsystems apart.

    Attributes:
        bandwidth: L >= 1 (None: :func:`~twinfer.infer.graph.default_bandwidth`, one wider than the
            interfaces need, the calibrated default).
        parameters: ``"global"`` (default: every unknown correlated with the whole graph) or ``"local"``.
        prediction: ``"taylor"`` or ``"unscented"``; update: ``"compensated"``, ``"taylor"`` or
            ``"unscented"`` (``docs/design-banded.md``).
        partition, filter, integrator, substeps, messages, rule: how a model is split into a graph
            (ignored for a graph).

    """

    bandwidth: int | None = eqx.field(static=True, default=None)
    parameters: Literal["global", "local"] = eqx.field(static=True, default="global")
    prediction: str = eqx.field(static=True, default="taylor")
    update: str = eqx.field(static=True, default="compensated")

    def __check_init__(self) -> None:
        self._check("Banded")
        if self.bandwidth is not None and (
            isinstance(self.bandwidth, bool)
            or not isinstance(self.bandwidth, int | np.integer)
            or self.bandwidth < 1
        ):
            raise ValueError(
                f"Banded bandwidth: expected None or an integer >= 1; received {self.bandwidth!r}."
            )
        _one_of("Banded", "parameters", self.parameters, ("global", "local"))
        _one_of("Banded", "prediction", self.prediction, ("taylor", "unscented"))
        _one_of("Banded", "update", self.update, ("compensated", "taylor", "unscented"))


class Distributed(_Split):
    """Message passing between the subsystems' local filters (the compositional paper's Alg. 1-3).

    Attributes:
        schedule: ``"jacobi"``, ``"gauss_seidel"`` or ``"ab2"`` (Adams-Bashforth extrapolated
            messages), as :class:`~twinfer.infer.graph.Schedule`.
        inner: message iterations per time step (>= 1).
        partition, filter, integrator, substeps, messages, rule: how a model is split into a graph
            (ignored for a graph, which carries its own).

    """

    schedule: str = eqx.field(static=True, default="jacobi")
    inner: int = eqx.field(static=True, default=1)

    def __check_init__(self) -> None:
        self._check("Distributed")
        _one_of("Distributed", "schedule", self.schedule, SCHEDULES)
        if isinstance(self.inner, bool) or not isinstance(self.inner, int | np.integer) or self.inner < 1:
            raise ValueError(f"Distributed inner: expected an integer >= 1; received {self.inner!r}.")


class PN(eqx.Module):
    """The probabilistic-numeric ODE filter (pn-smc paper, Eq. 12-20): integration error in the bands.

    The model's own parameters are used (sample unknown ones with :mod:`twinfer.infer.smc`); the prior
    over the solution is an integrated Wiener process whose diffusion is calibrated online.

    Attributes:
        q: the prior's order (derivatives kept, >= 1).
        linearisation: ``"ek0"`` (the paper's) or ``"ek1"`` (the vector field's Jacobian kept).
        calibrate: calibrate the diffusion online (False: unit diffusion).
        shared_diffusion: one diffusion for every ODE dimension.
        structure: ``"auto"``, ``"dense"`` or ``"blockdiag"`` (:class:`~twinfer.infer.pn.PNFilter`).

    """

    q: int = eqx.field(static=True, default=2)
    linearisation: Literal["ek0", "ek1"] = eqx.field(static=True, default="ek0")
    calibrate: bool = eqx.field(static=True, default=True)
    shared_diffusion: bool = eqx.field(static=True, default=False)
    structure: str = eqx.field(static=True, default="auto")

    def __check_init__(self) -> None:
        if isinstance(self.q, bool) or not isinstance(self.q, int | np.integer) or not 1 <= self.q <= 8:
            raise ValueError(f"PN q: expected an integer in 1..8; received {self.q!r}.")
        _one_of("PN", "linearisation", self.linearisation, ("ek0", "ek1"))
        _one_of("PN", "structure", self.structure, ("auto", "dense", "blockdiag"))

    def program(
        self, model: AbstractModel, dt: float, problem: Mapping[str, Any], input_hold: str, alignment: str
    ) -> PNProgram:
        """The :class:`~twinfer.infer.pn.PNProgram` of ``model`` at step ``dt`` with the problem's numbers."""
        for key in ("process_sd", "unknown", "input_sd"):
            if problem.get(key) is not None:
                raise ValueError(
                    f"PN {key}: the PN filter calibrates its own diffusion and uses the model's parameters; "
                    f"received {key}={problem[key]!r} (sample unknown parameters with twinfer.infer.smc)."
                )
        names = model.state_names
        x0 = _vector("PN", "x0", problem.get("x0", 0.0), names, lower="any")
        sd = _vector("PN", "state_sd", problem.get("state_sd", 0.0), names)
        noise = _vector("PN", "noise_sd", problem.get("noise_sd", 1.0), model.output_names, lower="> 0")
        pn = PNFilter(
            model,
            q=int(self.q),
            method=self.linearisation,
            calibrate=self.calibrate,
            shared_diffusion=self.shared_diffusion,
            structure=self.structure,
        )
        return PNProgram(
            state_names=tuple(names),
            parameters=(),
            input_names=tuple(model.input_names),
            output_names=tuple(model.output_names),
            input_hold=input_hold,  # type: ignore[arg-type]
            alignment=alignment,  # type: ignore[arg-type]
            pn=pn,
            params=model.params,
            x0=jnp.asarray(x0),
            state_sd=jnp.asarray(sd),
            chol_R=jnp.diag(jnp.asarray(noise)),
            dt=float(dt),
        )


Method = Central | Banded | Distributed | PN

_NAMED: dict[str, Method] = {
    "ukf": Central(),
    "ekf": Central(filter="ekf"),
    "kf": Central(filter="kf"),
    "rts": Central(smoother=True),
    "pn": PN(),
    "banded": Banded(),
    "distributed": Distributed(),
}
"""The methods a string names (each with its defaults)."""


class Numbers(TypedDict, total=False):
    """The problem's numbers, keywords of :func:`estimate` and :func:`compile` (every one optional).

    Standard deviations as a data sheet gives them, or full covariances (a :class:`Central` method):

    - ``x0``: prior mean of the state (default 0; a scalar or one per state).
    - ``state_sd``: prior sd of each state (default 1); or ``state_cov``, the (n, n) prior covariance.
    - ``process_sd``: per-step process-noise sd of each state (default 1e-6; ``"auto"`` with
      :class:`Central`); or ``process_cov``, the (n, n) per-step process-noise covariance (may be
      singular).
    - ``noise_sd``: measurement-noise sd per output (default 1; ``"auto"`` with :class:`Central`); or
      ``noise_cov``, the (m, m) measurement-noise covariance.
    - ``input_sd``: the inputs' measurement-noise sd (load cells), scalar or one per input: pushed
      through the dynamics as process noise (one subsystem holding the whole model for :class:`Central`),
      and into an accelerometer on a forced mass with the same draw (carried as hidden states:
      :func:`~twinfer.infer.graph._chain.chain_graph`).
    - ``unknown``: ``{parameter: (initial value, prior sd, random-walk sd)}`` of a model's parameters.

    A graph carries its own numbers and takes none of these.
    """

    x0: Any
    state_sd: Any
    process_sd: Any
    noise_sd: Any
    input_sd: Any
    unknown: Mapping[str, Any] | None
    state_cov: Any
    process_cov: Any
    noise_cov: Any


_PROBLEM = tuple(Numbers.__annotations__)
_COVARIANCES = ("state_cov", "process_cov", "noise_cov")


def _method(system: Any, method: Any, where: str) -> Method:
    if method is None:
        return Banded() if isinstance(system, Graph) else Central()
    if isinstance(method, str):
        if method not in _NAMED:
            raise ValueError(
                f"{where} method: expected a method object (Central, Banded, Distributed, PN) or one of "
                f"{', '.join(map(repr, _NAMED))}; received {method!r}." + did_you_mean(method, list(_NAMED))
            )
        return _NAMED[method]
    if not isinstance(method, Central | Banded | Distributed | PN):
        raise TypeError(
            f"{where} method: expected Central, Banded, Distributed, PN or a name; received "
            f"{type(method).__name__}."
        )
    return method


def _problem(where: str, system: Any, method: Method, problem: Mapping[str, Any]) -> dict[str, Any]:
    extra = sorted(set(problem) - set(_PROBLEM))
    if extra:
        raise TypeError(
            f"{where}: unexpected keyword {extra[0]!r}; expected one of {', '.join(_PROBLEM)} (the method's "
            "options go in the method object)." + did_you_mean(extra[0], list(_PROBLEM))
        )
    given = {k: v for k, v in problem.items() if v is not None}
    if isinstance(system, Graph) and given:
        raise ValueError(
            f"{where} {next(iter(given))}: a graph carries its subsystems' own numbers; received "
            f"{', '.join(given)} with graph {system.name!r} (give them to Graph.from_model)."
        )
    if not isinstance(system, Graph | AbstractModel | StateSpace):
        raise TypeError(
            f"{where} system: expected a twinfer model, a StateSpace (plain functions or matrices) or a "
            f"Graph; received {type(system).__name__}."
        )
    full = [k for k in _COVARIANCES if k in given]
    if full and not isinstance(method, Central):
        raise ValueError(
            f"{where} {full[0]}: full covariances are the central filter's; received it with method "
            f"{type(method).__name__} (give standard deviations, *_sd, to a distributed method)."
        )
    if isinstance(system, StateSpace):
        if not isinstance(method, Central):
            raise ValueError(
                f"{where} method: a StateSpace is filtered whole by a Central method (KF, EKF, UKF); "
                f"received {type(method).__name__}."
            )
        if given.get("input_sd") is not None:
            raise ValueError(
                f"{where} input_sd: a StateSpace's input noise belongs in its process_cov (B Cov(u) B^T "
                f"for a linear one); received input_sd={given['input_sd']!r}."
            )
        if method.substeps != 1 or method.integrator != "rk4":
            raise ValueError(
                f"{where} method: a StateSpace's transition is one record step (nothing is integrated); "
                f"expected the default integrator and substeps=1, received integrator={method.integrator!r}, "
                f"substeps={method.substeps}."
            )
    return given


def _start(where: str, system: Any, method: Any, numbers: Mapping[str, Any]) -> tuple[dict[str, Any], Method]:
    """The first steps of :func:`estimate` and :func:`compile`: configure, the numbers, the method."""
    ensure(where, system=system)
    chosen = _method(system, method, where)
    return _problem(where, system, chosen, numbers), chosen


def estimate(
    system: AbstractModel | StateSpace | Graph,
    data: Dataset,
    method: Method | str | None = None,
    **numbers: Unpack[Numbers],
) -> Estimate:
    """Estimate the states (and unknown parameters) of ``system`` from ``data``, with uncertainty.

    Args:
        system: a continuous-time twinfer model, a discrete-time :class:`~twinfer.models.StateSpace`
            (plain functions ``f(x, u)``, ``h(x, u)`` or matrices ``F, B, H, D``), or a
            :class:`~twinfer.infer.graph.Graph`.
        data: the record (:class:`~twinfer.data.Dataset`; its time convention is read from it).
        method: :class:`Central` (a model's default), :class:`Banded` (a graph's default),
            :class:`Distributed`, or a name (module docstring).
        **numbers: the problem's numbers (:class:`Numbers`): ``x0``, ``state_sd`` or ``state_cov``,
            ``process_sd`` or ``process_cov``, ``noise_sd`` or ``noise_cov``, ``input_sd``, ``unknown``.

    Returns:
        :class:`~twinfer.infer.Estimate` over the record's times (row 0 the prior).

    Raises:
        ValueError: a method or keyword that does not fit the system or the data, named; what the
            estimators raise (:class:`~twinfer.infer.filters.DivergenceError`,
            :class:`~twinfer.sim.StepSizeError`).
        TypeError: a system, method or keyword of the wrong type.

    """
    problem, chosen = _start("estimate", system, method, numbers)
    if isinstance(system, StateSpace):
        return _run(system, data, "smooth" if chosen.smoother else "filter", {**chosen.options(), **problem})  # type: ignore[union-attr]
    if isinstance(chosen, PN):
        if not isinstance(system, AbstractModel):
            raise ValueError(f"estimate method: PN filters a model; received graph {system.name!r}.")
        return chosen.program(system, data.dt, problem, data.input_hold, data.alignment).run(data)
    if isinstance(system, AbstractModel) and isinstance(chosen, Central):
        input_noise = problem.pop("input_sd", None)
        if input_noise is not None and np.any(np.asarray(input_noise, dtype=np.float64)):
            if chosen.smoother:
                raise ValueError(
                    "estimate input_sd: the smoother does not take input noise yet; use the filter."
                )
            return graph_estimate(chosen.whole(system, data.dt, {**problem, "input_sd": input_noise}), data)
        fn = smooth if chosen.smoother else run_filter
        return fn(system, data, **chosen.options(), **problem)
    if isinstance(chosen, Central):
        raise ValueError(
            f"estimate method: Central runs one filter over a model's whole state; received it with graph "
            f"{system.name!r} (estimate(graph.monolithic() ...) or method Banded/Distributed)."  # type: ignore[union-attr]
        )
    graph = system if isinstance(system, Graph) else chosen.graph(system, data, data.dt, problem)
    if isinstance(chosen, Distributed) or graph.fields:
        schedule = (
            Schedule(kind=chosen.schedule, inner=int(chosen.inner))
            if isinstance(chosen, Distributed)
            else "jacobi"
        )
        return graph_estimate(graph, data, schedule)
    bandwidth = default_bandwidth(graph, data) if chosen.bandwidth is None else int(chosen.bandwidth)
    return banded_estimate(
        graph,
        data,
        bandwidth=bandwidth,
        prediction=chosen.prediction,
        update=chosen.update,
        parameters=chosen.parameters,
    )


def compile(  # noqa: A001  (the verb users look for; twinfer.compile does not shadow it inside twinfer)
    system: AbstractModel | StateSpace | Graph,
    method: Method | str | None = None,
    *,
    dt: float | None = None,
    data: Dataset | None = None,
    input_hold: Literal["zoh", "linear"] = "zoh",
    alignment: Literal["sampled", "held"] = "sampled",
    **numbers: Unpack[Numbers],
) -> Program:
    """The :class:`~twinfer.infer.Program` of ``system`` and ``method``: ``init``, ``step``, ``run``.

    Args:
        system: as :func:`estimate`.
        method: as :func:`estimate`.
        **numbers: as :func:`estimate` (``process_sd`` and ``noise_sd`` not ``"auto"``).
        dt: the records' step (s), or give ``data``.
        data: a record whose step and time convention (``input_hold``, ``alignment``) the program takes
            (the program does not keep it).
        input_hold: ``"zoh"`` or ``"linear"``, the time convention when no ``data`` is given
            (:class:`~twinfer.data.Dataset`).
        alignment: ``"sampled"`` or ``"held"``, likewise.

    Raises:
        ValueError: a method without a Program (the smoother needs the whole record), ``"auto"`` noise
            levels (tuned on a record: use :func:`estimate`), no ``dt``, named.

    """
    problem, chosen = _start("compile", system, method, numbers)
    if data is not None:
        dt, input_hold, alignment = data.dt, data.input_hold, data.alignment  # type: ignore[assignment]
    if dt is None:
        raise ValueError("compile dt: expected the records' step in seconds (or data=); received None.")
    _one_of("compile", "input_hold", input_hold, ("zoh", "linear"))
    _one_of("compile", "alignment", alignment, ("sampled", "held"))
    if isinstance(chosen, Central) and chosen.smoother:
        raise ValueError(
            "compile method: the RTS smoother reads the whole record backwards, so it has no one-step "
            "Program; compile the filter (Central(smoother=False)) or use twinfer.estimate."
        )
    if isinstance(chosen, PN) and isinstance(system, AbstractModel):
        return chosen.program(system, float(dt), problem, input_hold, alignment)
    if isinstance(system, AbstractModel | StateSpace) and isinstance(chosen, Central):
        input_noise = problem.pop("input_sd", None)
        if input_noise is not None and np.any(np.asarray(input_noise, dtype=np.float64)):
            whole = chosen.whole(system, float(dt), {**problem, "input_sd": input_noise})  # type: ignore[arg-type]
            return graph_program(
                whole, "messages", schedule=Schedule(), data=data, input_hold=input_hold, alignment=alignment
            )
        layout = Layout(float(dt), input_hold, alignment)
        return _run(system, None, "compile", {**chosen.options(), **problem}, layout)
    if isinstance(chosen, Central):
        raise ValueError(
            f"compile method: Central runs one filter over a model's whole state; received it with graph "
            f"{system.name!r} (compile(graph.monolithic() ...) or method Banded/Distributed)."  # type: ignore[union-attr]
        )
    if isinstance(chosen, PN):
        raise ValueError(f"compile method: PN filters a model; received graph {system.name!r}.")  # type: ignore[union-attr]
    graph = system if isinstance(system, Graph) else chosen.graph(system, data, float(dt), problem)  # type: ignore[arg-type]
    if graph.fields:
        return graph_program(graph, "field", data=data, input_hold=input_hold, alignment=alignment)
    if isinstance(chosen, Distributed):
        schedule = Schedule(kind=chosen.schedule, inner=int(chosen.inner))
        return graph_program(
            graph, "messages", schedule=schedule, data=data, input_hold=input_hold, alignment=alignment
        )
    if data is None:
        raise ValueError(
            "compile data: the banded filter finds its window structure on a record; expected data=; "
            "received None."
        )
    bandwidth = default_bandwidth(graph, data) if chosen.bandwidth is None else int(chosen.bandwidth)
    options = dict(prediction=chosen.prediction, update=chosen.update, parameters=chosen.parameters)
    return graph_program(graph, "banded", bandwidth=bandwidth, banded=options, data=data)
