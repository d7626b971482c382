"""#52, data files: strict CSV cells, bounded reading, nothing but regular files, grids' bus numbers."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from twinfer.data import _checks, from_csv, from_table, load_grid
from twinfer.data._io import _CsvColumns, read_csv_columns
from twinfer.spec import SpecError, load_spec, run_spec

CSV = "t,u,y1,y2\n0.0,1.0,0.5,0.25\n0.1,2.0,,0.5\n0.2,3.0,0.75,1e-3\n"


def _csv(tmp_path: Path, text: str, name: str = "rec.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, newline="")
    return path


def _read(path: Path, **kwargs):
    return from_csv(path, "t", kwargs.pop("inputs", ["u"]), kwargs.pop("outputs", ["y1", "y2"]), **kwargs)


def test_csv_short_row_is_a_named_error(tmp_path):
    """A row with fewer cells than the header was masked; now the file, line and missing column."""
    path = _csv(tmp_path, CSV + "0.3,4.0,0.5\n")
    with pytest.raises(
        ValueError,
        match=r"expected 4 cells in line 5 of .*rec\.csv.*received 3: no cell for "
        r"column 4 \('y2' missing\)",
    ):
        _read(path)


def test_csv_extra_cells_are_a_named_error(tmp_path):
    """A row with more cells than the header was cut short; now the file, line and the column beyond."""
    path = _csv(tmp_path, CSV.replace("0.1,2.0,,0.5", "0.1,2.0,,0.5,9"))
    with pytest.raises(
        ValueError,
        match=r"expected 4 cells in line 3 of .*rec\.csv.*received 5: column 5 "
        r"holds '9' beyond the header",
    ):
        _read(path)


def test_csv_underscore_in_a_number_is_a_named_error(tmp_path):
    """``float`` reads ``1_000`` as 1000; the reader refuses it, naming column, line and file."""
    path = _csv(tmp_path, CSV.replace("2.0", "1_000"))
    with pytest.raises(
        ValueError,
        match=r"expected a number in column 'u', line 3 of .*rec\.csv; received "
        r"'1_000' \(no '_' between digits\)",
    ):
        _read(path)


@pytest.mark.parametrize("key", ["inputs", "outputs", "states"])
def test_csv_time_column_as_a_channel_is_a_named_error(tmp_path, key):
    """The time column named as an input, an output or a state was read as one; now refused by name."""
    path = _csv(tmp_path, CSV)
    kwargs = {"inputs": ["u"], "outputs": ["y1"], key: ["t"] if key != "outputs" else ["t", "y1"]}
    with pytest.raises(
        ValueError,
        match=rf"from_csv {key}: expected columns other than the time column 't' "
        r"of .*rec\.csv",
    ):
        from_csv(path, "t", kwargs["inputs"], kwargs["outputs"], states=kwargs.get("states"))


def test_csv_field_over_the_limit_names_file_and_line(tmp_path):
    """A field over 131,072 characters escaped as csv's own error; now the file and line, and the cause."""
    path = _csv(tmp_path, CSV + '0.3,"' + "7" * 140_000 + '",1,2\n')
    with pytest.raises(ValueError, match=r"in line 5 of .*rec\.csv; received a field longer than 131,072"):
        _read(path)


def test_csv_unterminated_quote_names_file_and_line(tmp_path):
    """A quote never closed swallowed the rest of the file; now the line it opened in."""
    path = _csv(tmp_path, CSV + '0.3,"4.0,0.5,0.5\n0.4,5.0,0.5,0.5\n')
    with pytest.raises(
        ValueError,
        match=r"line 5 of .*rec\.csv; received a quote .* opened in line 5 and "
        r"never closed",
    ):
        _read(path)


def test_csv_utf8_byte_order_mark_is_read(tmp_path):
    """Excel writes a byte-order mark before the header: the first column is still ``t``."""
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbf" + CSV.replace("\n", "\r\n").encode())
    data = _read(path)
    np.testing.assert_array_equal(data.times, [0.0, 0.1, 0.2])
    np.testing.assert_array_equal(data.mask[:, 0], [True, False, True])


