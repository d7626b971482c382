"""A check of message passing against the banded filter on a window of the record.

Message passing keeps each subsystem's own block of the posterior and drops the correlation of its
errors with its neighbours'. Where those errors co-drift (a chain fixed at one end, cut connections
that are nonlinear, forces that are not measured exactly), its bands under-cover while its NIS stays
near 1 (issue #51: coverage 0.19 at NIS 1.006), so the consistency rule of the filters
(:class:`~twinfer.infer.filters.FilterConsistencyWarning`) does not see it. The log-likelihood does:
the banded filter (:func:`~twinfer.infer.graph._banded.banded_estimate`) runs on the same graph, the same
discretisation and noise levels, and keeps the correlation of each subsystem with its neighbours, so
on the same rows it explains the measurements at least as well wherever the correlation matters.
:func:`check_messages` runs both on the first ``steps`` rows of the record and warns
(:class:`MessageFitWarning`) when message passing's log-likelihood falls short of the banded filter's by
more than :data:`GAP_WARN` nats per measured value. ``docs/getting-started.md`` has the measured gaps.

Message passing's log-likelihood is the sum of the subsystems' own (each local filter's predictive
density of its measurements given its incoming messages: :func:`~twinfer.infer.graph._run.estimate`'s
``loglik``); the banded filter's is the joint predictive density of all measurements (the matrix
determinant lemma, ``docs/design-banded.md``). Both are sums over the same steps of
``log N(y_k; y_k^-, S_k)``, so their difference per measurement is a mean log predictive density ratio
(Gneiting & Raftery, "Strictly proper scoring rules, prediction, and estimation", JASA 102(477), 2007,
the logarithmic score): positive when message passing predicts the record worse.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from twinfer.infer.filters import FilterConsistencyWarning
from twinfer.infer.graph._banded import _jacobian, _reach, banded_estimate
from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._messages import Schedule
from twinfer.infer.graph._numbers import _columns
from twinfer.infer.graph._run import run

GAP_WARN = 1.1e-3
"""Nats per measured value by which message passing's log-likelihood may fall short of the banded
filter's on the check's window before :func:`check_messages` warns.

