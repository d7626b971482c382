"""Tests of twinfer.data: validation of every field, derived properties, slicing, files and CSV."""

from __future__ import annotations

import copy
import json
import pickle
import re

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from twinfer.data import Dataset, from_csv


def make(n: int = 11, **kwargs) -> Dataset:
    t = np.linspace(0.0, 1.0, n)
    args = dict(
        inputs=np.sin(t)[:, None],
        truth_states=np.stack([t, t**2, np.cos(t)], axis=1),
        truth_params={"k4": 5e4},
        output_names=("a1", "a4"),
        metadata={"seed": 1, "source": "test"},
    )
    args.update(kwargs)
    return Dataset(t, np.stack([t, 2 * t], axis=1), **args)


def assert_same(a: Dataset, b: Dataset) -> None:
    da, db = a.to_dict(), b.to_dict()
    assert da.keys() == db.keys()
    for key in da:
        if isinstance(da[key], np.ndarray):
            np.testing.assert_array_equal(da[key], db[key])
            assert da[key].dtype == db[key].dtype
        else:
            assert da[key] == db[key], key


# -- construction ----------------------------------------------------------------------------------
def test_defaults_and_properties():
    ds = Dataset([0.0, 0.5, 1.0], np.zeros((3, 2)))
    assert ds.n_steps == 3
    assert ds.dt == 0.5
    assert ds.mask.all() and ds.mask.dtype == np.bool_
    assert ds.output_names == ("y1", "y2")
    assert ds.input_names == () and ds.inputs is None
    assert ds.state_names == () and ds.truth_states is None
    assert ds.truth_params == {} and ds.metadata == {}
    assert ds.times.dtype == np.float64
    assert "samples=3" in repr(ds)


def test_default_names():
    ds = make(output_names=None)
    assert ds.input_names == ("u1",)
    assert ds.output_names == ("y1", "y2")
    assert ds.state_names == ("x1", "x2", "x3")


def test_masked_entries_become_nan_and_arrays_are_immutable():
    y = np.array([[1.0, np.nan], [2.0, 3.0]])
    mask = np.array([[True, False], [True, True]])
    ds = Dataset([0.0, 1.0], y, mask=mask)
    assert np.isnan(ds.observations[0, 1])
    y2 = np.array([[1.0, 99.0], [2.0, 3.0]])
    assert np.isnan(Dataset([0.0, 1.0], y2, mask=mask).observations[0, 1])
    y[1, 0] = 7.0  # the caller's array is copied
    assert ds.observations[1, 0] == 2.0
    with pytest.raises(ValueError, match="read-only"):
        ds.observations[1, 0] = 5.0
    with pytest.raises(AttributeError, match="immutable"):
        ds.times = np.zeros(2)  # type: ignore[misc]
    meta = ds.metadata
    meta["x"] = 1
    assert ds.metadata == {}


def test_accepts_integer_and_jax_float64():
    ds = Dataset(np.arange(4), jnp.ones((4, 1), dtype=jnp.float64))
    assert ds.times.dtype == np.float64 and ds.observations.dtype == np.float64


