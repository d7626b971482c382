"""Combination: algebraic loops (detected, solved, unsolvable), PSD family, local events and back-solve."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from twinfer.learn import MLP
from twinfer.models import AbstractModel, BouncingBall2D, Combination, CombinedModel, System, psd
from twinfer.sim import simulate_events


class _Affine(AbstractModel):
    """gamma = A upsilon + c: a static map with feed-through."""

    params: dict

    def __init__(self, a, c):
        a = jnp.asarray(a, dtype=float)
        self.params = {"A": jnp.ravel(a), "c": jnp.asarray(c, dtype=float)}

    state_names = property(lambda self: ())
    input_names = property(lambda self: tuple(f"u{i}" for i in range(self.params["c"].shape[0])))
    output_names = property(lambda self: tuple(f"y{i}" for i in range(self.params["c"].shape[0])))

    def vector_field(self, t, x, u, params):
        return jnp.zeros(0)

    def output(self, t, x, u, params):
        n = params["c"].shape[0]
        return params["A"].reshape(n, n) @ u + params["c"]


RNG = np.random.default_rng(3)
A, B = RNG.normal(size=(2, 2)) * 0.5, RNG.normal(size=(2, 2)) * 0.5
W = {name: RNG.normal(size=(2, 2)) * 0.5 for name in ("W_az", "W_ab", "W_ba", "W_bz", "W_za", "W_zb", "W_zz")}


def test_generic_loop_detected_and_solved_against_hand_solution():
    """Claim: a cyclic a<->b connection is one strongly connected component; Newton gives the exact
    solution of the hand-solved linear loop (I - W_ab B W_ba A) ua = (W_az + W_ab B W_bz) uz."""
    sa, sb = System(_Affine(A, np.zeros(2))), System(_Affine(B, np.zeros(2)))
    combo = Combination(sa, sb, 2, 2, {n: "frozen" for n in W}, W)
    assert combo.loops == (("ua", "ga", "ub", "gb"),)
    uz = jnp.array([0.7, -1.3])
    out = jax.jit(lambda v: combo.evaluate(0.0, v, combo.initial_params()))(uz)
    lhs = np.eye(2) - W["W_ab"] @ B @ W["W_ba"] @ A
    ua = np.linalg.solve(lhs, (W["W_az"] + W["W_ab"] @ B @ W["W_bz"]) @ np.asarray(uz))
    ga = A @ ua
    gb = B @ (W["W_ba"] @ ga + W["W_bz"] @ uz)
    gz = W["W_za"] @ ga + W["W_zb"] @ gb + W["W_zz"] @ uz
    np.testing.assert_allclose(np.asarray(out["ua"]), ua, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(out["gz"]), gz, rtol=1e-10)


def test_loop_without_solution_raises_naming_the_loop():
    """Claim: upsilon_a = gamma_a = upsilon_a + 1 has no solution; the error names (upsilon_a, gamma_a)."""
    sa, sb = System(_Affine(np.eye(2), np.ones(2))), System(_Affine(B, np.zeros(2)))
    combo = Combination(sa, sb, 2, 2, {"W_aa": "identity", "W_za": "identity"})
    assert combo.loops == (("ua", "ga"),)
    with pytest.raises(Exception, match=r"algebraic loop \(upsilon_a, gamma_a\) has no solution"):
        combo.evaluate(0.0, jnp.ones(2), combo.initial_params())


@pytest.mark.parametrize("order", ["a", "b"])
def test_psd_is_loop_free_and_matches_substitution(order):
    """Claim: PSDa/PSDb evaluate in the BLT orders of eqs. 15/19 and equal the forward substitution."""
    sa, sb = System(_Affine(A, [0.1, -0.2])), System(_Affine(B, [0.3, 0.0]))
    combo = psd(sa, sb, "PSD", order, key=jax.random.key(0))
    assert combo.loops == ()
    first, second = ("a", "b") if order == "a" else ("b", "a")
    assert combo.order == ((f"u{first}",), (f"g{first}",), (f"u{second}",), (f"g{second}",))
    params = combo.initial_params()
    params = {
        k: v + (0.3 * jnp.arange(v.size) / v.size if k.startswith("W") else 0) for k, v in params.items()
    }
    m = {
        n: np.asarray(combo.matrix(n, params))
        for n in ("W_az", "W_ab", "W_ba", "W_bz", "W_za", "W_zb", "W_zz")
    }
    uz = np.array([0.4, 0.9])
    f = {"a": lambda v: A @ v + [0.1, -0.2], "b": lambda v: B @ v + [0.3, 0.0]}
    u1 = m[f"W_{first}z"] @ uz
    g1 = f[first](u1)
    u2 = m[f"W_{second}{first}"] @ g1 + m[f"W_{second}z"] @ uz
    g2 = f[second](u2)
    gz = m[f"W_z{first}"] @ g1 + m[f"W_z{second}"] @ g2 + m["W_zz"] @ uz
    np.testing.assert_allclose(np.asarray(combo.evaluate(0.0, jnp.asarray(uz), params)["gz"]), gz, rtol=1e-12)


def test_table2_initialisation_and_parameter_counts():
    """Claim: trainable blocks and Î/0̂ initialisation follow Tab. 2; totals are those of specs 3.3."""
    fpm = System(BouncingBall2D(mu=0.0), "vector_field", trainable=False)
    mlm = MLP(
        (4, 8, 2),
        ("tanh", "tanh"),
        key=jax.random.key(1),
        layout=[("in", 0), ("net", 0), ("in", 2), ("net", 1)],
    )
    expected = {
        "PSD": ({"W_az", "W_ba", "W_za"}, {"W_bz", "W_zb", "W_zz"}, 154),
        "PS": ({"W_az", "W_ba", "W_za"}, {"W_bz", "W_zb"}, 138),
        "PD": ({"W_az", "W_za"}, {"W_bz", "W_zb", "W_zz"}, 138),
        "P": ({"W_az", "W_za"}, {"W_bz", "W_zb"}, 122),
        "SD": ({"W_az", "W_ba", "W_zb"}, {"W_zz"}, 122),
        "S": ({"W_az", "W_ba", "W_zb"}, set(), 106),
    }
    for topology, (ident, zero, total) in expected.items():
        combo = psd(fpm, System(mlm), topology, key=jax.random.key(2))
        params = combo.initial_params()
        groups = combo.trainable_groups()
        assert {g for g in groups if g.startswith("W")} == ident | zero
        assert sum(int(np.size(params[g])) for g in groups) == total
        for name in ident | zero:
            w = np.asarray(combo.matrix(name, params))
            target = np.eye(4) if name in ident else np.zeros((4, 4))
            assert np.max(np.abs(w - target)) <= 1e-4
            assert np.all(np.diag(w) == 1.0) if name in ident else np.any(w != 0)


def test_event_in_submodel_needs_the_back_solve():
    """Claim: a ball living in scaled, permuted local coordinates (upsilon_a = S x) bounces correctly
    only through the local-to-global back-solve: x(t) = S^-1 x_ball(t), events included."""
    perm = np.array([[0, 0, 1, 0], [0, 0, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0]], dtype=float)
    s = np.diag([2.0, 2.0, 0.5, 0.5]) @ perm
    ball = BouncingBall2D(mu=0.15)
    sa, sb = System(ball, "vector_field", trainable=False), System(_Affine(np.eye(4), np.zeros(4)))
    combo = Combination(
        sa, sb, 4, 4, {"W_az": "frozen", "W_za": "frozen"}, {"W_az": s, "W_za": np.linalg.inv(s)}
    )
    cm = CombinedModel(combo, ("q1", "q2", "q3", "q4"), events="a")
    ts = np.round(np.arange(0.0, 1.0 + 1e-9, 0.01), 10)
    x_ball0 = np.array([-0.5, 2.0, 0.5, 2.0])
    ref = simulate_events(ball, ts, x_ball0)
    got = simulate_events(cm, ts, np.linalg.solve(s, x_ball0))
    assert int(got.n_events) == int(ref.n_events) == 2
    np.testing.assert_allclose(np.asarray(got.event_times[:2]), np.asarray(ref.event_times[:2]), atol=1e-8)
    np.testing.assert_allclose(np.asarray(got.states) @ s.T, np.asarray(ref.states), atol=1e-7)
    # applying the local update to the global state directly (no back-solve) is wrong here
    x_minus = np.linalg.solve(s, np.array([0.3, -1.0, -0.9, -3.0]))
    which = jnp.array([False, False, True, False])
    naive, _ = ball.event_update(0.0, jnp.asarray(x_minus), jnp.zeros(1), jnp.zeros(0), ball.params, which)
    right, _ = cm.event_update(0.0, jnp.asarray(x_minus), jnp.zeros(1), jnp.zeros(0), cm.params, which)
    np.testing.assert_allclose(np.asarray(right), np.linalg.solve(s, [0.3, -1.0, -0.9, 2.7]), atol=1e-10)
    assert np.max(np.abs(np.asarray(naive) - np.asarray(right))) > 0.5