def test_csv_fast_and_line_parsers_read_the_same_numbers(tmp_path, monkeypatch):
    """The chunked reader (Arrow where a chunk is plain numbers, :mod:`csv` line by line otherwise)
    gives bit for bit the numbers ``float`` gives, with gaps where cells are missing, and the same
    arrays through either path; chunks smaller than the file exercise the joins."""
    rng = np.random.default_rng(3)
    values = rng.normal(size=(3000, 3)) * 10.0 ** rng.integers(-300, 300, size=(3000, 3))
    lines = ["t,u,y1,y2"]
    for i, (u, a, b) in enumerate(values.tolist()):
        a_cell = ["", "NaN", "na", repr(a)][i % 4]
        lines.append(f"{i * 1e-3!r},{u!r},{a_cell}, {b!r} ")
    lines.insert(1500, "")
    path = _csv(tmp_path, "\n".join(lines) + "\n")
    monkeypatch.setattr("twinfer.data._io.CSV_CHUNK_BYTES", 4096)
    wanted = {"t": False, "u": False, "y1": True, "y2": True}
    fast = read_csv_columns(path, wanted)
    monkeypatch.setattr(_CsvColumns, "fast", lambda self, chunk: False)
    slow = read_csv_columns(path, wanted)
    for name in wanted:
        np.testing.assert_array_equal(fast[name], slow[name])
    np.testing.assert_array_equal(fast["u"], values[:, 0])
    np.testing.assert_array_equal(fast["y2"], values[:, 2])
    assert np.isnan(fast["y1"][np.arange(3000) % 4 != 3]).all()
    np.testing.assert_array_equal(fast["y1"][3::4], values[3::4, 1])


def _not_regular(tmp_path: Path, kind: str, suffix: str) -> Path:
    path = tmp_path / f"data{suffix}"
    if kind == "fifo":
        os.mkfifo(path)

        def unblock():  # before #52 the reader waited for a writer for ever: release it after 5 s
            threading.Event().wait(5.0)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                return
            os.close(fd)

        threading.Thread(target=unblock, daemon=True).start()
    else:
        os.symlink("/dev/zero", path)
    return path


@pytest.mark.skipif(not os.path.exists("/dev/zero") or not hasattr(os, "mkfifo"), reason="POSIX only")
@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero"])
@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".nc", ".npz", ".json", ".m", ".mat"])
def test_data_file_that_is_not_a_regular_file_is_refused(tmp_path, kind, suffix):
    """A FIFO blocked for ever and ``/dev/zero`` (or a link to it) grew memory without bound; now every
    data reader refuses what is not a regular file after links, at once, naming it."""
    from twinfer.data import Dataset

    path = _not_regular(tmp_path, kind, suffix)
    what = "a FIFO" if kind == "fifo" else r"a link to '/dev/zero'.*a character device"
    with pytest.raises(ValueError, match=rf"expected a regular data file; received .*data\{suffix}.*{what}"):
        if suffix == ".npz":
            Dataset.load(path)
        elif suffix in (".json", ".m", ".mat"):
            load_grid(str(path))
        else:
            from_table(path, "t", None, ["y1"])


def test_dev_zero_as_csv_is_refused(tmp_path):
    """``/dev/zero`` itself, named as the data file."""
    with pytest.raises(ValueError, match=r"from_csv: expected a regular data file; received '/dev/zero'"):
        from_csv("/dev/zero", "t", None, ["y1"])


def test_file_read_whole_above_the_size_limit_is_refused(tmp_path, monkeypatch):
    """Files read whole (npz entries uncompressed, Parquet, MATPOWER...) have a documented ceiling,
    ``MAX_WHOLE_FILE_BYTES``; above it a named error says what to do."""
    from twinfer.data import Dataset

    data = _read(_csv(tmp_path, CSV))
    data.save(tmp_path / "rec.npz")
    monkeypatch.setattr(_checks, "MAX_WHOLE_FILE_BYTES", 100)
    with pytest.raises(
        ValueError,
        match=r"Dataset.load: expected a file of at most 100 bytes .*Write the "
        r"table as CSV",
    ):
        Dataset.load(tmp_path / "rec.npz")
    (tmp_path / "case.m").write_text("%" * 200)
    with pytest.raises(ValueError, match=r"grid case: expected a file of at most 100 bytes .*case\.m"):
        load_grid(str(tmp_path / "case.m"))
    assert len(_read(_csv(tmp_path, CSV * 1, "again.csv")).times) == 3  # CSV streams: no ceiling


_LIMITED = """
import resource, sys
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from twinfer.data import from_csv
try:
    data = from_csv(sys.argv[1], "t", ["u"], ["y1", "y2"])
except ValueError as error:
    print("refused:", error)
else:
    print("rows:", len(data.times))
"""


def _vm_peak_after_import() -> int:
    code = "import twinfer.data, pyarrow.csv; print(open('/proc/self/status').read())"
    status = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmPeak"))) * 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmPeak from /proc")
