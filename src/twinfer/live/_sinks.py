"""Where a live twin's estimate rows go: JSON lines on a stream, rolling Parquet parts, an MQTT topic.

A row is a flat mapping of JSON-able scalars, e.g. ``{"t": 0.01, "x1": 0.3, "x1_sd": 0.02}``. Every sink
takes ``write(rows)``, ``flush()`` and ``close()``. The twin flushes its sinks exactly when it snapshots,
so what a sink has made durable matches the snapshot:

* :class:`JsonLinesSink` writes one JSON object per line and flushes the stream after every ``write``;
* :class:`ParquetSink` buffers rows and writes the buffer as the next numbered part file at ``flush``,
  atomically; a resumed twin passes the part count of its snapshot as ``start_part``, so a part written
  after that snapshot is written again, never duplicated;
* :class:`MqttSink` publishes one JSON object per row; ``flush`` waits for the broker's acknowledgements.
"""

from __future__ import annotations

import io
import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from twinfer import _atomic
from twinfer.errors import TwinferValueError
from twinfer.live._mqtt import Connection, MqttVersion, check_qos

__all__ = ["JsonLinesSink", "MqttSink", "ParquetSink"]


def _json_row(row: Mapping[str, Any]) -> str:
    """One row as a JSON object; a non-finite float is written as ``null`` (JSON has no NaN)."""
    clean = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
    try:
        return json.dumps(clean, allow_nan=False, separators=(",", ":"))
    except TypeError as err:
        raise TwinferValueError(f"row: expected JSON-able scalars; received {row!r} ({err})") from err


def _check_rows(rows: object) -> Sequence[Mapping[str, Any]]:
    if isinstance(rows, Mapping) or not isinstance(rows, Sequence):
        raise TwinferValueError(f"rows: expected a list of flat mappings; received {type(rows).__name__}")
    for row in rows:
        if not isinstance(row, Mapping):
            raise TwinferValueError(f"rows: expected flat mappings; received an item {row!r}")
    return rows  # type: ignore[return-value]


class JsonLinesSink:
    """One JSON object per line on a text or binary stream (standard output), flushed at every write.

    The stream stays the caller's: :meth:`close` flushes it and leaves it open.
    """

    def __init__(self, stream: IO[str] | IO[bytes]) -> None:
        self._stream = stream
        self._binary = not isinstance(stream, io.TextIOBase)

    def write(self, rows: list[dict[str, Any]]) -> None:
        text = "".join(_json_row(row) + "\n" for row in _check_rows(rows))
        if text:
            self._stream.write(text.encode("utf-8") if self._binary else text)  # type: ignore[arg-type]
        self._stream.flush()

    def flush(self) -> None:
        self._stream.flush()

    def close(self) -> None:
        self._stream.flush()


_PART_DIGITS = 6


