"""The live twin's sources: a file being written, a stream, an MQTT topic through a real broker."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from _broker import USER, Broker, publish, running_broker

from twinfer.errors import TwinferRuntimeError, TwinferValueError
from twinfer.live._sources import Dropped, FileSource, MqttSource, Record, StreamSource

CHANNELS = ["a", "b"]


def drain(source, *, want: int | None = None, timeout: float = 5.0) -> list[Record | Dropped]:
    """Poll until ``want`` records arrived (or, with None, until a poll brings nothing)."""
    items: list[Record | Dropped] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = source.poll(0.1)
        items.extend(got)
        n = sum(isinstance(i, Record) for i in items)
        if (want is None and not got) or (want is not None and n >= want):
            break
    return items


def read_all(path: Path, **kwargs) -> list[Record | Dropped]:
    """Everything a new FileSource on ``path`` hands out now."""
    source = FileSource(path, CHANNELS, **kwargs)
    try:
        return drain(source)
    finally:
        source.close()


def records(items) -> list[tuple[float, dict[str, float]]]:
    return [(i.t, i.values) for i in items if isinstance(i, Record)]


def append(path: Path, text: str) -> None:
    with open(path, "a") as handle:
        handle.write(text)


@pytest.mark.timeout(30)
def test_file_followed_in_pieces_with_truncation_and_rotation(tmp_path):
    """Partial lines wait for their newline; a truncated file is read again; a rotated one is finished."""
    path = tmp_path / "frames.csv"
    source = FileSource(path, CHANNELS, poll_interval=0.01)
    assert source.poll(0.05) == []  # not there yet: waited for
    append(path, "t,a,b\n0.0,1")
    assert source.poll(0.05) == []  # header only, and a partial line
    append(path, ".5,2\n0.1,,3\n0.2,4")
    assert records(drain(source)) == [(0.0, {"a": 1.5, "b": 2.0}), (0.1, {"b": 3.0})]
    append(path, ",\n")
    assert records(drain(source)) == [(0.2, {"a": 4.0})]

    with open(path, "w") as handle:  # truncated in place and written anew
        handle.write("t,b\n1.0,7\n")
    items = drain(source)
    assert [i.reason for i in items if isinstance(i, Dropped)] == ["truncated"]
    assert records(items) == [(1.0, {"b": 7.0})]

    append(path, "1.1,8\n1.2,")  # the old file's last line ends at rotation
    os.rename(path, tmp_path / "frames.csv.1")
    path.write_text("t,a\n2.0,9\n")
    items = drain(source)
    kinds = [i.reason if isinstance(i, Dropped) else i.t for i in items]
    assert kinds == [1.1, 1.2, "rotated", 2.0]
    assert records(items)[1] == (1.2, {})
    assert records(items)[2] == (2.0, {"a": 9.0})
    source.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("format", ["csv", "jsonl"])
def test_resume_from_position_gives_exactly_the_rest(tmp_path, format):
    """A source started at a record's position hands out exactly the records after it, none twice."""
    path = tmp_path / f"frames.{format}"
    rows = [{"t": 0.01 * k, "a": float(k), "b": -float(k)} for k in range(40)]
    if format == "csv":
        text = "t,a,b\n" + "".join(f"{r['t']!r},{r['a']!r},{r['b']!r}\n" for r in rows)
    else:
        text = "".join(json.dumps(r) + "\n" for r in rows)
    path.write_text(text + text.splitlines()[-1][:5])  # and a partial last line, buffered only
    first = FileSource(path, CHANNELS, format=format, poll_interval=0.01)
    got = [i for i in drain(first) if isinstance(i, Record)]
    assert [r.t for r in got] == [r["t"] for r in rows]
    for k in (0, 17, 39):
        resumed = FileSource(path, CHANNELS, format=format, start=json.loads(json.dumps(got[k].position)))
        assert resumed.position() == got[k].position
        assert [r.t for r in drain(resumed) if isinstance(r, Record)] == [r["t"] for r in rows[k + 1 :]]
        resumed.close()
    # the position after all records is not after the buffered partial line
    assert first.position() == got[-1].position
    assert first.position()["offset"] == len(text.encode())
    append(path, text.splitlines()[-1][5:] + "\n")
    assert [r.t for r in drain(first) if isinstance(r, Record)] == [rows[-1]["t"]]
    first.close()


