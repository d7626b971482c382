"""Subsystems, ports and interfaces: the nodes and edges of a compositional-inference graph.

A :class:`Subsystem` is a local discrete-time model with its own estimator; a :class:`Port` projects its
state onto interface variables and names the message slots an incoming message is added to; an
:class:`Interface` on a directed edge carries the message ``m_{j->i} = h_ji(s_{j->i}, s_{i<-j}; gamma)``
(specs/compositional-inference.md section 1, eq. S1-S2). A :class:`Field` couples many subsystems through
sparse sums of their neighbours' interface variables (the grid's clusters).

References:
    Ghorbani & Hackl, "Subsystem structure as an inferential resource for coupled engineered systems",
    section 1 and SI eq. (S1-S4), (S24-S46), (S73)-(S92).

"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from twinfer.infer.gaussian import UnscentedWeights
from twinfer.sim import Dynamics

Estimator = Literal["ukf", "kf", "ekf", "wls", "wnls", "none", "learned"]
MessageKind = Literal["deterministic", "probabilistic", "learned"]
ESTIMATORS = ("ukf", "kf", "ekf", "wls", "wnls", "none", "learned")
MESSAGE_KINDS = ("deterministic", "probabilistic", "learned")
MESSAGE_RULES = ("paper", "split", "shared")


class Port(eqx.Module):
    """An interface port: ``state`` indices read as interface variables, ``slots`` message slots written.

    Attributes:
        state: indices of the local state forming the interface variables s (the projection of S1-S2).
        slots: indices of the local message vector an incoming message on this port is added to.

    """

    state: tuple[int, ...] = eqx.field(static=True)
    slots: tuple[int, ...] = eqx.field(static=True, default=())


class LinearOutput(NamedTuple):
    """A subsystem's linear output ``y = H x``, held hashably (a static field): ``H`` is ``matrix()``."""

    shape: tuple[int, int]
    values: tuple[float, ...]

    def matrix(self) -> np.ndarray:
        return np.asarray(self.values, dtype=np.float64).reshape(self.shape)


def _matrix(value: Any) -> LinearOutput:
    if isinstance(value, LinearOutput):
        return value
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(
            f"Subsystem output: expected a function or a matrix H (n_y, n); received an array of shape "
            f"{arr.shape}."
        )
    return LinearOutput((int(arr.shape[0]), int(arr.shape[1])), tuple(float(v) for v in arr.reshape(-1)))


