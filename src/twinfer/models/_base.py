"""The Model interface every estimator, simulator and combinator works with.

A model is a continuous-time system

    dx/dt = f(t, x, u; params),      y = h(t, x, u; params),

held as an ``equinox.Module``. ``params`` is a pytree: a flat ``dict`` from a parameter group name to a
scalar or a 1-D array (``{"k": [k1, ..., kn]}``), so any leaf can be estimated, learned or fixed. Scalar
parameter names are derived from it (``k4`` is ``params["k"][3]``, see :mod:`twinfer.models._params`).

Discrete states and events complete the FMI-shaped hybrid class (HUDA-ODE) of the model-combination
paper (specs/model-combination.md 1.1, eq. 6): a discrete state ``z`` that changes only at events, state
events signalled by an indicator crossing zero from positive to negative, their update ``(x, z) -> (x+,
z+)`` (super-dense time: one jump t- -> t+ per event instant), and time events (``next_time_event``, e.g.
the sampling clock of an RNN) with their own update. Every hook defaults to "none", so purely continuous
models implement only :meth:`vector_field` and :meth:`output`; hybrid models override the ``hybrid_*``
variants, which also see ``z``. :func:`twinfer.sim.simulate_events` runs any of them.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from twinfer._config import ensure
from twinfer.models._params import param_names as _param_names

Params = dict[str, Any]
State = Float[Array, " n_state"]
Input = Float[Array, " n_input"]
Output = Float[Array, " n_output"]


class Connection(NamedTuple):
    """Two groups of states that a model's equations couple across a cut (issue #20, item 1).

    ``a`` and ``b`` are state names. Cut between them, the subsystem holding ``a`` reads ``b`` (its
    equations and outputs depend on ``b`` only through these states) and the one holding ``b`` reads
    ``a``: a spring between two masses is ``Connection(("x2", "v2"), ("x3", "v3"))``. A model declares
    its interface coupling by returning these from :attr:`AbstractModel.connections`;
    :meth:`twinfer.infer.graph.Graph.from_model` then cuts it into subsystems along any partition.
    """

    a: tuple[str, ...]
    b: tuple[str, ...]


class AbstractModel(eqx.Module):
    """A continuous-time dynamical system with named states, inputs, outputs and parameters.

    Subclasses implement :meth:`vector_field` and :meth:`output` and set the name tuples. ``params`` is
    passed explicitly to both so that estimators can substitute estimated values (joint state-parameter
    estimation) without rebuilding the model.
    """

    params: eqx.AbstractVar[Params]
    steps_itself: ClassVar[bool] = False
    """A model that takes each step whole through :meth:`host_step` and has no vector field (a
    co-simulation FMU, whose solver is its own): nothing linearises it (the step-size check) and a graph
    steps it as a node of its own."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """Apply :func:`twinfer.configure` (float64) before the first model makes its parameter arrays.

        Building a model is a user's first step; parameters made while JAX is in float32 would lose
        digits that no later widening brings back, so the first model switches float64 on (once, as every
        estimator entry point would; importing twinfer changes nothing).
        """
        ensure("model")
        return super().__new__(cls)

    @abc.abstractmethod
    def vector_field(self, t: Any, x: State, u: Input, params: Params) -> State:
        """Time derivative dx/dt of the continuous state."""

    @abc.abstractmethod
    def output(self, t: Any, x: State, u: Input, params: Params) -> Output:
        """Measured output y at time t (noise-free)."""

    @property
    @abc.abstractmethod
    def state_names(self) -> tuple[str, ...]:
        """Names of the continuous state components, in order."""

    @property
    @abc.abstractmethod
    def input_names(self) -> tuple[str, ...]:
        """Names of the exogenous inputs, in order (empty tuple for autonomous models)."""

    @property
    @abc.abstractmethod
    def output_names(self) -> tuple[str, ...]:
        """Names of the outputs, in order."""

    @property
    def connections(self) -> tuple[Connection, ...]:
        """The model's interface coupling (:class:`Connection`); none declared by default."""
        return ()

    @property
    def param_names(self) -> tuple[str, ...]:
        """Scalar parameter names derived from ``params`` (``k1``, ``k2``, ... for a vector group)."""
        return _param_names(self.params)

    @property
    def param_bounds(self) -> dict[str, tuple[float, float]]:
        """The physical range ``{scalar name: (lower, upper)}`` of each bounded parameter; none by default.

        A model declares here what :meth:`check_params` enforces, as closed intervals: a mass, a stiffness
        or a damping coefficient is ``(0.0, inf)`` (a mass of exactly 0 is still refused by
        :meth:`check_params`). The filters estimate an unknown whose range is ``(0, inf)`` on a log scale
        by default and warn when a posterior crosses a declared bound
        (:class:`~twinfer.infer.filters.ParameterBoundWarning`).
        """
        return {}

    @property
    def n_state(self) -> int:
        return len(self.state_names)

    @property
    def n_input(self) -> int:
        return len(self.input_names)

    @property
    def n_output(self) -> int:
        return len(self.output_names)

    # -- linear structure (optional) -------------------------------------------------------------
    def linear_matrices(self, params: Params) -> tuple[Array, Array, Array, Array] | None:
        """``(A, B, C, D)`` with dx/dt = A x + B u, y = C x + D u, or ``None`` if the model is nonlinear.

        Used by ``sim.discretise(..., method="exact")`` (matrix exponential) and by linear filters.
        """
        return None

    @property
    def is_linear(self) -> bool:
        """Whether :meth:`linear_matrices` gives matrices.

        Asked abstractly (``jax.eval_shape``): no matrix is computed, no operation compiled to answer.
        """
        return jax.eval_shape(self.linear_matrices, self.params) is not None

    def host_step(
        self, step: Any, t: Any, x: State, u: Input, params: Params, h: float, substeps: int
    ) -> State | None:
        """``substeps`` steps of the integrator ``step`` taken by the model in one call, or ``None``.

        For a model evaluated outside the compiled program (an FMU through ``jax.pure_callback``), each
        stage of a step would be one host round trip; a model that overrides this takes the whole step
        (every stage and substep, and under differentiation the step's Jacobian) in one.
        :meth:`twinfer.sim.DiscreteModel.transition` asks it first and calls :meth:`vector_field` stage
        by stage when it answers ``None`` (the default).

        Args:
            step: one step ``(rhs, t, x, h) -> x_next`` of :mod:`twinfer.sim` (Euler, Heun or RK4),
                written leaf by leaf so it runs on NumPy arrays too.
            t: time at the start of the step.
            x: state at ``t``.
            u: input held over the step.
            params: parameter values.
            h: length of one substep.
            substeps: how many substeps of ``h``.

        """
        return None

    # -- hybrid structure (declared here, implemented by event-capable models) -------------------
    @property
    def discrete_state_names(self) -> tuple[str, ...]:
        """Names of discrete states (none for purely continuous models)."""
        return ()

    @property
    def n_discrete(self) -> int:
        return len(self.discrete_state_names)

    def initial_discrete_state(self, params: Params) -> Array:
        """Discrete state at the start of a simulation (zeros unless a model says otherwise)."""
        return jnp.zeros((self.n_discrete,))

    def hybrid_vector_field(self, t: Any, x: State, z: Array, u: Input, params: Params) -> State:
        """dx/dt given the discrete state too (eq. 5); defaults to :meth:`vector_field`."""
        return self.vector_field(t, x, u, params)

    def hybrid_output(self, t: Any, x: State, z: Array, u: Input, params: Params) -> Output:
        """Y given the discrete state too (eq. 6); defaults to :meth:`output`."""
        return self.output(t, x, u, params)

    @property
    def has_time_events(self) -> bool:
        """True when :meth:`next_time_event` can return a finite time."""
        return False

    def next_time_event(self, t: Any, z: Array, u: Input, params: Params) -> Any:
        """Time of the next time event strictly after ``t`` (``inf`` for none); may depend on z only."""
        return jnp.inf

    def time_event_update(self, t: Any, x: State, z: Array, u: Input, params: Params) -> tuple[State, Array]:
        """New ``(x, z)`` right after a time event at ``t`` (identity by default)."""
        return x, z

    @property
    def n_events(self) -> int:
        """Number of state-event indicators; zero means the model has no events."""
        return 0

    def event_indicators(self, t: Any, x: State, z: Array, u: Input, params: Params) -> Array:
        """State-event indicators (eq. 2); event i fires when entry i crosses zero from + to -."""
        return jnp.zeros((0,), dtype=x.dtype)

    def event_update(
        self, t: Any, x: State, z: Array, u: Input, params: Params, which: Array
    ) -> tuple[State, Array]:
        """New ``(x, z)`` right after the events flagged in ``which`` (super-dense time)."""
        return x, z

    def check_params(self, params: Params) -> None:
        """Raise ``ValueError`` naming a parameter whose value this model cannot take (default: none).

        Called on concrete values by the constructor of a model that overrides it and by
        :meth:`with_params`; estimators that substitute traced values inside ``jit`` do not call it.
        """

    def with_params(self, **updates: Any) -> AbstractModel:
        """A copy of this model with some named scalar parameters replaced (``k4=3e4``).

        Raises:
            ValueError: when a new value is one the model cannot take (:meth:`check_params`).

        """
        from twinfer.models._params import set_params

        new = eqx.tree_at(lambda m: m.params, self, set_params(self.params, updates))
        try:
            new.check_params(new.params)
        except jax.errors.TracerArrayConversionError:
            pass  # traced values inside jit: the estimators' divergence checks apply there
        return new