@pytest.mark.timeout(30)
def test_resume_after_the_file_was_rotated_or_truncated_while_down(tmp_path):
    """A start position of another inode or past the end reads the file from its start, after the event."""
    path = tmp_path / "frames.csv"
    path.write_text("t,a\n0.0,1\n0.1,2\n")
    source = FileSource(path, CHANNELS)
    position = [i for i in drain(source) if isinstance(i, Record)][-1].position
    source.close()
    path.write_text("t,a\n5.0,1\n")  # shorter: truncated
    items = read_all(path, start=position)
    assert [i.reason for i in items if isinstance(i, Dropped)] == ["truncated"]
    assert records(items) == [(5.0, {"a": 1.0})]
    path.rename(tmp_path / "frames.csv.1")
    path.write_text("t,a\n0.0,1\n0.1,2\n0.2,3\n")  # a new file (rotated)
    items = read_all(path, start=position)
    assert [i.reason for i in items if isinstance(i, Dropped)] == ["rotated"]
    assert [r[0] for r in records(items)] == [0.0, 0.1, 0.2]


@pytest.mark.timeout(30)
def test_bad_values_are_dropped_and_counted_by_reason(tmp_path):
    """Bad frames are dropped whole, bad values alone; every drop is counted with its reason."""
    path = tmp_path / "frames.csv"
    path.write_text(
        "t,a,b,c\n"
        "0.0,1,2,\n"  # good; c (unknown) empty: simply absent
        "0.1,x,2,\n"  # a non-numeric: that value only
        "0.2,nan,inf,\n"  # two non-finite values
        ",1,2,\n"  # no time: the frame
        "abc,1,2,\n"  # non-numeric time: the frame
        "0.3,1,2\n"  # a field short: malformed
        "0.4,1,2,9\n"  # an unknown channel's value
        "\n"  # blank: skipped
        "0.5,1,2,8\n"
    )
    items = read_all(path)
    reasons = Counter(i.reason for i in items if isinstance(i, Dropped))
    assert reasons == {"non-numeric": 2, "non-finite": 2, "no time": 1, "malformed": 1, "unknown channel": 2}
    assert records(items) == [
        (0.0, {"a": 1.0, "b": 2.0}),
        (0.1, {"b": 2.0}),
        (0.2, {}),
        (0.4, {"a": 1.0, "b": 2.0}),
        (0.5, {"a": 1.0, "b": 2.0}),
    ]
    detail = next(i.detail for i in items if isinstance(i, Dropped) and i.reason == "non-numeric")
    assert "a: expected a number; received 'x'" in detail

    jsonl = tmp_path / "frames.jsonl"
    jsonl.write_text(
        '{"t": 0, "a": 1, "b": null}\n{"t": 0.1, "a": "1"\n[1, 2]\n{"a": 1}\n{"t": true}\n'
        '{"t": 0.2, "a": 1e999, "b": "2", "z": 1}\n'
    )
    items = read_all(jsonl, format="jsonl")
    reasons = Counter(i.reason for i in items if isinstance(i, Dropped))
    assert reasons == {"malformed": 2, "no time": 1, "non-numeric": 1, "non-finite": 1, "unknown channel": 1}
    assert records(items) == [(0.0, {"a": 1.0}), (0.2, {"b": 2.0})]  # a string holding a number is one


