"""The live twin's sinks: JSON lines, rolling Parquet parts, an MQTT topic through a real broker."""

from __future__ import annotations

import io
import json
import math
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _broker import USER, running_broker

from twinfer.errors import TwinferValueError
from twinfer.live._sinks import JsonLinesSink, MqttSink, ParquetSink
from twinfer.live._sources import Dropped, MqttSource, Record


def rows(t0: int, n: int) -> list[dict]:
    return [{"t": 0.01 * k, "x1": float(k), "x1_sd": 0.5, "k": k, "alarm": "none"} for k in range(t0, t0 + n)]


@pytest.mark.timeout(30)
def test_json_lines_on_text_and_binary_streams():
    """One flushed JSON object per line; a non-finite value is null (JSON has no NaN)."""
    text = io.StringIO()
    sink = JsonLinesSink(text)
    sink.write([{"t": 0.0, "x": 1.5, "name": "a"}, {"t": 0.01, "x": math.nan, "y": math.inf}])
    sink.write([])
    sink.close()
    lines = text.getvalue().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"t": 0.0, "x": 1.5, "name": "a"},
        {"t": 0.01, "x": None, "y": None},
    ]
    binary = io.BytesIO()
    JsonLinesSink(binary).write([{"t": 1.0}])
    assert binary.getvalue() == b'{"t":1.0}\n'
    with pytest.raises(TwinferValueError, match="row: expected JSON-able scalars"):
        JsonLinesSink(io.StringIO()).write([{"t": object()}])
    with pytest.raises(TwinferValueError, match="rows: expected a list of flat mappings; received dict"):
        JsonLinesSink(io.StringIO()).write({"t": 1.0})  # type: ignore[arg-type]


@pytest.mark.timeout(30)
def test_parquet_parts_roll_and_a_resumed_sink_overwrites(tmp_path):
    """Each flush writes the next part; a sink resumed at a snapshot's part count rewrites what followed."""
    sink = ParquetSink(tmp_path, prefix="estimates")
    assert sink.flush() == 0  # nothing buffered: no part
    sink.write(rows(0, 3))
    assert sink.flush() == 1
    sink.write(rows(3, 2))
    sink.write(rows(5, 1))
    assert sink.flush() == 2  # a snapshot here would record 2 parts
    sink.write(rows(6, 4))
    assert sink.flush() == 3  # written after that snapshot; then the twin is killed
    sink.write(rows(10, 1))
    assert sink.flush() == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"estimates-00000{i}.parquet" for i in (1, 2, 3, 4)]

    resumed = ParquetSink(tmp_path, prefix="estimates", start_part=2)
    resumed.write(rows(6, 5))
    assert resumed.flush() == 3
    resumed.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"estimates-00000{i}.parquet" for i in (1, 2, 3)]
    table = pa.concat_tables([pq.read_table(sink.part_path(i)) for i in (1, 2, 3)])
    assert table.column("t").to_pylist() == [r["t"] for r in rows(0, 11)]  # none twice, none lost
    assert table.schema.field("x1").type == pa.float64()
    assert table.schema.field("k").type == pa.float64()  # integers too
    assert table.schema.field("alarm").type == pa.string()
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


@pytest.mark.timeout(30)
def test_parquet_missing_values_are_null_and_mixed_columns_named(tmp_path):
    sink = ParquetSink(tmp_path / "out", prefix="p")
    sink.write([{"t": 0.0, "x": 1}, {"t": 0.1, "y": True}, {"t": 0.2, "x": None}])
    assert sink.flush() == 1
    table = pq.read_table(sink.part_path(1))
    assert table.column("x").to_pylist() == [1.0, None, None]
    assert table.column("y").to_pylist() == [None, 1.0, None]
    sink.write([{"t": 0.0, "x": 1.0}, {"t": 0.1, "x": "high"}])
    with pytest.raises(TwinferValueError, match=r"column 'x': expected numbers \(float64\) or strings"):
        sink.flush()
    with pytest.raises(TwinferValueError, match="start_part: expected an integer >= 0; received -1"):
        ParquetSink(tmp_path, start_part=-1)
    with pytest.raises(TwinferValueError, match="prefix: expected letters"):
        ParquetSink(tmp_path, prefix="../x")


@pytest.mark.timeout(40)
def test_mqtt_sink_to_source_round_trip(tmp_path):
    """Rows published by the sink arrive through the real broker at a source, in order, exactly.

    200 rows, none acknowledged by the source until the end: more than a broker's MQTT 3.1.1 in-flight
    window (mosquitto's 20), which MQTT 5's Receive Maximum lifts.
    """
    with running_broker(tmp_path / "broker") as broker:
        source = MqttSource(
            broker.host,
            broker.port,
            "plant/estimates",
            ["x1", "x1_sd", "k"],
            client_id="reader",
            username=USER,
            protocol=broker.protocol,
        )
        sink = MqttSink(
            broker.host,
            broker.port,
            "plant/estimates",
            client_id="writer",
            username=USER,
            protocol=broker.protocol,
        )
        assert sink.connected
        sent = [{key: value for key, value in row.items() if key != "alarm"} for row in rows(0, 200)]
        sink.write(sent)
        sink.flush()
        assert sink.pending == 0
        got: list[Record] = []
        deadline = time.monotonic() + 10
        while len(got) < len(sent) and time.monotonic() < deadline:
            items = source.poll(0.1)
            assert not any(isinstance(i, Dropped) for i in items)
            got.extend(i for i in items if isinstance(i, Record))
        assert [(r.t, r.values) for r in got] == [
            (row["t"], {k: float(v) for k, v in row.items() if k != "t"}) for row in sent
        ]
        source.commit(source.position())
        sink.close()
        source.close()
        with pytest.raises(TwinferValueError, match="topic: expected a topic name without wildcards"):
            MqttSink(broker.host, broker.port, "plant/#", client_id="writer")