class Subsystem(eqx.Module):
    """One node: a local model ``x' = transition(x, u, m, params)``, ``y = output(x, u, m, params)``.

    ``m`` is the aggregated (summed) incoming message vector of length ``n_msg``. Unknown parameters are
    part of the state (joint augmentation, section 2.4). Subsystems built from the same ``transition``
    and ``output`` functions with the same shapes and ports are stacked and vmapped by :func:`compile`;
    their numbers (``params``, ``x0``, covariances, data columns) may differ.

    Attributes:
        name: unique name (errors name it).
        transition: ``(x, u, m, params) -> x_next`` over one step.
        output: ``(x, u, m, params) -> y``, evaluated at the propagated state with the step's input, or
            a matrix H (n_y, n) for a linear output ``y = H x`` (the UKF then updates exactly, one
            sensor at a time when R is diagonal and the subsystem small).
        params: pytree of known parameters (arrays).
        x0: initial mean (n,).
        P0: initial covariance (n, n).
        Q: process-noise covariance (n, n).
        R: measurement-noise covariance (n_y, n_y).
        inputs: columns of the dataset inputs this subsystem receives; -1 for an input the data does not
            carry (read as 0, e.g. an unforced mass whose input only takes messages).
        outputs: columns of the dataset observations it measures; -1 for an output never measured
            (a padded slot).
        ports: interface ports by name.
        n_msg: length of the message vector ``m``.
        estimator: ``"ukf"`` (paper-code UKF, Alg. 6, square-root), ``"kf"`` (Alg. 4), ``"ekf"``
            (Alg. 5), ``"wls"`` / ``"wnls"`` (the static one-step and iterated weighted least squares
            baselines, :func:`~twinfer.infer.filters._wls.wls_step` /
            :func:`~twinfer.infer.filters._wls.wnls_step`),
            ``"none"`` (deterministic propagation, no update) or ``"learned"`` (a learned one-step
            predictor such as a NARX surrogate, section 2.5: the mean is the prediction and the
            covariance is ``Q``, the predictor's own one-step error, plus any injected message
            covariance; no update and no propagation of the previous covariance, since the predictor
            reads measured inputs, not its previous estimate's error).
        weights: sigma-point weights of the UKF (default: paper code, gamma = 0).
        innovation: ``(y, y_pred) -> residual`` of the UKF, WLS and WNLS updates (default ``y - y_pred``; a
            wrapped difference for measured angles).
        dynamics: the node's :class:`twinfer.sim.Dynamics` when built by :func:`twinfer.sim.heun_node`
            (its transition then reads one message per Heun stage); required by a :class:`Field` with
            ``message="predicted"``.
        state_names: a name for each state (e.g. the whole model's ``"x3"``, ``"k2"``), used by
            :func:`twinfer.infer.graph._run.estimate` to merge the subsystems into one
            :class:`~twinfer.infer.Estimate`; default ``"<name>[i]"``. A name starting with ``"~"``
            marks an inert padding state (a cluster's unused slot), left out of the Estimate.
        parameters: the states that are unknown parameters, by name (among ``state_names``).
        memory: the number of trailing states that are a deterministic memory (a learned predictor's
            window of past inputs, e.g. the NARX's 200 lags): carried from step to step by the mean
            alone, without covariance, never output or estimated. ``P0`` and ``Q`` cover the first
            ``n - memory`` states only; ports read only those. Estimator ``"learned"`` only.

    """

    name: str = eqx.field(static=True)
    transition: Callable[..., Any] = eqx.field(static=True)
    output: Callable[..., Any] | LinearOutput = eqx.field(
        static=True, converter=lambda o: o if callable(o) and not isinstance(o, LinearOutput) else _matrix(o)
    )
    params: Any
    x0: Any
    P0: Any
    Q: Any
    R: Any
    inputs: tuple[int, ...] = eqx.field(static=True)
    outputs: tuple[int, ...] = eqx.field(static=True)
    ports: dict[str, Port] = eqx.field(static=True)
    n_msg: int = eqx.field(static=True)
    estimator: str = eqx.field(static=True, default="ukf")
    weights: UnscentedWeights = eqx.field(static=True, default_factory=UnscentedWeights.paper_code)
    innovation: Callable[[Any, Any], Any] | None = eqx.field(static=True, default=None)
    dynamics: Dynamics | None = eqx.field(static=True, default=None)
    state_names: tuple[str, ...] | None = eqx.field(static=True, default=None)
    parameters: tuple[str, ...] = eqx.field(static=True, default=())
    memory: int = eqx.field(static=True, default=0)

    def __check_init__(self) -> None:
        n = int(jnp.shape(self.x0)[0])
        where = f"Subsystem {self.name!r}"
        if not 0 <= self.memory < n or (self.memory and self.estimator != "learned"):
            raise ValueError(
                f"{where} memory: expected 0, or 0..{n - 1} trailing states of a 'learned' subsystem; "
                f"received {self.memory} with estimator {self.estimator!r}."
            )
        n_est = n - self.memory
        if self.state_names is not None and len(self.state_names) != n:
            raise ValueError(
                f"{where} state_names: expected {n} names (one per state); received {self.state_names}."
            )
        missing = [p for p in self.parameters if p not in self.names]
        if missing:
            raise ValueError(f"{where} parameters: expected names among {self.names}; received {missing}.")
        if isinstance(self.output, LinearOutput):
            shape = self.output.shape
            if shape != (len(self.outputs), n):
                raise ValueError(
                    f"{where} output: expected a function or a matrix of shape {(len(self.outputs), n)}; "
                    f"received an array of shape {shape}."
                )
        if self.innovation is not None and self.estimator not in ("ukf", "wls", "wnls"):
            raise ValueError(
                f"{where} innovation: only the 'ukf', 'wls' and 'wnls' estimators take a custom innovation; "
                f"received estimator {self.estimator!r}."
            )
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"{where} estimator: expected one of {ESTIMATORS}; received {self.estimator!r}.")
        for field, shape in (("P0", (n_est, n_est)), ("Q", (n_est, n_est)), ("R", (len(self.outputs),) * 2)):
            got = tuple(jnp.shape(getattr(self, field)))
            if got != shape:
                raise ValueError(f"{where} {field}: expected shape {shape}; received {got}.")
        for pname, port in self.ports.items():
            bad_state = [i for i in port.state if not 0 <= i < n_est]
            if bad_state:
                raise ValueError(
                    f"{where} port {pname!r}: state indices must lie in 0..{n_est - 1} (memory states are "
                    f"not read by ports); received {port.state}."
                )
            bad_slot = [i for i in port.slots if not 0 <= i < self.n_msg]
            if bad_slot:
                raise ValueError(
                    f"{where} port {pname!r}: message slots must lie in 0..{self.n_msg - 1}; "
                    f"received {port.slots}."
                )

    @property
    def n_state(self) -> int:
        return int(jnp.shape(self.x0)[0])

    @property
    def n_estimated(self) -> int:
        """The states with a covariance (all but the :attr:`memory`)."""
        return self.n_state - self.memory

    @property
    def names(self) -> tuple[str, ...]:
        """``state_names``, or ``"<name>[i]"`` for each state."""
        if self.state_names is not None:
            return tuple(self.state_names)
        return tuple(f"{self.name}[{i}]" for i in range(self.n_state))