@pytest.mark.timeout(30)
def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(TwinferValueError, match="channels: expected a non-empty"):
        FileSource(tmp_path / "x.csv", [])
    with pytest.raises(TwinferValueError, match="channels: expected names other than the time key"):
        FileSource(tmp_path / "x.csv", ["t", "a"])
    with pytest.raises(TwinferValueError, match="format: expected 'csv' or 'jsonl'; received 'json'"):
        FileSource(tmp_path / "x.csv", CHANNELS, format="json")  # type: ignore[arg-type]
    with pytest.raises(TwinferValueError, match="start: expected a position"):
        FileSource(tmp_path / "x.csv", CHANNELS, start={"offset": 3})
    path = tmp_path / "x.csv"
    path.write_text("time,a\n0,1\n")
    source = FileSource(path, CHANNELS)
    with pytest.raises(TwinferValueError, match=r"expected a time column 't' \(time_key\); received"):
        source.poll(0.1)
    source.close()
    assert records(read_all(path, time_key="time")) == [(0.0, {"a": 1.0})]
    path.write_text(
        "\ufefft,a,a\n0,1,2\n"
    )  # a byte order mark is not part of a name; a repeated one is refused
    source = FileSource(path, CHANNELS)
    with pytest.raises(
        TwinferValueError, match=r"expected distinct column names; received \['t', 'a', 'a'\]"
    ):
        source.poll(0.1)
    source.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("format", ["csv", "jsonl"])
def test_stream_through_a_pipe(format):
    """Standard input through a pipe: polls never wait past their timeout; the end is visible."""
    read_fd, write_fd = os.pipe()
    reader = os.fdopen(read_fd, "rb")
    writer = os.fdopen(write_fd, "wb")
    source = StreamSource(reader, CHANNELS, format=format)
    lines = (
        ["t,a,b", "0.0,1,2", "0.1,3,"]
        if format == "csv"
        else ['{"t": 0.0, "a": 1, "b": 2}', '{"t": 0.1, "a": 3}']
    )
    writer.write(("\n".join(lines) + "\n").encode())
    writer.flush()
    assert records(drain(source, want=2)) == [(0.0, {"a": 1.0, "b": 2.0}), (0.1, {"a": 3.0})]
    begun = time.monotonic()
    assert source.poll(0.2) == []  # nothing written: the poll returns after its timeout
    assert 0.15 < time.monotonic() - begun < 1.0
    assert not source.finished

    def later() -> None:
        time.sleep(0.2)
        writer.write(b'{"t": 0.2, "a": 5}\n' if format == "jsonl" else b"0.2,5,\n")
        writer.close()

    threading.Thread(target=later).start()
    items = drain(source, want=1)
    assert records(items) == [(0.2, {"a": 5.0})]
    assert source.position() == {"line": len(lines) + 1}
    deadline = time.monotonic() + 5
    while not source.finished and time.monotonic() < deadline:
        source.poll(0.05)
    assert source.finished
    source.close()
    reader.close()


@pytest.mark.timeout(30)
def test_stream_of_text():
    """A text stream (``sys.stdin`` itself) is read as well as a binary one."""
    source = StreamSource(io.StringIO("t,a\n0.0,1\n0.1,x\n"), CHANNELS)
    items = drain(source, want=2)
    assert records(items) == [(0.0, {"a": 1.0}), (0.1, {})]
    assert [i.reason for i in items if isinstance(i, Dropped)] == ["non-numeric"]
    deadline = time.monotonic() + 5
    while not source.finished and time.monotonic() < deadline:
        source.poll(0.05)
    assert source.finished and source.poll(0.01) == []


# ---- MQTT, through a real broker ---------------------------------------------------------------------


@pytest.fixture
def broker(tmp_path):
    with running_broker(tmp_path / "broker") as running:
        yield running


def mqtt_source(broker: Broker, client_id: str, **kwargs) -> MqttSource:
    return MqttSource(
        broker.host,
        broker.port,
        "plant/frames",
        CHANNELS,
        client_id=client_id,
        username=USER,
        protocol=broker.protocol,
        **kwargs,
    )


def frames(ts) -> list[str]:
    return [json.dumps({"t": t, "a": t * 10}) for t in ts]


