"""The live twin: frames as they come onto the model's steps, equal to the whole-record run, snapshots.

Frames are made the way a data acquisition delivers them: timestamps with jitter, channels split across
frames, repeated and reordered within the reorder window, gaps; the reference is ``program.run`` over
the same record (issue #54, items 1, 2 and 4).
"""

import numpy as np
import pytest

import twinfer
from twinfer import Dataset, StateSpace
from twinfer.checkpoint import CheckpointError
from twinfer.errors import TwinferValueError
from twinfer.live import Clock, DriftAlarm, InnovationAlarm, RateError, Rows, Twin, innovation_alarms

pytestmark = pytest.mark.timeout(300)

DT = 0.01
F = np.array([[1.0, DT], [-4.0 * DT, 1.0 - 0.2 * DT]])
B = np.array([[0.0], [DT]])
H = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])


def _record(n: int = 400, seed: int = 0) -> Dataset:
    """A forced oscillator drawn step by step, each output sampled with the input of its own instant."""
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(n + 1, 1))
    x, ys = np.array([0.1, 0.0]), []
    for k in range(n + 1):
        ys.append(H @ x + 0.05 * rng.normal(size=3))
        x = F @ x + B @ u[k] + 1e-3 * rng.normal(size=2)
    return Dataset(
        times=np.arange(n + 1) * DT,
        observations=np.asarray(ys),
        inputs=u,
        output_names=("p", "v", "s"),
        input_names=("f",),
        metadata={"input_hold": "zoh"},
    )


@pytest.fixture(scope="module")
def program():
    system = StateSpace.linear(F, H, B, states=("x", "xd"), outputs=("p", "v", "s"), inputs=("f",))
    return twinfer.compile(
        system, "kf", dt=DT, data=_record(), noise_sd=0.05, state_sd=0.3, process_sd=1e-3, input_hold="zoh"
    )


def _frames(data: Dataset) -> list[tuple[float, dict[str, float]]]:
    names = (*data.input_names, *data.output_names)  # type: ignore[misc]
    rows = np.column_stack([data.inputs, data.observations])
    return [
        (float(t), dict(zip(names, map(float, r), strict=True)))
        for t, r in zip(data.times, rows, strict=True)
    ]


def _push_all(twin: Twin, stream, sizes) -> Rows:
    out, i = [], 0
    for size in sizes:
        out.append(twin.push(stream[i : i + size])[0])
        i += size
        if i >= len(stream):
            break
    out.append(twin.finish()[0])
    return Rows.concat([r for r in out if len(r)])


def test_frames_in_any_batches_split_reordered_and_repeated_equal_the_whole_record_run(program):
    data = _record()
    est = program.run(data)
    rng = np.random.default_rng(1)
    stream = []
    for t, values in _frames(data):
        items = list(values.items())
        cut = int(rng.integers(1, len(items)))
        jitter = float(rng.uniform(-0.2, 0.2)) * DT  # the acquisition's timestamps are not exact
        stream += [(t + jitter, dict(items[:cut])), (t, dict(items[cut:]))]
        if rng.uniform() < 0.1:
            stream.append((t, dict(items[:1])))  # a repeated frame
    for i in range(2, len(stream) - 2, 5):  # reordered by at most two frames (one step)
        stream[i], stream[i + 2] = stream[i + 2], stream[i]
    twin = Twin(program, dt=DT, window=2, chunk=16, alarms=())
    rows = _push_all(twin, stream, rng.integers(1, 60, size=len(stream)))
    assert rows.k.tolist() == list(range(1, data.n_steps))
    np.testing.assert_allclose(rows.t, np.asarray(data.times[1:]), rtol=0, atol=1e-12)
    np.testing.assert_allclose(rows.mean, np.asarray(est.means[1:]), rtol=0, atol=1e-12)
    np.testing.assert_allclose(rows.std, np.asarray(est.stds[1:]), rtol=0, atol=1e-12)
    assert np.sum(rows.loglik) == pytest.approx(est.loglik, abs=1e-9)
    counts = twin.counts
    assert counts["applied"] == data.n_steps - 1 and counts["late"] == 0 and counts["predicted"] == 0
    assert counts["duplicate"] == len(stream) - 2 * data.n_steps
    assert rows.innov is not None and rows.innov.shape == (data.n_steps - 1, 3)


def test_a_gap_is_prediction_only_a_late_frame_is_counted_not_applied(program):
    data = _record(60)
    frames = _frames(data)
    twin = Twin(program, dt=DT, alarms=())
    rows, _ = twin.push(frames[:10] + frames[15:20])  # steps 10-14 never arrive
    assert rows.k.tolist() == list(range(1, 20))  # each step complete when its frame arrives
    gap = np.isin(rows.k, range(10, 15))
    assert not rows.observed[gap].any() and rows.observed[~gap].all()
    late, _ = twin.push([frames[12]])  # step 12 arrives after its successors were applied
    assert len(late) == 0 and twin.counts["late"] == 1
    # the same record with those measurements masked, run whole
    mask = np.ones(np.shape(data.observations), bool)
    mask[10:15] = False
    held = np.array(data.inputs)
    held[10:15] = held[9]  # a missing input holds its last value
    est = program.run(Dataset(**{**data.to_dict(), "mask": mask, "inputs": held}))
    np.testing.assert_allclose(rows.mean, np.asarray(est.means[1:20]), atol=1e-12)