Chosen from the gaps measured at the default window (2,000 steps, the second half compared; probabilistic
messages, bandwidth 1; ``docs/getting-started.md``): on issue #20's Duffing and Van der Pol chains
(noise seeds 2, 5, 7, 11, 13) 0.0031-0.0162 and 0.0013-0.0050, and on a six-mass chain with Duffing
springs at both cuts 0.0029-0.0049, where message passing under-covers; on
chain4 at the paper's settings (seed 123) 0.0009 (probabilistic) and 0.0008 (deterministic), and at seeds
1-4 at most 0.0010. The margin is thin: 1.2x below the smallest gap that must warn, 1.2x above the
paper's chain4 record.
"""

CHECK_STEPS = 2000
"""Rows of the record the check runs both estimators on (the first ``min(T, CHECK_STEPS)`` steps)."""


class MessageFitWarning(FilterConsistencyWarning):
    """Message passing explains the record worse than the banded filter on the same graph and rows."""


class MessageCheck(NamedTuple):
    """What :func:`check_messages` measured on its window.

    Attributes:
        steps: the window's length N: the record's first N steps (rows 0..N).
        burn_in: the steps at its start left out of the comparison (``N // 2``).
        measurements: the observed values compared (rows ``burn_in + 1 .. N``).
        loglik_messages: message passing's log-likelihood of those values.
        loglik_banded: the banded filter's of the same values.
        bandwidth: the banded filter's bandwidth.
        threshold: the gap per measured value above which the check warns.
        seconds: wall time of the check (both estimators, compilation included).

    """

    steps: int
    burn_in: int
    measurements: int
    loglik_messages: float
    loglik_banded: float
    bandwidth: int
    threshold: float
    seconds: float

    @property
    def gap(self) -> float:
        """``(loglik_banded - loglik_messages) / measurements``: nats per measured value (> 0: worse)."""
        return (self.loglik_banded - self.loglik_messages) / max(self.measurements, 1)

    @property
    def fits_worse(self) -> bool:
        """Whether message passing falls short by more than ``threshold`` per measured value."""
        return bool(self.gap > self.threshold)


def smallest_bandwidth(graph: Graph, dataset: Any = None, *, key: Any = None) -> int:
    """The smallest bandwidth :func:`~twinfer.infer.graph._banded.banded_estimate` accepts for ``graph``.

    Every output must read subsystems at most L apart (the update keeps the band): L is the widest
    span of subsystems one output reads, found, as the banded filter finds it, from the output's
    Jacobian at a draw from the prior, and at least 1. A chain cut into segments of two or more masses
    gives 1 (an accelerometer at a cut reads its neighbour's position through the cut spring); one mass
    per subsystem gives 2.

    Args:
        graph: subsystems joined by interfaces, in the order of the chain of subsystems.
        dataset: the record whose first input row the draw uses (default: zero inputs).
        key: a PRNG key for the draw (default ``jax.random.key(0)``, the banded filter's).

    Returns:
        The bandwidth, between 1 and ``max(1, p - 1)`` for p subsystems.

    Raises:
        ValueError: for a graph coupled by a field (the banded filter needs interfaces).

    """
    subs, _ = graph.flatten()
    if graph.fields:
        raise ValueError(
            f"smallest_bandwidth: graph {graph.name!r} is coupled by a field; expected interfaces."
        )
    mono = graph.monolithic()
    slices = list(graph.state_slices().values())
    p = len(slices)
    outputs = np.asarray(mono.outputs, dtype=int)
    if p < 2 or outputs.size == 0:
        return 1
    owner = np.zeros(slices[-1][1], dtype=int)
    for i, (a, c) in enumerate(slices):
        owner[a:c] = i
    x0 = jnp.asarray(mono.x0, dtype=jnp.float64)
    key = jax.random.key(0) if key is None else key
    draw = x0 + jnp.sqrt(jnp.diag(jnp.asarray(mono.P0, dtype=jnp.float64))) * jax.random.normal(key, x0.shape)
    inputs = jnp.asarray(mono.inputs, dtype=int)
    row = np.zeros(0) if dataset is None or dataset.inputs is None else np.asarray(dataset.inputs)[0]
    u = _columns(jnp.asarray(row, dtype=jnp.float64), inputs)
    blocks = _reach(_jacobian(mono.output), draw, u, mono.params, owner, p)
    spans = [int(np.ptp(np.flatnonzero(r))) for r in blocks if r.any()]
    return int(min(max([1, *spans]), p - 1))


def _window(dataset: Any, steps: int) -> Any:
    """The record's first ``steps`` steps (rows 0..steps), or the whole record if it is shorter."""
    times = np.asarray(dataset.times)
    if steps >= times.size - 1:
        return dataset
    return dataset.window(None, float(times[steps]))


def default_bandwidth(graph: Graph, dataset: Any = None) -> int:
    """The banded filter's bandwidth for a distributed estimate without settings.

    One wider than the smallest the graph allows (:func:`smallest_bandwidth`), at least 2, at most
    ``p - 1`` for p subsystems.

    The smallest bandwidth keeps each subsystem's correlation with its nearest neighbours only. On issue
    #20's chains (four subsystems, a force recorded with load-cell noise) that covered 0.80 and 0.87 of the
    states where the central filter covered 0.92 and 0.91 (seed 5); at bandwidth 2 with the unknowns
    global the pooled coverage over five seeds was 0.935 / 0.938 against the central 0.946 / 0.940
    (``tests/test_graph_from_model.py::test_issue_20_acceptance_chain``). A two-subsystem graph is then
    the central filter itself.
    """
    p = len(graph.state_slices())
    return max(1, min(max(smallest_bandwidth(graph, dataset) + 1, 2), p - 1))


def check_messages(
    graph: Graph,
    dataset: Any,
    schedule: Schedule | str = "jacobi",
    *,
    steps: int = CHECK_STEPS,
    threshold: float = GAP_WARN,
    bandwidth: int | None = None,
) -> MessageCheck:
    """Compare message passing on ``graph`` with the banded filter on the record's first ``steps`` steps.

    Both run on rows ``0..N`` of the record, ``N = min(T, steps)``, with the graph's own models,
    discretisation and noise levels: message passing by :func:`~twinfer.infer.graph._run.run` with
    ``schedule``, the banded filter by :func:`~twinfer.infer.graph._banded.banded_estimate` at ``bandwidth``
    (default :func:`smallest_bandwidth`, local unknowns). Their log-likelihoods are compared over steps
    ``N // 2 + 1 .. N``: the first half is a burn-in, where both still forget the prior (an unknown
    learnt from a wide prior: on chain4 at the paper's settings message passing trails the central
    filter by 0.03 nats per value over its first 0.5 s, by 0.001 over the next 1.5 s), which says how
    each handles the prior, not whether its bands are calibrated. The banded filter runs twice on the window
    (once with the measurements after the burn-in masked: its log-likelihood of the burn-in alone), one
    compilation; message passing once. The cost, whatever the record's length, is that of both
    estimators on ``N`` steps (:attr:`MessageCheck.seconds`; measured in ``docs/getting-started.md``).
    Call it after :func:`~twinfer.infer.graph._run.estimate` on a graph whose calibration is not known
    (``twinfer estimate`` does, for ``route = "messages"``).

    Args:
        graph: subsystems joined by interfaces (e.g. from :meth:`~twinfer.infer.graph.Graph.from_model`).
        dataset: the record (:class:`twinfer.data.Dataset`), as for :func:`twinfer.infer.estimate`.
        schedule: message passing's schedule (``"jacobi"``, ``"gauss_seidel"``, ``"ab2"``).
        steps: the window's length in steps (>= 4, so that steps remain after the burn-in).
        threshold: the gap in nats per measured value above which it warns (>= 0).
        bandwidth: the banded filter's (>= 1), or None for the smallest the graph allows.

    Returns:
        A :class:`MessageCheck` (both log-likelihoods, the gap per measured value, the cost).

    Raises:
        ValueError: for ``steps`` < 4 or a record of fewer than 4 steps, a negative or non-finite
            ``threshold``, a graph coupled by a field, and as
            :func:`~twinfer.infer.graph._banded.banded_estimate` and :func:`~twinfer.infer.graph._run.run`.

    Warns:
        MessageFitWarning: when the gap exceeds ``threshold``, naming both log-likelihoods and the gap.

    References:
        Gneiting & Raftery (2007), the logarithmic score: the module docstring.

    """
    if int(steps) != steps or steps < 4:
        raise ValueError(f"check_messages steps: expected an integer >= 4; received {steps!r}.")
    if not (np.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"check_messages threshold: expected a finite number >= 0; received {threshold!r}.")
    start = time.perf_counter()
    window = _window(dataset, int(steps))
    n = len(window.times) - 1
    if n < 4:
        raise ValueError(
            f"check_messages dataset: expected a record of at least 4 steps (a burn-in and a window); "
            f"received {n}."
        )
    burn = n // 2
    chosen = smallest_bandwidth(graph, window) if bandwidth is None else int(bandwidth)
    mask = np.asarray(window.mask)
    head = mask.copy()
    head[burn + 1 :] = False  # the burn-in's measurements only: the same shapes, one compilation
    with warnings.catch_warnings():  # the reference runs: only their log-likelihoods are read here
        warnings.simplefilter("ignore", FilterConsistencyWarning)
        banded = float(banded_estimate(graph, window, chosen).loglik)
        banded_burn = float(banded_estimate(graph, window.with_mask(head), chosen).loglik)
    messages = run(graph, window, schedule)
    loglik_messages = float(sum(float(np.sum(np.asarray(r.step_logliks)[burn:])) for r in messages.values()))
    check = MessageCheck(
        steps=n,
        burn_in=burn,
        measurements=int(mask[burn + 1 :].sum()),
        loglik_messages=loglik_messages,
        loglik_banded=banded - banded_burn,
        bandwidth=chosen,
        threshold=float(threshold),
        seconds=time.perf_counter() - start,
    )
    if check.fits_worse:
        warnings.warn(
            f"message passing on graph {graph.name!r} fits the record worse than the banded filter on the "
            f"same graph: over steps {burn + 1}..{n} of the record ({check.measurements} measured values, "
            f"after a burn-in of {burn} steps) its log-likelihood is {check.loglik_messages:.6g} against "
            f"the banded filter's {check.loglik_banded:.6g} (bandwidth {chosen}), {check.gap:.3g} nats per "
            f"measured value worse (warning above {check.threshold:g}). Its bands leave out the "
            "correlation of each subsystem's errors with its neighbours' and are likely too narrow; the "
            'banded filter keeps it: kind = "distributed" without route = "messages" in a spec, or '
            "twinfer.infer.graph._banded.banded_estimate.",
            MessageFitWarning,
            stacklevel=2,
        )
    return check