@pytest.mark.timeout(30)
def test_mqtt_frames_through_the_broker(broker):
    """JSON objects and lists of them arrive in order; bad payloads are dropped and counted."""
    source = mqtt_source(broker, "twin-roundtrip")
    assert source.connected
    assert source.position() is None
    publish(
        broker,
        "plant/frames",
        [
            json.dumps({"t": 0.0, "a": 1, "b": 2}),
            json.dumps([{"t": 0.1, "a": 3}, {"t": 0.2, "b": "x"}]),
            "{not json",
            json.dumps([1, {"t": 0.3, "q": 1}]),
        ],
    )
    items = drain(source, want=4)
    assert records(items) == [(0.0, {"a": 1.0, "b": 2.0}), (0.1, {"a": 3.0}), (0.2, {}), (0.3, {})]
    assert Counter(i.reason for i in items if isinstance(i, Dropped)) == {
        "non-numeric": 1,
        "malformed": 2,
        "unknown channel": 1,
    }
    assert [i.position for i in items if isinstance(i, Record)] == [0.0, 0.1, 0.2, 0.3]
    assert source.position() == 0.3
    source.commit(source.position())
    source.close()
    with pytest.raises(TwinferValueError, match="qos: expected 0, 1 or 2; received 3"):
        mqtt_source(broker, "twin-x", qos=3)


@pytest.mark.timeout(40)
def test_mqtt_uncommitted_frames_come_again_committed_ones_not(broker):
    """A twin gone before committing gets the uncommitted frames again, and those sent while away."""
    first = mqtt_source(broker, "twin-session")
    publish(broker, "plant/frames", frames([0.0, 0.1, 0.2, 0.3]))
    got = [i for i in drain(first, want=4) if isinstance(i, Record)]
    assert [r.t for r in got] == [0.0, 0.1, 0.2, 0.3]
    first.commit(got[1].position)  # a snapshot holds the frames up to t = 0.1
    time.sleep(0.2)
    first.close()  # gone before the next snapshot
    publish(broker, "plant/frames", frames([0.4, 0.5]))  # while the twin is away

    second = mqtt_source(broker, "twin-session", start=got[1].position)
    assert second.position() == 0.1
    ts = [r[0] for r in records(drain(second, want=4 if broker.redelivers_unacked else 2))]
    if broker.redelivers_unacked:
        assert ts == [0.2, 0.3, 0.4, 0.5]
    else:  # amqtt 0.12.1 keeps only what was published while the client was away
        assert ts == [0.4, 0.5]
    second.commit(second.position())
    time.sleep(0.2)
    second.close()
    third = mqtt_source(broker, "twin-session", start=0.5)  # all committed: nothing comes again
    assert drain(third) == []
    third.close()
    if not broker.redelivers_unacked:
        pytest.skip(f"{broker.kind} does not send unacknowledged messages again on reconnection")


@pytest.mark.timeout(60)
def test_mqtt_reconnects_when_the_broker_comes_back(broker):
    """The broker stopped and started again: the source reconnects by itself and gets later frames."""
    source = mqtt_source(broker, "twin-reconnect")
    publish(broker, "plant/frames", frames([0.0]))
    assert records(drain(source, want=1)) == [(0.0, {"a": 0.0})]
    source.commit(source.position())
    broker.stop()
    deadline = time.monotonic() + 10
    while source.connected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not source.connected
    assert source.poll(0.1) == []
    broker.start()
    deadline = time.monotonic() + 20
    while not source.connected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert source.connected
    publish(broker, "plant/frames", frames([1.0, 1.1]))
    assert records(drain(source, want=2)) == [(1.0, {"a": 10.0}), (1.1, {"a": 11.0})]
    source.commit(source.position())
    source.close()


@pytest.mark.timeout(30)
def test_mqtt_without_a_broker_is_a_named_error(tmp_path):
    broker = Broker(tmp_path / "unused")  # a free port that nothing listens on
    with pytest.raises(
        TwinferRuntimeError, match=rf"connect_timeout: expected a connection .*127\.0\.0\.1:{broker.port}"
    ):
        mqtt_source(broker, "twin-nobody", connect_timeout=1.5)