# -- every validation error ------------------------------------------------------------------------
T3 = np.array([0.0, 1.0, 2.0])
Y3 = np.zeros((3, 2))


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        (dict(times=np.array([0.0, 1.0, 1.0]), observations=Y3),
         r"Dataset.times: expected strictly increasing; received times\[2\]=1.0 <= times\[1\]=1.0"),
        (dict(times=np.array([0.0, np.nan, 2.0]), observations=Y3),
         r"Dataset.times: expected finite values; received nan at times\[1\]"),
        (dict(times=np.zeros((3, 1)), observations=Y3),
         r"Dataset.times: expected a 1-D array; received shape \(3, 1\)"),
        (dict(times=np.array([]), observations=np.zeros((0, 2))),
         r"Dataset.times: expected at least one time step"),
        (dict(times=T3.astype(np.float32), observations=Y3),
         r"Dataset.times: expected a float64 array; received dtype float32"),
        (dict(times=T3, observations=Y3.astype(np.float32)),
         r"Dataset.observations: expected a float64 array; received dtype float32; convert"),
        (dict(times=T3, observations=Y3, inputs=np.zeros((3, 1), np.float32)),
         r"Dataset.inputs: expected a float64 array; received dtype float32"),
        (dict(times=T3, observations=Y3.astype(complex)),
         r"Dataset.observations: expected a real float64 array; received dtype complex128"),
        (dict(times=T3, observations=np.zeros(3)),
         r"Dataset.observations: expected a 2-D array \(reshape a single channel"),
        (dict(times=T3, observations=np.zeros((2, 2))),
         r"Dataset.observations: expected shape \(3, n\) to match times \(3,\); received \(2, 2\)"),
        (dict(times=T3, observations=np.array([[0.0, 0.0], [0.0, np.inf], [0.0, 0.0]])),
         r"Dataset.observations: expected finite values where observed; received inf at "
         r"observations\[1, 1\] \(row 1, column 1\)"),
        (dict(times=T3, observations=Y3, mask=np.ones((3, 2), dtype=int)),
         r"Dataset.mask: expected a boolean array \(True = observed\); received dtype int"),
        (dict(times=T3, observations=Y3, mask=np.ones((3, 1), dtype=bool)),
         r"Dataset.mask: expected shape \(3, 2\) to match observations; received \(3, 1\)"),
        (dict(times=T3, observations=Y3, inputs=np.zeros((4, 1))),
         r"Dataset.inputs: expected shape \(3, n\) to match times \(3,\); received \(4, 1\)"),
        (dict(times=T3, observations=Y3, inputs=np.array([[0.0], [np.nan], [0.0]])),
         r"Dataset.inputs: expected finite values; received nan at inputs\[1, 0\]"),
        (dict(times=T3, observations=Y3, truth_states=np.zeros((2, 2))),
         r"Dataset.truth_states: expected shape \(3, n\) to match times"),
        (dict(times=T3, observations=Y3, truth_states=np.full((3, 1), np.inf)),
         r"Dataset.truth_states: expected finite values; received inf at truth_states\[0, 0\]"),
        (dict(times=T3, observations=Y3, state_names=("q1",)),
         r"Dataset.state_names: expected no names when truth_states is None"),
        (dict(times=T3, observations=Y3, output_names=("a",)),
         r"Dataset.output_names: expected 2 names \(one per column\); received 1"),
        (dict(times=T3, observations=Y3, output_names="ab"),
         r"Dataset.output_names: expected a sequence of names, not one string"),
        (dict(times=T3, observations=Y3, output_names=("a", "a")),
         r"Dataset.output_names: expected unique names; received duplicates \['a'\]"),
        (dict(times=T3, observations=Y3, output_names=("a", "")),
         r"Dataset.output_names: expected non-empty strings"),
        (dict(times=T3, observations=Y3, inputs=np.zeros((3, 1)), input_names=("u", "v")),
         r"Dataset.input_names: expected 1 names"),
        (dict(times=T3, observations=Y3, truth_states=np.zeros((3, 2)), state_names=("q",)),
         r"Dataset.state_names: expected 2 names"),
        (dict(times=T3, observations=Y3, truth_params={"k": np.nan}),
         r"Dataset.truth_params: expected a finite value for 'k'; received nan"),
        (dict(times=T3, observations=Y3, truth_params={"k": [1.0, 2.0]}),
         r"Dataset.truth_params: expected a scalar number for 'k'"),
        (dict(times=T3, observations=Y3, truth_params={1: 2.0}),
         r"Dataset.truth_params: expected non-empty string keys"),
        (dict(times=T3, observations=Y3, truth_params=[("k", 1.0)]),
         r"Dataset.truth_params: expected a mapping"),
        (dict(times=T3, observations=Y3, metadata={"x": object()}),
         r"Dataset.metadata: expected a JSON-serialisable dict"),
        (dict(times=T3, observations=Y3, metadata={"x": float("nan")}),
         r"Dataset.metadata: expected a JSON-serialisable dict"),
        (dict(times=T3, observations=Y3, metadata={"x": (1, 2)}),
         r"Dataset.metadata: expected a dict that survives a JSON round trip"),
        (dict(times=T3, observations=Y3, metadata=["x"]),
         r"Dataset.metadata: expected a JSON-serialisable dict; received list"),
    ],
)  # fmt: skip
def test_validation_errors(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        Dataset(**kwargs)


def test_error_message_format_matches_house_style():
    t = np.arange(1001) * 0.001
    with pytest.raises(ValueError) as info:
        Dataset(t, np.zeros((1000, 2)))
    assert str(info.value) == (
        "Dataset.observations: expected shape (1001, n) to match times (1001,); received (1000, 2)."
    )


# -- dt --------------------------------------------------------------------------------------------
def test_dt_uniform_tolerates_rounding_of_long_grids():
    t = np.arange(200_000) * 1e-3 + 1e4  # rounding of t ~ 1e-12, far above 1e-9 * dt
    assert Dataset(t, np.zeros((t.size, 1))).dt == pytest.approx(1e-3, rel=1e-9)


def test_dt_errors():
    with pytest.raises(ValueError, match=r"Dataset.dt: expected uniform steps .*received times\["):
        _ = Dataset([0.0, 1.0, 3.0], np.zeros((3, 1))).dt
    with pytest.raises(ValueError, match=r"Dataset.dt: expected at least two time steps"):
        _ = Dataset([0.0], np.zeros((1, 1))).dt


# -- new datasets ----------------------------------------------------------------------------------
def test_to_dict_round_trip():
    ds = make()
    assert_same(Dataset(**ds.to_dict()), ds)
    d = ds.to_dict()
    d["times"][0] = -1.0  # copies, not views
    assert ds.times[0] == 0.0


def test_pickle_and_deepcopy():
    ds = make()
    assert_same(pickle.loads(pickle.dumps(ds)), ds)
    assert_same(copy.deepcopy(ds), ds)


@given(mask=arrays(np.bool_, (6, 2)), lo=st.floats(0.0, 1.0), width=st.floats(0.0, 1.0))
def test_window_and_mask_properties(tmp_path_factory, mask, lo, width):
    """Windows keep exactly the times inside; masked entries are NaN; npz round-trips exactly."""
    ds = make(n=6).with_mask(mask)
    assert np.array_equal(np.isnan(ds.observations), ~mask)
    inside = (ds.times >= lo) & (ds.times <= lo + width)
    if inside.any():
        w = ds.window(lo, lo + width)
        np.testing.assert_array_equal(w.times, ds.times[inside])
        np.testing.assert_array_equal(w.mask, mask[inside])
    path = tmp_path_factory.mktemp("rt") / "d.npz"
    assert_same(Dataset.load(ds.save(path)), ds)


def test_window_inclusive_and_keeps_everything_else():
    ds = make(n=11)
    w = ds.window(0.2, 0.5)
    np.testing.assert_allclose(w.times, [0.2, 0.3, 0.4, 0.5])
    assert w.inputs is not None and w.truth_states is not None
    assert w.inputs.shape == (4, 1) and w.truth_states.shape == (4, 3)
    assert w.truth_params == ds.truth_params and w.metadata == ds.metadata
    assert w.output_names == ds.output_names
    assert ds.window(t_start=0.95).n_steps == 1
    assert ds.window(t_end=0.05).n_steps == 1
    assert_same(ds.window(), ds)


def test_window_errors():
    ds = make()
    with pytest.raises(ValueError, match=r"Dataset.window: expected t_start <= t_end; received t_start=0.5"):
        ds.window(0.5, 0.2)
    with pytest.raises(ValueError, match=r"Dataset.window: expected at least one time in \[2.0, 3.0\]"):
        ds.window(2.0, 3.0)


def test_with_mask_replaces_and_refuses_unmasking_a_gap():
    ds = make(n=3)
    mask = np.array([[True, False], [True, True], [False, True]])
    masked = ds.with_mask(mask)
    np.testing.assert_array_equal(masked.mask, mask)
    assert np.isnan(masked.observations[0, 1]) and np.isnan(masked.observations[2, 0])
    with pytest.raises(ValueError, match=r"Dataset.observations: expected finite values where observed"):
        masked.with_mask(np.ones((3, 2), dtype=bool))


def test_select_outputs():
    ds = make(n=3).with_mask(np.array([[True, False], [True, True], [True, True]]))
    sel = ds.select_outputs(["a4", "a1"])
    assert sel.output_names == ("a4", "a1")
    np.testing.assert_array_equal(sel.mask[:, 0], ds.mask[:, 1])
    np.testing.assert_array_equal(sel.observations[:, 1], ds.observations[:, 0])
    assert ds.select_outputs("a1").output_names == ("a1",)
    with pytest.raises(ValueError, match=r"Dataset.output_names: expected one or more of \('a1', 'a4'\)"):
        ds.select_outputs(["a2"])
    with pytest.raises(ValueError, match=r"Dataset.output_names: expected one or more of"):
        ds.select_outputs([])


# -- files -----------------------------------------------------------------------------------------
def test_save_load_round_trip(tmp_path):
    ds = make().with_mask(np.eye(11, 2, dtype=bool) | np.eye(11, 2, -3, dtype=bool))
    path = ds.save(tmp_path / "sub" / "data.npz")
    assert path.exists()
    assert [p.name for p in path.parent.iterdir()] == ["data.npz"]  # no temporary file left
    assert_same(Dataset.load(path), ds)


def test_csv_round_trip_through_from_csv(tmp_path):
    """to_csv, then from_csv with the same names, gives every array back exactly (gaps as masked cells)."""
    t = np.linspace(0.0, 1.0, 11)
    ds = make(n=11, inputs=np.sin(t * np.pi / 3.0)[:, None], input_names=("force",))
    ds = ds.with_mask(~(np.eye(11, 2, dtype=bool) | np.eye(11, 2, -3, dtype=bool)))
    frame = ds.to_dataframe()
    assert list(frame.columns) == ["force", "a1", "a4", "x1", "x2", "x3"] and frame.index.name == "t"
    assert np.isnan(frame["a1"].iloc[0]) and frame["a1"].iloc[1] == ds.observations[1, 0]
    back = from_csv(ds.to_csv(tmp_path / "d.csv"), "t", ["force"], ["a1", "a4"], states=["x1", "x2", "x3"])
    np.testing.assert_array_equal(back.times, ds.times)
    np.testing.assert_array_equal(back.inputs, ds.inputs)
    np.testing.assert_array_equal(back.mask, ds.mask)
    np.testing.assert_array_equal(back.observations[ds.mask], ds.observations[ds.mask])
    np.testing.assert_array_equal(back.truth_states, ds.truth_states)
    with pytest.raises(
        ValueError, match=r"to_dataframe: expected distinct names .*received \['a1'\] used twice"
    ):
        make(input_names=("a1",)).to_dataframe()


def test_save_load_minimal(tmp_path):
    ds = Dataset([0.0, 1.0], np.ones((2, 1)))
    assert_same(Dataset.load(ds.save(tmp_path / "d.npz")), ds)


def test_save_is_atomic_on_failure(tmp_path, monkeypatch):
    path = make().save(tmp_path / "d.npz")
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np.lib.format, "write_array", boom)
    with pytest.raises(OSError, match="disk full"):
        Dataset([0.0, 1.0], np.ones((2, 1))).save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["d.npz"]


