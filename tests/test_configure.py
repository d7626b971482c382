"""No side effects at import; ``twinfer.configure``; the lazy float64 of the entry points; one error base.

The processes started here run without ``JAX_ENABLE_X64`` and without ``twinfer.configure()`` (the test
suite's own process has called it in ``conftest.py``), so they see what a library user sees.
"""

import ast
import builtins
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import twinfer
from twinfer import errors
from twinfer.checkpoint import CheckpointError
from twinfer.experiments import ConfigError
from twinfer.infer.filters import DivergenceError, FilterConsistencyWarning, ParameterBoundWarning
from twinfer.infer.graph._check import MessageFitWarning
from twinfer.programs import ProgramCacheWarning
from twinfer.report._run import RunFolderError
from twinfer.sim import StepSizeError, StepSizeWarning
from twinfer.spec import SpecError, _Problems

SRC = Path(twinfer.__file__).parent


def _fresh(script: str, **env: str) -> dict:
    """Run ``script`` in a fresh Python without JAX_ENABLE_X64; the JSON it prints last."""
    base = {k: v for k, v in os.environ.items() if k not in ("JAX_ENABLE_X64", "TWINFER_LAPACK_BATCHED")}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=base | env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


_SETTINGS = """
import json
import jax, jax.numpy as jnp
import twinfer
from twinfer.linalg import batch_safe_lowerings_applied

def lapack():  # does a batched Cholesky lower to jaxlib's LAPACK kernel?
    batch = jnp.broadcast_to(jnp.eye(3), (4, 3, 3))
    return "lapack_" in jax.jit(lambda a: jnp.linalg.cholesky(a)).lower(batch).as_text()

seen = {"import": [jax.config.jax_enable_x64, batch_safe_lowerings_applied()]}
seen["import_lapack"] = lapack()
twinfer.configure()
seen["configure"] = [jax.config.jax_enable_x64, batch_safe_lowerings_applied()]
seen["configure_lapack"] = lapack()
twinfer.configure()
seen["again"] = [jax.config.jax_enable_x64, batch_safe_lowerings_applied()]
twinfer.configure(safe_cpu_linalg=False)
seen["off"] = [jax.config.jax_enable_x64, batch_safe_lowerings_applied(), lapack()]
twinfer.configure(safe_cpu_linalg=True)
seen["on"] = [batch_safe_lowerings_applied(), lapack()]
print(json.dumps(seen))
"""


def test_import_changes_no_jax_setting_and_configure_applies_both_idempotently():
    """Claim: after ``import twinfer`` float64 is off and JAX's batched LAPACK lowerings are in place; after
    ``configure()`` float64 is on and a batched Cholesky no longer lowers to LAPACK (the batch-safe
    kernel); a second call changes nothing; ``safe_cpu_linalg=False`` restores jaxlib's lowering and
    True applies the batch-safe one again."""
    seen = _fresh(_SETTINGS)
    assert seen["import"] == [False, False] and seen["import_lapack"] is True
    assert seen["configure"] == [True, True] and seen["configure_lapack"] is False
    assert seen["again"] == [True, True]
    assert seen["off"] == [True, False, True]
    assert seen["on"] == [True, False]


def test_auto_keeps_jaxlib_lowerings_where_the_environment_asks():
    """Claim: ``safe_cpu_linalg="auto"`` honours ``TWINFER_LAPACK_BATCHED=1`` (jaxlib's lowerings kept);
    True applies the batch-safe ones regardless."""
    script = """
    import json, jax, twinfer
    from twinfer.linalg import batch_safe_lowerings_applied
    twinfer.configure()
    auto = batch_safe_lowerings_applied()
    twinfer.configure(safe_cpu_linalg=True)
    print(json.dumps([jax.config.jax_enable_x64, auto, batch_safe_lowerings_applied()]))
    """
    assert _fresh(script, TWINFER_LAPACK_BATCHED="1") == [True, False, True]


_LINEAR = """
import json
import numpy as np
import jax
import twinfer
from twinfer.data import Dataset
from twinfer.infer.filters import run_filter
from twinfer.models import AbstractModel


class Oscillator(AbstractModel):
    '''A user's linear model: a forced mass-spring-damper, its parameters plain Python floats.'''

    params: dict

    def __init__(self):
        self.params = {"k": 39.7, "c": 0.83}

    state_names = property(lambda self: ("x", "v"))
    input_names = property(lambda self: ("f",))
    output_names = property(lambda self: ("x",))

    def vector_field(self, t, x, u, params):
        return jax.numpy.stack([x[1], u[0] - params["k"] * x[0] - params["c"] * x[1]])

    def output(self, t, x, u, params):
        return x[:1]


rng = np.random.default_rng(7)
t = np.arange(200) * 0.01
u = np.sin(3.1 * t)[:, None]
y = 0.02 * np.sin(3.1 * t - 0.4)[:, None] + 1e-3 * rng.normal(size=(200, 1))
data = Dataset(times=t, observations=y, inputs=u, input_names=("f",), output_names=("x",))
before = jax.config.jax_enable_x64
est = run_filter(Oscillator(), data, noise_sd=1e-3, state_sd=0.05, process_sd=1e-3)
means = np.asarray(est.means)
print(json.dumps({"before": before, "after": jax.config.jax_enable_x64, "dtype": str(means.dtype),
                  "means": means[::20].tolist(), "loglik": float(est.loglik)}))
"""