class Interface(eqx.Module):
    """A directed edge sender -> receiver carrying ``law(s_sender, s_receiver, gamma)``.

    The message is added (aggregation A = sum) to the receiver port's message slots. ``kind``:

    * ``"deterministic"``: the law at the posterior means (exchange of means only);
    * ``"probabilistic"``: additionally the law's covariance under the two port marginals (cross
      covariances neglected, eq. S30-S32; unscented transform, exact for linear laws, S33) is injected
      into the receiver's process noise through the transition's sensitivity to the message (eq.
      S40-S44), only its positive increment over the previous step (eq. S46);
    * ``"learned"``: a fitted law (e.g. SINDy) used as a deterministic mean message (the authors' code).

    ``rule`` says where the law is evaluated and which variance a probabilistic message injects (the
    derivation and its measurements are in ``docs/design-messages.md``):

    * ``"paper"`` (the paper's rule, for reproduction): the law at both ends' posterior means, held over
      the step; its unscented variance under *both* ports' marginals, positive increment only (S46);
    * ``"split"``: the receiver evaluates the law itself, at each of its own sigma points and at every
      integrator stage, with the sender's interface variables on a line from their mean to their
      predicted mean (its own share of the law is then propagated exactly, correlations and all). A
      probabilistic message makes the sender's error a consider state of the receiver (never estimated;
      its cross-covariance with the receiver's state kept), so the sender's uncertainty enters every
      sigma point and stage, correlated in time as the sender's error is;
    * ``"shared"``: ``"split"``, and where the reverse interface is a probabilistic split one too, the
      part of the sender's error that its own filter finds correlated with the receiver's is read
      through the receiver's own deviation (half weight, ``SHARE``), the rest as a consider state.
      For co-drifting neighbours (positions along a chain fixed at one end): state coverage 0.81 ->
      0.93 with Duffing cuts, 0.91 -> 0.95 with linear or Van der Pol cuts; on grounded rotors coupled
      by sines it lowered coverage (0.85 -> 0.73), hence not the default (see
      ``docs/design-messages.md``).

    Laws built from the same callable with the same port sizes are batched together; only ``gamma``
    (a pytree of arrays) differs between them.
    """

    sender: str = eqx.field(static=True)
    sender_port: str = eqx.field(static=True)
    receiver: str = eqx.field(static=True)
    receiver_port: str = eqx.field(static=True)
    law: Callable[[Any, Any, Any], Any] = eqx.field(static=True)
    gamma: Any
    kind: str = eqx.field(static=True, default="deterministic")
    rule: str = eqx.field(static=True, default="paper")

    def __check_init__(self) -> None:
        where = f"Interface {self.sender}.{self.sender_port} -> {self.receiver}.{self.receiver_port}"
        if self.kind not in MESSAGE_KINDS:
            raise ValueError(f"{where} kind: expected one of {MESSAGE_KINDS}; received {self.kind!r}.")
        if self.rule not in MESSAGE_RULES:
            raise ValueError(f"{where} rule: expected one of {MESSAGE_RULES}; received {self.rule!r}.")


def two_way(
    a: str,
    a_port: str,
    b: str,
    b_port: str,
    law: Callable[[Any, Any, Any], Any],
    gamma: Any,
    kinds: Sequence[str] = ("deterministic", "deterministic"),
    rule: str = "paper",
) -> tuple[Interface, Interface]:
    """Both directions of a symmetric interaction (e.g. a spring-damper): a -> b and b -> a."""
    return (
        Interface(a, a_port, b, b_port, law, gamma, kinds[0], rule),
        Interface(b, b_port, a, a_port, law, gamma, kinds[1], rule),
    )


FieldMessage = Literal["held", "predicted"]
FieldVariance = Literal["none", "first-order"]
FIELD_MESSAGES = ("held", "predicted")
FIELD_VARIANCES = ("none", "first-order")