def test_a_stream_off_the_model_step_is_a_named_error_at_start():
    clock = Clock(DT, ("f",), ("p",))
    clock.add(0.0, {"p": 1.0})
    with pytest.raises(RateError, match=r"dt = 0\.01 s.*0\.500 steps after t0"):
        clock.add(0.005, {"p": 1.0})  # 200 Hz into a 100 Hz model
    later = Clock(DT, ("f",), ("p",))
    for k in range(12):
        later.add(k * DT, {"p": 1.0})
    assert later.add(12.5 * DT, {"p": 1.0}) == "off-grid" and later.counts["off-grid"] == 1
    with pytest.raises(ValueError, match=r"channels: expected some of \['f', 'p'\]; received \['q'\]"):
        later.add(13 * DT, {"q": 1.0})


def test_a_step_waits_only_for_the_measured_outputs():
    """With ``measured``, a step is complete once its input and the measured outputs are in; an output no
    frame carries (``q``) is not waited for, where by default the step waits for a later frame."""
    every, measured = Clock(DT, ("f",), ("p", "q")), Clock(DT, ("f",), ("p", "q"), measured=("p",))
    for clock in (every, measured):
        clock.add(0.0, {"f": 0.0, "p": 1.0})
        clock.add(DT, {"f": 0.5, "p": 2.0})
    assert [s.k for s in every.ready()] == [0] and [s.k for s in measured.ready()] == [0, 1]
    assert [s.k for s in every.ready(flush=True)] == [1]
    with pytest.raises(ValueError, match=r"Clock measured: expected some of the outputs \['p', 'q'\]"):
        Clock(DT, ("f",), ("p", "q"), measured=("z",))


def test_a_snapshot_resumes_exactly_and_refuses_another_twin(program, tmp_path):
    data = _record()
    frames = _frames(data)
    whole = _push_all(Twin(program, dt=DT, window=1), frames, [len(frames)])
    first = Twin(program, dt=DT, window=1)
    head, _ = first.push(frames[:137])
    path = first.save(tmp_path / "twin.snapshot", offset=137)
    resumed = Twin(program, dt=DT, window=1)
    assert resumed.load(path) == {"offset": 137}
    tail = _push_all(resumed, frames[137:], [50] * 10)
    joined = Rows.concat([head, tail])
    assert joined.k.tolist() == whole.k.tolist()
    np.testing.assert_allclose(joined.mean, whole.mean, rtol=0, atol=1e-12)
    assert resumed.counts == Twin(program, dt=DT, window=1).counts | {
        k: v for k, v in resumed.counts.items()
    }  # counters continue from the snapshot's
    assert resumed.counts["frames"] == len(frames)
    other = twinfer.compile(
        StateSpace.linear(F, H, B, states=("x", "xd"), outputs=("p", "v", "s"), inputs=("f",)),
        "kf", dt=DT, data=data, noise_sd=0.07, state_sd=0.3, process_sd=1e-3, input_hold="zoh",
    )  # fmt: skip
    with pytest.raises(CheckpointError, match="fingerprint differs in numbers"):
        Twin(other, dt=DT, window=1).load(path)
    with pytest.raises(CheckpointError, match="fingerprint differs in clock"):
        Twin(program, dt=DT, window=3).load(path)
    raw = path.read_bytes()
    path.write_bytes(raw[:-10] + b"0123456789")
    with pytest.raises(CheckpointError, match="corrupt|hash"):
        Twin(program, dt=DT, window=1).load(path)


def _rows(n: int, mean: np.ndarray, std: np.ndarray, innov: np.ndarray, dt: float = DT) -> Rows:
    k = np.arange(1, n + 1)
    m = innov.shape[1]
    z = np.zeros(n)
    names = tuple(f"y{i}" for i in range(m))
    return Rows(("theta",), names, k, k * dt, mean, std, z, z, np.ones((n, m), bool), innov)