def test_load_rejects_foreign_files(tmp_path):
    np.savez(tmp_path / "x.npz", times=np.zeros(2))
    with pytest.raises(ValueError, match=r"Dataset.load: expected a file written by Dataset.save"):
        Dataset.load(tmp_path / "x.npz")
    np.savez(tmp_path / "y.npz", header=np.array(json.dumps({"format": "other"})))
    with pytest.raises(ValueError, match=r"Dataset.load: expected format 'twinfer.Dataset/1'"):
        Dataset.load(tmp_path / "y.npz")


# -- CSV -------------------------------------------------------------------------------------------
CSV = """t,f1,a1,a4,x1
0.0,1.0,0.5,,0.1
0.1,2.0,NaN,0.25,0.2

0.2,3.0,0.75,1e-3,0.3
"""


def test_from_csv(tmp_path):
    path = tmp_path / "frame.csv"
    path.write_text(CSV)
    ds = from_csv(path, time="t", inputs=["f1"], outputs=["a1", "a4"], states=["x1"])
    np.testing.assert_allclose(ds.times, [0.0, 0.1, 0.2])
    assert ds.inputs is not None and ds.truth_states is not None
    np.testing.assert_allclose(ds.inputs[:, 0], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(ds.mask, [[True, False], [False, True], [True, True]])
    np.testing.assert_allclose(ds.observations[2], [0.75, 1e-3])
    assert ds.input_names == ("f1",) and ds.output_names == ("a1", "a4") and ds.state_names == ("x1",)
    assert ds.metadata == {"source": str(path), "input_hold": "linear"}  # a measured signal (#51)
    no_inputs = from_csv(path, time="t", outputs=["a1"])
    assert no_inputs.inputs is None and no_inputs.output_names == ("a1",)


@pytest.mark.parametrize(
    ("text", "kwargs", "pattern"),
    [
        (CSV, dict(outputs=["a2"]), r"from_csv: expected columns \['a2'\] in .*received header"),
        (CSV, dict(outputs=[]), r"from_csv: expected at least one output column"),
        ("t,a1\n0.0,1.0\n,2.0\n", dict(outputs=["a1"]),
         r"from_csv: expected a number in column 't', line 3 .*received a missing cell ''"),
        ("t,f1,a1\n0.0,,1.0\n", dict(inputs=["f1"], outputs=["a1"]),
         r"from_csv: expected a number in column 'f1', line 2"),
        ("t,a1\n0.0,abc\n", dict(outputs=["a1"]),
         r"from_csv: expected a number in column 'a1', line 2 .*received 'abc'"),
        ("t,a1\n0.0,1.0\n0.1,inf\n", dict(outputs=["a1"]),
         r"from_csv: expected a finite number in column 'a1', line 3 of .*received 'inf'"),
        ("t,a1\n0.0,1.0\n0.0,2.0\n", dict(outputs=["a1"]),
         r"Dataset.times: expected strictly increasing"),
    ],
)  # fmt: skip
def test_from_csv_errors(tmp_path, text, kwargs, pattern):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=pattern):
        from_csv(path, time="t", **kwargs)