class Field(eqx.Module):
    """Sparse field coupling of the members of a graph, aggregated by segment sums.

    Edge ``e`` adds ``weight[e] * features(s)`` of variable ``sender_var[e]`` of ``port`` on subsystem
    ``members[sender[e]]`` to the message slots of variable ``receiver_var[e]`` of ``port`` on
    ``members[receiver[e]]``: variable ``a`` of a port owns the slots ``slots[k a : k a + k]`` (k the
    number of features).

    Attributes:
        name: the field's name (errors name it).
        port: port on every member; its ``state`` are the field variables, its ``slots`` k per variable.
        features: ``s -> (k,)`` features of a sender's variable (e.g. ``(sin s, cos s)``).
        law: ``(s_j, s_a) -> scalar`` force per unit weight, ``readout(s_a) . features(s_j)``; its
            derivative in ``s_j`` gives the first-order variance.
        members: names of the subsystems the edges index.
        sender, sender_var, receiver, receiver_var: edge arrays (E,) of member and variable indices.
        weight: edge weights (E,).
        message: ``"held"`` or ``"predicted"`` (the field engine: :mod:`twinfer.infer.graph._field`).
        variance: ``"none"`` or ``"first-order"``.
        rate: port whose variables are the rates of ``port``'s (their variance smears the senders' over
            the step), or None.
        drives: port whose variables the force is a rate of (where ``dt^2 var F`` enters the process
            noise); required by ``variance="first-order"``.

    """

    name: str = eqx.field(static=True)
    port: str = eqx.field(static=True)
    features: Callable[[Any], Any] = eqx.field(static=True)
    law: Callable[[Any, Any], Any] = eqx.field(static=True)
    members: tuple[str, ...] = eqx.field(static=True)
    sender: np.ndarray
    sender_var: np.ndarray
    receiver: np.ndarray
    receiver_var: np.ndarray
    weight: np.ndarray
    message: str = eqx.field(static=True, default="held")
    variance: str = eqx.field(static=True, default="none")
    rate: str | None = eqx.field(static=True, default=None)
    drives: str | None = eqx.field(static=True, default=None)

    def __init__(
        self,
        name: str,
        port: str,
        features: Callable[[Any], Any],
        law: Callable[[Any, Any], Any],
        members: Sequence[str],
        sender: Any,
        sender_var: Any,
        receiver: Any,
        receiver_var: Any,
        weight: Any,
        message: FieldMessage = "held",
        variance: FieldVariance = "none",
        rate: str | None = None,
        drives: str | None = None,
    ):
        self.name, self.port, self.features, self.law = name, port, features, law
        self.members = tuple(members)
        arrays = {
            "sender": sender,
            "sender_var": sender_var,
            "receiver": receiver,
            "receiver_var": receiver_var,
        }
        sizes = {k: np.shape(v) for k, v in {**arrays, "weight": weight}.items()}
        if len(set(sizes.values())) != 1 or len(next(iter(sizes.values()))) != 1:
            raise ValueError(f"Field {name!r}: expected edge arrays of one shape (E,); received {sizes}.")
        for key, value in arrays.items():
            arr = np.asarray(value)
            if arr.size and arr.dtype.kind not in "iu":
                raise ValueError(
                    f"Field {name!r} {key}: expected integer indices; received dtype {arr.dtype}."
                )
            setattr(self, key, arr.astype(int))
        self.weight = np.asarray(weight, dtype=np.float64)
        if message not in FIELD_MESSAGES:
            raise ValueError(
                f"Field {name!r} message: expected one of {FIELD_MESSAGES}; received {message!r}."
            )
        if variance not in FIELD_VARIANCES:
            raise ValueError(
                f"Field {name!r} variance: expected one of {FIELD_VARIANCES}; received {variance!r}."
            )
        if variance == "first-order" and drives is None:
            raise ValueError(
                f"Field {name!r} drives: variance='first-order' needs the port the force drives; "
                "received None."
            )
        self.message, self.variance, self.rate, self.drives = message, variance, rate, drives
        n = len(self.members)
        for key in ("sender", "receiver"):
            idx = getattr(self, key)
            if idx.size and (idx.min() < 0 or idx.max() >= n):
                raise ValueError(
                    f"Field {name!r} {key}: expected member indices in 0..{n - 1}; received "
                    f"{idx.min()}..{idx.max()}."
                )
        if not np.all(np.isfinite(self.weight)):
            raise ValueError(f"Field {name!r} weight: expected finite weights; received a non-finite one.")

    @property
    def n_edges(self) -> int:
        return int(self.sender.size)