def test_run_filter_without_configure_runs_in_float64_as_the_configured_process():
    """Claim: in a fresh process that never calls ``configure()``, the first ``run_filter`` switches float64
    on (it was off) and returns float64 estimates equal, to the last digit, to those of a process run with
    float64 on from the start."""
    lazy = _fresh(_LINEAR)
    eager = _fresh(_LINEAR, JAX_ENABLE_X64="1")
    assert lazy["before"] is False and lazy["after"] is True and lazy["dtype"] == "float64"
    assert eager["before"] is True
    assert lazy["means"] == eager["means"] and lazy["loglik"] == eager["loglik"]


def test_the_first_model_switches_float64_on_and_a_float32_array_is_refused_by_name():
    """Claim: a user's script that imports twinfer and builds a model first (USER-STORIES 1) gets float64
    parameters, since the first model applies configure(); an array the script made in float32 before
    that is refused by the entry point by name instead of being used with its rounded digits."""
    script = """
    import json, numpy as np, jax, jax.numpy as jnp, twinfer
    from twinfer.data import Dataset
    from twinfer.models import Chain
    early = jnp.asarray([0.1, 0.0])  # made while JAX is still in float32
    chain = Chain([1.3], [40.1], [0.7], forced_dofs=[1], outputs=("x1",))
    data = Dataset(times=np.arange(5) * 0.01, observations=np.zeros((5, 1)), inputs=np.zeros((5, 1)),
                   input_names=("f1",), output_names=("x1",))
    est = twinfer.estimate(chain, data, noise_sd=1e-3)
    dtypes = [str(jax.tree_util.tree_leaves(chain.params)[0].dtype), str(np.asarray(est.means).dtype)]
    try:
        twinfer.estimate(chain, data, noise_sd=1e-3, x0=early)
    except twinfer.TwinferError as exc:
        print(json.dumps([*dtypes, type(exc).__name__, isinstance(exc, ValueError), str(exc)]))
    except ValueError as exc:
        print(json.dumps([*dtypes, type(exc).__name__, True, str(exc)]))
    """
    params, means, name, is_value_error, message = _fresh(script)
    assert (params, means) == ("float64", "float64")
    assert is_value_error and "x0" in message and "float32" in message


def test_configure_names_a_bad_setting():
    """Claim: a setting outside its choices is a TwinferValueError naming the field and the value."""
    with pytest.raises(errors.TwinferValueError, match=r"configure safe_cpu_linalg: .*received 'yes'"):
        twinfer.configure(safe_cpu_linalg="yes")  # type: ignore[arg-type]
    with pytest.raises(errors.TwinferValueError, match=r"configure x64: .*received 1"):
        twinfer.configure(x64=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("error", "builtin", "base"),
    [
        (RunFolderError, ValueError, errors.TwinferValueError),
        (SpecError, ValueError, errors.TwinferValueError),
        (_Problems, ValueError, errors.TwinferValueError),
        (StepSizeError, ValueError, errors.TwinferValueError),
        (ConfigError, ValueError, errors.TwinferValueError),
        (CheckpointError, RuntimeError, errors.TwinferRuntimeError),
        (DivergenceError, RuntimeError, errors.TwinferRuntimeError),
        (DivergenceError, ValueError, errors.TwinferRuntimeError),
    ],
)
def test_every_error_derives_from_twinfer_error_and_keeps_its_builtin(error, builtin, base):
    """Claim: each of twinfer's errors is caught by ``except TwinferError``, by its family's base, and by
    the built-in it derived from before (a DivergenceError stays a ValueError)."""
    assert issubclass(error, twinfer.TwinferError) and issubclass(error, base) and issubclass(error, builtin)


@pytest.mark.parametrize(
    "warning",
    [
        StepSizeWarning,
        ProgramCacheWarning,
        FilterConsistencyWarning,
        ParameterBoundWarning,
        MessageFitWarning,
    ],
)
def test_every_warning_derives_from_twinfer_warning(warning):
    """Claim: turning TwinferWarning into an error turns each of twinfer's warnings into one."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", errors.TwinferWarning)
        with pytest.raises(warning):
            warnings.warn("x", warning, stacklevel=1)


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(), str(path))) for path in sorted(SRC.rglob("*.py"))]


def test_every_exception_class_in_src_derives_from_a_twinfer_base():
    """Claim: no class in src derives from built-in exceptions or warnings alone, except the bases in
    ``twinfer.errors`` (a new error class must pick TwinferValueError, TwinferRuntimeError or
    TwinferWarning, beside its built-in where it keeps one)."""
    exceptions = {
        n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)
    }
    direct = []
    for path, tree in _modules():
        if path.name == "errors.py" and path.parent == SRC:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
                if bases & exceptions and not bases - exceptions:  # built-in bases only
                    direct.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name}")
    assert direct == []


def test_errors_module_imports_nothing_from_twinfer():
    """Claim: ``twinfer.errors`` sits below every layer: it imports no twinfer module."""
    tree = ast.parse((SRC / "errors.py").read_text())
    imported = [
        alias.name if isinstance(node, ast.Import) else (node.module or "")
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in getattr(node, "names", [])
    ]
    assert not [m for m in imported if m.split(".")[0] == "twinfer"], imported


def test_src_has_no_bare_assert():
    """Claim: no ``assert`` statement in src (they vanish under ``python -O``): checks raise named errors."""
    found = [
        f"{path.relative_to(SRC)}:{node.lineno}"
        for path, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Assert)
    ]
    assert found == []