def test_csv_reading_memory_is_bounded_under_an_address_space_limit(tmp_path):
    """Two million rows (57 MB, 64 MB of float64 columns) read within 600 MB of address space above
    the interpreter's own after import (the line-list reader held every cell as a string: over 1 GB);
    ``/dev/zero`` is refused at once under the same limit. Each in a subprocess with a timeout."""
    n = 2_000_000
    path = tmp_path / "big.csv"
    path.write_text("t,u,y1,y2\n" + "\n".join(map("{},1.5,-0.25,0.125".format, range(n))) + "\n")
    limit = _vm_peak_after_import() + 600 * 2**20
    for source, expected in ((path, f"rows: {n}"), ("/dev/zero", "refused: from_csv: expected a regular")):
        run = subprocess.run(
            [sys.executable, "-c", _LIMITED, str(source), str(limit)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert expected in run.stdout, (run.stdout, run.stderr[-2000:])


_M_CASE = """function mpc = case3
mpc.baseMVA = 100;
mpc.bus = [
    1  3  0   0  0  0  1  1  0  345  1  1.1  0.9;
    2  2  0   0  0  0  1  1  0  345  1  1.1  0.9;
    3  1  90  30 0  0  1  1  0  345  1  1.1  0.9;
];
mpc.gen = [
    1  163  0  300  -300  1  100  1  300  10;
];
mpc.branch = [
    1  2    0.01  0.0576  0  250  250  250  0  0  1  -360  360;
    {f}  3    0.017 0.092   0  250  250  250  0  0  1  -360  360;
];
"""


def test_matpower_fractional_bus_is_a_named_error(tmp_path):
    """A branch from bus ``2.5`` was read as bus 2; now the file, table, row, column and value."""
    good = tmp_path / "good.m"
    good.write_text(_M_CASE.format(f="2"))
    assert load_grid(str(good)).n_bus == 3
    path = tmp_path / "case3.m"
    path.write_text(_M_CASE.format(f="2.5"))
    with pytest.raises(
        ValueError,
        match=r"MATPOWER file .*case3\.m' mpc\.branch: expected whole bus numbers "
        r"in column 1; received 2\.5 in row 2",
    ):
        load_grid(str(path))


def _grid_spec(tmp_path: Path, columns: list[str], damping: str = "0.2") -> Path:
    import pandas as pd

    t = np.arange(20) * 0.02
    frame = pd.DataFrame({"t": t, **{c: np.sin(t + i) for i, c in enumerate(columns)}})
    frame.to_parquet(tmp_path / "pmu.parquet")
    spec = tmp_path / "grid.toml"
    spec.write_text(
        f'[model]\nkind = "grid"\nnetwork = "ieee9"\ndamping = {damping}\n\n[data]\nfile = "pmu.parquet"\n'
        'time = "t"\n\n[estimator]\nkind = "distributed"\nnoise_sd = 0.02\n'
    )
    return spec


def test_pmu_columns_numbered_from_zero_are_a_named_error(tmp_path):
    """Columns theta0..theta8 were read one bus along (16 of 18 channels used, no notice); now the
    columns expected and those received, and the likely mistake."""
    columns = [f"{q}{b}" for q in ("theta", "omega") for b in range(9)]
    spec, base = load_spec(_grid_spec(tmp_path, columns))
    with pytest.raises(
        SpecError,
        match=r"expected measurement columns theta<bus> / omega<bus> for the buses "
        r"1\.\.9 .*received \['omega0', 'theta0'\] \(no such bus\)\. Buses are numbered from 1",
    ):
        run_spec(spec, base)


def test_grid_negative_damping_is_a_named_error(tmp_path):
    """A negative grid damping was accepted (a chain refuses one); now refused naming the key."""
    columns = [f"{q}{b}" for q in ("theta", "omega") for b in range(1, 10)]
    with pytest.raises(SpecError, match=r"model\.damping: expected a damping d >= 0 for every bus"):
        load_spec(_grid_spec(tmp_path, columns, damping="[0.2, -0.1, 0.2]"))


def test_grid_damping_list_of_the_wrong_length_names_the_key(tmp_path):
    """Three dampings for nine buses raised numpy's broadcast error; now the key and the lengths."""
    columns = [f"{q}{b}" for q in ("theta", "omega") for b in range(1, 10)]
    spec, base = load_spec(_grid_spec(tmp_path, columns, damping="[0.2, 0.1, 0.2]"))
    with pytest.raises(
        SpecError,
        match=r"spec model\.damping: expected one value or 9, one per bus of 'ieee9'; "
        r"received 3 values",
    ):
        run_spec(spec, base)