def test_the_innovation_alarm_is_silent_on_white_noise_and_names_the_stuck_sensor():
    rng = np.random.default_rng(3)
    n, m = 60_000, 4  # ten minutes at 100 Hz
    alarm = InnovationAlarm(window=1.0, groups={"left": ["y0", "y1"], "right": ["y2", "y3"]})
    state = alarm.start([f"y{i}" for i in range(m)], DT)
    innov = rng.normal(size=(n, m))
    events = []
    for i in range(0, n, 997):  # chunks of any size
        sl = slice(i, i + 997)
        r = _rows(n, np.zeros((n, 1)), np.ones((n, 1)), innov)
        chunk = Rows(r.names, r.outputs, r.k[sl], r.t[sl], r.mean[sl], r.std[sl], r.loglik[sl], r.nis[sl],
                     r.observed[sl], r.innov[sl])  # fmt: skip
        events += alarm.check(state, chunk, chunk.observed)
    assert events == []
    stuck = rng.normal(size=(3000, m))
    stuck[1000:, 2] = 2.5  # sensor y2 reads a constant: its innovation is the signal it no longer follows
    r = _rows(3000, np.zeros((3000, 1)), np.ones((3000, 1)), stuck)
    r = Rows(r.names, r.outputs, r.k + n, r.t + n * DT, r.mean, r.std, r.loglik, r.nis, r.observed, r.innov)
    events = alarm.check(state, r, r.observed)
    raised = [e for e in events if e["state"] == "raised"]
    assert {e["name"] for e in raised} == {"y2", "right"}
    assert all(0 < e["t"] - (n + 1000) * DT < 1.0 for e in raised)


def _check_in_chunks(alarm: InnovationAlarm, innov: np.ndarray, size: int) -> list[dict]:
    state = alarm.start([f"y{i}" for i in range(innov.shape[1])], DT)
    r = _rows(innov.shape[0], np.zeros((innov.shape[0], 1)), np.ones((innov.shape[0], 1)), innov)
    events = []
    for i in range(0, innov.shape[0], size):
        sl = slice(i, i + size)
        chunk = Rows(r.names, r.outputs, r.k[sl], r.t[sl], r.mean[sl], r.std[sl], r.loglik[sl], r.nis[sl],
                     r.observed[sl], r.innov[sl])  # fmt: skip
        events += alarm.check(state, chunk, chunk.observed)
    return events


def test_the_mean_test_sees_a_bias_the_nis_test_misses_and_is_silent_on_white_noise():
    rng = np.random.default_rng(5)
    n, m, onset, end = 60_000, 4, 40_000, 50_000  # ten minutes at 100 Hz; y1 biased for 100 s
    innov = rng.normal(size=(n, m))
    innov[onset:end, 1] += 0.8  # a persistent shift of 0.8 sd (a tripped line's power flow)
    groups = {"left": ["y0", "y1"], "right": ["y2", "y3"]}
    mean = InnovationAlarm(window=1.0, groups=groups, test="mean")
    events = _check_in_chunks(mean, innov, 997)
    whole = _check_in_chunks(mean, innov, n)  # chunking changes nothing (values to rounding)
    assert [{**e, "value": 0} for e in events] == [{**e, "value": 0} for e in whole]
    assert [e["value"] for e in events] == pytest.approx([e["value"] for e in whole], rel=1e-9)
    raised = [e for e in events if e["state"] == "raised"]
    assert {e["alarm"] for e in raised} == {"innovation-mean"}
    assert {e["name"] for e in raised} == {"y1", "left"}
    first = min(raised, key=lambda e: e["step"])
    assert 0 < first["t"] - onset * DT < 1.0
    # the event's value is the window's sum squared over its count (chi-square(1), per degree of freedom)
    assert first["name"] == "y1"  # a group of two needs more: chi-square(2) at 1e-9 is 41.4, not 37.3
    window = innov[first["step"] - 100 : first["step"], 1]
    assert first["value"] == pytest.approx(window.sum() ** 2 / 100, rel=1e-9)
    cleared = [e for e in events if e["state"] == "cleared"]
    assert {e["name"] for e in cleared} == {"y1", "left"} and all(e["t"] > end * DT for e in cleared)
    # the time-average NIS of the same record: a shift of 0.8 sd adds 0.64 to a mean square of 1, short
    # of the chi-square(100) quantile at 1e-9 (2.09 a value) but for the noise's luckier windows
    nis = _check_in_chunks(InnovationAlarm(window=1.0, groups=groups), innov, 997)
    assert all(e["t"] > first["t"] + 1.0 for e in nis)
    with pytest.raises(TwinferValueError, match="InnovationAlarm test"):
        InnovationAlarm(test="median")  # type: ignore[arg-type]
    both = innovation_alarms("both", window=1.0, p=1e-9, learning=10.0, groups=groups)
    assert [a.kind for a in both] == ["innovation", "innovation-mean"] and both[1] == mean
    with pytest.raises(TwinferValueError, match="innovation test"):
        innovation_alarms("median", window=1.0, p=1e-9, learning=10.0, groups={})  # type: ignore[arg-type]


def test_the_drift_alarm_waits_for_its_baseline_and_persistence_and_names_the_parameter():
    n = 20_000
    t = np.arange(1, n + 1) * DT
    mean = np.where(t > 150.0, 0.95, 1.0)[:, None] + 1e-4 * np.sin(t)[:, None]
    std = np.full((n, 1), 0.005)
    alarm = DriftAlarm(learning=60.0, level=5.0, persistence=2.0)
    state = alarm.start(["theta"], [0], DT)
    r = _rows(n, mean, std, np.zeros((n, 1)))
    events = alarm.check(state, r)
    assert [(e["name"], e["state"]) for e in events] == [("theta", "raised")]
    assert events[0]["t"] == pytest.approx(152.0, abs=1.5 * DT)