def test_from_csv_round_trips_through_npz(tmp_path):
    path = tmp_path / "frame.csv"
    path.write_text(CSV)
    ds = from_csv(path, "t", ["f1"], ["a1", "a4"])
    assert_same(Dataset.load(ds.save(tmp_path / "frame.npz")), ds)
    assert re.search(r"observed=4/6", repr(ds))


def test_from_table_reads_csv_parquet_and_netcdf_alike(tmp_path):
    """One table written as CSV, Parquet and netCDF gives the same Dataset (gaps in an output masked);
    an unknown suffix, a missing column and a gap in the time column are named errors."""
    import pandas as pd
    import xarray as xr

    from twinfer.data import from_table

    t = np.arange(6) * 0.1
    frame = pd.DataFrame({"t": t, "f": np.sin(t), "acc": np.cos(t), "x": t**2})
    frame.loc[2, "acc"] = np.nan
    frame.to_csv(tmp_path / "a.csv", index=False)
    frame.to_parquet(tmp_path / "a.parquet")
    xr.Dataset({c: ("row", frame[c].to_numpy()) for c in frame.columns}).to_netcdf(
        tmp_path / "a.nc", engine="h5netcdf"
    )
    sets = [
        from_table(tmp_path / f"a.{s}", "t", ["f"], ["acc"], states=["x"]) for s in ("csv", "parquet", "nc")
    ]
    for d in sets:
        np.testing.assert_array_equal(d.times, t)
        np.testing.assert_array_equal(d.mask[:, 0], [True, True, False, True, True, True])
        np.testing.assert_allclose(d.inputs[:, 0], np.sin(t))
        np.testing.assert_allclose(d.truth_states[:, 0], t**2)
        assert d.output_names == ("acc",) and d.input_names == ("f",)
    with pytest.raises(ValueError, match=r"from_table: expected a \.csv, \.parquet/\.pq or \.nc"):
        from_table(tmp_path / "a.xlsx", "t", [], ["acc"])
    from twinfer.data import table_columns

    assert (
        table_columns(tmp_path / "a.parquet") == table_columns(tmp_path / "a.csv") == ["t", "f", "acc", "x"]
    )
    with pytest.raises(ValueError, match=r"table_columns: expected a \.csv"):
        table_columns(tmp_path / "a.xlsx")
    with pytest.raises(ValueError, match=r"expected columns \['v'\]"):
        from_table(tmp_path / "a.parquet", "t", [], ["v"])
    frame.loc[1, "t"] = np.nan
    frame.to_parquet(tmp_path / "b.parquet")
    with pytest.raises(ValueError, match=r"column 't', row 1"):
        from_table(tmp_path / "b.parquet", "t", [], ["acc"])


