"""twinfer.programs: compiled programs kept on disk whole, loaded only under their own key."""

import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from twinfer.programs import KEEP, load_or_compile, program_key


def _program(a, b):
    return jnp.linalg.eigh(a @ a.T + jnp.eye(a.shape[0]))[0] * b


def test_a_kept_program_is_loaded_under_its_key_and_signature_only(tmp_path):
    a, b = jnp.arange(9.0).reshape(3, 3) / 7.0, jnp.asarray(2.0)
    jitted = jax.jit(_program)
    first, loaded = load_or_compile(jitted, a, b, key={"case": "t", "n": 1}, folder=tmp_path)
    assert not loaded and len(list(tmp_path.glob("*.jaxexe"))) == 1
    again, loaded = load_or_compile(jitted, a, b, key={"case": "t", "n": 1}, folder=tmp_path)
    assert loaded
    np.testing.assert_array_equal(again(a, 3.0 * b), first(a, 3.0 * b))
    assert not load_or_compile(jitted, a, b, key={"case": "t", "n": 2}, folder=tmp_path)[1]  # another key
    assert not load_or_compile(jitted, a[:2, :2], b, key={"case": "t", "n": 1}, folder=tmp_path)[1]  # shape
    assert program_key("k", (a, b)) != program_key("k", (a, b.astype(jnp.int32)))  # dtype
    assert len(list(tmp_path.glob("*.jaxexe"))) == 3 <= KEEP
    for path in tmp_path.glob("*.jaxexe"):  # a damaged file is compiled anew and replaced
        path.write_bytes(b"not a program")
    fresh, loaded = load_or_compile(jitted, a, b, key={"case": "t", "n": 1}, folder=tmp_path)
    assert not loaded
    np.testing.assert_array_equal(fresh(a, b), first(a, b))
    assert load_or_compile(jitted, a, b, key={"case": "t", "n": 1}, folder=tmp_path)[1]


def test_a_program_with_a_host_callback_is_never_kept(tmp_path):
    checked = jax.jit(lambda x: eqx.error_if(x, x < 0, "negative"))
    compiled, loaded = load_or_compile(checked, jnp.ones(3), key="checked", folder=tmp_path)
    assert not loaded and not list(tmp_path.glob("*.jaxexe"))
    np.testing.assert_array_equal(compiled(jnp.ones(3)), np.ones(3))


@pytest.mark.timeout(180)
def test_a_fresh_process_runs_a_loaded_lapack_program_like_the_one_that_compiled_it(tmp_path):
    """The loading process never lowers a factorisation itself, so LAPACK must be bound before the
    load (unbound, ``twinfer run chain4`` crashed with a segmentation fault)."""
    script = textwrap.dedent(
        f"""
        import jax, jax.numpy as jnp, numpy as np
        import twinfer
        from twinfer.programs import load_or_compile
        f = jax.jit(lambda a: jnp.linalg.eigh(a @ a.T + jnp.eye(4))[0])
        a = jnp.arange(16.0).reshape(4, 4) / 9.0
        compiled, loaded = load_or_compile(f, a, key="eigh", folder={str(tmp_path)!r})
        print(int(loaded), repr(np.asarray(compiled(a)).tolist()))
        """
    )
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr[-2000:] for r in runs]
    (saved, first), (loaded, second) = (r.stdout.split(maxsplit=1) for r in runs)
    assert (saved, loaded) == ("0", "1")
    assert first == second


def test_a_kept_program_that_cannot_run_is_dropped_and_compiled_anew(tmp_path, monkeypatch):
    """A kept program that loads but fails when called (seen: "NOT_FOUND: Function compare_bitcast_fusion
    not found" from a program kept by another process) is removed, compiled again and run: the run's
    numbers, not an error."""
    from twinfer import programs

    jitted = jax.jit(lambda x: jnp.cumsum(x) * 2.0)
    x = jnp.arange(4.0)

    def broken(*args):
        raise jax.errors.JaxRuntimeError("NOT_FOUND: Function compare_bitcast_fusion not found")

    monkeypatch.setattr(programs, "load", lambda *a, **k: broken)
    job = programs.Job(jitted, (x,), key="broken", runs=[(x,)])
    with programs.compiling([job], folder=tmp_path) as (future,):
        exe, (out,), _ = future.result()
    np.testing.assert_array_equal(np.asarray(out), np.asarray(jnp.cumsum(x) * 2.0))
    assert exe is not broken