class ParquetSink:
    """Rows buffered and written as numbered Parquet part files ``<prefix>-000001.parquet``, ... .

    Each :meth:`flush` writes the buffer (if any) as the next part, atomically (a temporary file renamed
    over the target, :func:`twinfer._atomic.write_bytes`). Columns are float64 (numbers and booleans;
    a missing or None value is null), or strings where every value is a string. The first flush removes
    parts numbered above ``start_part``: they were written after the snapshot being resumed and are
    written again.

    Args:
        folder: where the parts go (created when missing).
        prefix: file name prefix.
        start_part: parts already written by the run being resumed (the snapshot's count).

    """

    def __init__(self, folder: str | Path, *, prefix: str = "estimates", start_part: int = 0) -> None:
        if not isinstance(prefix, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", prefix):
            raise TwinferValueError(f"prefix: expected letters, digits, '_', '.' or '-'; received {prefix!r}")
        if isinstance(start_part, bool) or not isinstance(start_part, int) or start_part < 0:
            raise TwinferValueError(f"start_part: expected an integer >= 0; received {start_part!r}")
        self.folder = Path(folder)
        self.prefix = prefix
        self._parts = start_part
        self._rows: list[Mapping[str, Any]] = []
        self._cleaned = False

    def part_path(self, number: int) -> Path:
        """The file of part ``number`` (1-based)."""
        return self.folder / f"{self.prefix}-{number:0{_PART_DIGITS}d}.parquet"

    @property
    def parts(self) -> int:
        """Parts written so far (including those of the run resumed)."""
        return self._parts

    def write(self, rows: list[dict[str, Any]]) -> None:
        self._rows.extend(_check_rows(rows))

    def _remove_stale(self) -> None:
        pattern = re.compile(rf"{re.escape(self.prefix)}-(\d{{{_PART_DIGITS}}})\.parquet")
        if self.folder.is_dir():
            for path in self.folder.iterdir():
                match = pattern.fullmatch(path.name)
                if match and int(match.group(1)) > self._parts:
                    path.unlink()
        self._cleaned = True

    def _table(self) -> pa.Table:
        names = list(dict.fromkeys(k for row in self._rows for k in row))
        columns = {}
        for name in names:
            values = [row.get(name) for row in self._rows]
            present = [v for v in values if v is not None]
            if present and all(isinstance(v, str) for v in present):
                columns[name] = pa.array(values, type=pa.string())
                continue
            bad = next((v for v in present if isinstance(v, str) or not isinstance(v, int | float)), None)
            if bad is not None:
                raise TwinferValueError(
                    f"column {name!r}: expected numbers (float64) or strings throughout; received {bad!r} "
                    f"among {type(present[0]).__name__} values"
                )
            columns[name] = pa.array([None if v is None else float(v) for v in values], type=pa.float64())
        return pa.table(columns)

    def flush(self) -> int:
        """Write the buffered rows as the next part (nothing when empty); the number of parts so far."""
        if not self._cleaned:
            self._remove_stale()
        if self._rows:
            buffer = io.BytesIO()
            pq.write_table(self._table(), buffer)
            _atomic.write_bytes(self.part_path(self._parts + 1), buffer.getvalue())
            self._parts += 1
            self._rows = []
        return self._parts

    def close(self) -> None:
        self.flush()


class MqttSink:
    """Each row published as one JSON object on an MQTT topic.

    The client keeps a persistent session under a fixed id and reconnects by itself; rows published
    while the broker is away are queued by the client and sent when it is back. :meth:`flush` waits (up
    to ``flush_timeout`` seconds) until the broker has acknowledged every QoS 1/2 row; :attr:`pending`
    counts those not acknowledged yet.

    Args:
        host: broker host.
        port: broker port.
        topic: the topic published to.
        client_id: the fixed client id.
        qos: publish QoS (1: at least once, the default).
        username: user name sent at connect.
        password: password for ``username``.
        connect_timeout: seconds to wait for the first connection (None: do not wait).
        flush_timeout: longest wait of :meth:`flush` for acknowledgements.
        protocol: MQTT version, ``"5"`` or ``"3.1.1"`` (for brokers without MQTT 5).

    """

    topic: str
    """The topic published to."""
    qos: int
    """The publish QoS."""
    flush_timeout: float
    """The longest wait of :meth:`flush`, in seconds."""

    def __init__(
        self,
        host: str,
        port: int,
        topic: str,
        *,
        client_id: str,
        qos: int = 1,
        username: str | None = None,
        password: str | None = None,
        connect_timeout: float | None = 10.0,
        flush_timeout: float = 10.0,
        protocol: MqttVersion = "5",
    ) -> None:
        if not isinstance(topic, str) or not topic or any(c in topic for c in "+#"):
            raise TwinferValueError(f"topic: expected a topic name without wildcards; received {topic!r}")
        self.topic = topic
        self.qos = check_qos(qos)
        self.flush_timeout = float(flush_timeout)
        self._infos: list[Any] = []
        self._conn = Connection(
            host, port, client_id, manual_ack=False, username=username, password=password, protocol=protocol
        )
        self._conn.wait_connected(connect_timeout)

    @property
    def connected(self) -> bool:
        """Whether the client is connected to the broker now."""
        return self._conn.connected

    @property
    def pending(self) -> int:
        """Rows published and not yet acknowledged by the broker."""
        self._infos = [info for info in self._infos if not info.is_published()]
        return len(self._infos)

    def write(self, rows: list[dict[str, Any]]) -> None:
        for row in _check_rows(rows):
            info = self._conn.client.publish(self.topic, _json_row(row), qos=self.qos)
            if self.qos > 0:
                self._infos.append(info)

    def flush(self) -> None:
        deadline = time.monotonic() + self.flush_timeout
        while self.pending and time.monotonic() < deadline:
            time.sleep(0.01)

    def close(self) -> None:
        self.flush()
        self._conn.close()