def test_tables_columns_can_be_named_after_the_models_channels(tmp_path):
    """``{channel: column}`` names the channels after the model's, which the filters check; a bare
    string is a named error."""
    import pandas as pd

    from twinfer.data import from_table

    t = np.arange(6) * 0.1
    frame = pd.DataFrame({"time_s": t, "shaker_N": np.sin(t), "acc_top": np.cos(t), "disp": t**2})
    frame.to_csv(tmp_path / "a.csv", index=False)
    frame.to_parquet(tmp_path / "a.parquet")
    for suffix in ("csv", "parquet"):
        d = from_table(
            tmp_path / f"a.{suffix}", "time_s", {"u1": "shaker_N"}, {"a1": "acc_top"}, states={"x1": "disp"}
        )
        assert (d.input_names, d.output_names, d.state_names) == (("u1",), ("a1",), ("x1",))
        np.testing.assert_array_equal(d.observations[:, 0], np.cos(t))
    with pytest.raises(ValueError, match=r"from_csv outputs: expected a list of column names or a mapping"):
        from_csv(tmp_path / "a.csv", "time_s", outputs="acc_top")
    with pytest.raises(ValueError, match=r"from_csv: expected columns \['acc'\]"):
        from_csv(tmp_path / "a.csv", "time_s", outputs={"a1": "acc"})
