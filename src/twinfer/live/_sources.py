"""Where a live twin's frames come from: a file being written, a stream (standard input), an MQTT topic.

A *frame* is a time plus the values of any subset of the channels; a missing channel is a missing
measurement. Every source reads frames as they come and hands them out by :meth:`Source.poll` as
:class:`Record` s, together with what it could not use as :class:`Dropped` items (counted and reported by
the twin, never silently lost):

* a malformed line or JSON payload, or a frame without a usable time, drops the whole frame
  (``"malformed"``, ``"no time"``, ``"non-numeric"`` or ``"non-finite"`` naming the time field);
* a non-numeric or non-finite value of a known channel drops that value, the rest of the frame is kept;
* a value of a channel that is not among ``channels`` is dropped as ``"unknown channel"``, each time;
* ``"truncated"`` and ``"rotated"`` are events of a followed file, not data.

An empty CSV field and a JSON ``null`` are missing values, not errors; a JSON value may be a number or a
string holding one. Blank lines are skipped.

Each source has a JSON-able :meth:`Source.position`: a new source built with ``start=position`` continues
exactly after the last item handed out, so a twin that snapshots the position with its state resumes
without losing or repeating a frame. :meth:`Source.commit` tells the source that everything up to a
position is in a snapshot (an MQTT source acknowledges the broker's messages only then).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Literal, Protocol, TypeVar

from twinfer.errors import TwinferValueError
from twinfer.live._mqtt import Connection, MqttVersion, check_qos

__all__ = ["Dropped", "FileSource", "MqttSource", "Record", "Source", "StreamSource"]

Format = Literal["csv", "jsonl"]
_T = TypeVar("_T")

_CHUNK = 1 << 20
"""Bytes read from a file per read call (1 MiB): bounds the memory one poll takes."""

_MAX_ITEMS = 10_000
"""Most frames (lines or messages) parsed in one poll: a backlog is handed out in bounded pieces."""


@dataclass(frozen=True)
class Record:
    """One frame as read: its time and the values of the known channels it carries.

    Attributes:
        t: the frame's time (finite).
        values: channel name -> finite float; a channel the frame does not carry is absent.
        position: the JSON-able source position just after this record (resume from it).

    """

    t: float
    values: dict[str, float]
    position: Any


@dataclass(frozen=True)
class Dropped:
    """Something a source read and could not use, or an event of a followed file.

    Attributes:
        reason: one of ``"malformed"``, ``"no time"``, ``"non-numeric"``, ``"non-finite"``,
            ``"unknown channel"`` (data), ``"truncated"``, ``"rotated"`` (events).
        detail: names the field, the expected and the received value.
        position: the source position just after the item.

    """

    reason: str
    detail: str
    position: Any


class Source(Protocol):
    """What the live twin reads frames from."""

    def poll(self, timeout: float) -> list[Record | Dropped]:
        """What arrived, in order, waiting at most ``timeout`` seconds for the first item."""
        ...

    def position(self) -> Any:
        """JSON-able position after the last item handed out; ``start=`` of a new source resumes there."""
        ...

    def commit(self, position: Any) -> None:
        """Everything up to ``position`` is in a snapshot (an MQTT source acknowledges it now)."""
        ...

    def close(self) -> None:
        """Release the file, thread or connection."""
        ...


def _check_channels(channels: Iterable[str], time_key: str) -> frozenset[str]:
    if not isinstance(time_key, str) or not time_key:
        raise TwinferValueError(f"time_key: expected a non-empty column or key name; received {time_key!r}")
    names = [] if isinstance(channels, str) else list(channels)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise TwinferValueError(
            f"channels: expected a non-empty sequence of channel names; received {channels!r}"
        )
    if time_key in names:
        raise TwinferValueError(
            f"channels: expected names other than the time key {time_key!r}; received {names!r}"
        )
    return frozenset(names)


def _check_format(format: object) -> Format:
    if format not in ("csv", "jsonl"):
        raise TwinferValueError(f"format: expected 'csv' or 'jsonl'; received {format!r}")
    return format  # type: ignore[return-value]


def _number(field: str, raw: object) -> tuple[float | None, str, str]:
    """``(value, reason, detail)``: a finite float and ``""``, or None and why it is unusable."""
    if isinstance(raw, str):
        text = raw.strip()
        try:
            value = float(text)
        except ValueError:
            return None, "non-numeric", f"{field}: expected a number; received {raw!r}"
    elif isinstance(raw, int | float) and not isinstance(raw, bool):
        try:
            value = float(raw)
        except OverflowError:
            return None, "non-finite", f"{field}: expected a finite number; received {raw!r}"
    else:
        return None, "non-numeric", f"{field}: expected a number; received {raw!r}"
    if not math.isfinite(value):
        return None, "non-finite", f"{field}: expected a finite number; received {raw!r}"
    return value, "", ""


class _Frames:
    """The one rule turning a mapping of field -> raw value into a Record and Dropped items."""

    def __init__(self, channels: frozenset[str], time_key: str) -> None:
        self.channels = channels
        self.time_key = time_key

    def parse(self, fields: Mapping[str, object], position: Any) -> tuple[Record | None, list[Dropped]]:
        """The frame's Record (None when the frame is dropped whole) and the values dropped from it."""
        key = self.time_key
        raw_t = fields.get(key)
        if raw_t is None or raw_t == "":
            received = "no such field" if key not in fields else repr(raw_t)
            return None, [
                Dropped("no time", f"{key}: expected the frame's time; received {received}", position)
            ]
        t, reason, detail = _number(key, raw_t)
        if t is None:
            return None, [Dropped(reason, detail, position)]
        values: dict[str, float] = {}
        dropped: list[Dropped] = []
        for name, raw in fields.items():
            if name == key or raw is None or raw == "":
                continue
            if name not in self.channels:
                dropped.append(
                    Dropped(
                        "unknown channel",
                        f"channel: expected one of {sorted(self.channels)}; received {name!r}",
                        position,
                    )
                )
                continue
            value, reason, detail = _number(name, raw)
            if value is None:
                dropped.append(Dropped(reason, f"{detail} at t={t!r}", position))
            else:
                values[name] = value
        return Record(t, values, position), dropped

    def json(self, raw: str | bytes, position: Any, what: str, *, lists: bool) -> list[Record | Dropped]:
        """The items of JSON text ``raw``: an object, or (when ``lists``) a list of objects too."""
        try:
            obj = json.loads(raw)
        except ValueError as err:
            return [
                Dropped("malformed", f"{what}: expected JSON; received {_clip(repr(raw))} ({err})", position)
            ]
        items: list[Record | Dropped] = []
        for one in obj if lists and isinstance(obj, list) else [obj]:
            if not isinstance(one, dict):
                items.append(
                    Dropped(
                        "malformed", f"{what}: expected a JSON object; received {_clip(repr(one))}", position
                    )
                )
                continue
            record, dropped = self.parse(one, position)
            items.extend(dropped)
            if record is not None:
                items.append(record)
        return items


def _clip(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


class _Lines:
    """Parses lines of CSV (the first line is the header) or JSON lines into items."""

    def __init__(self, frames: _Frames, format: Format, header: list[str] | None = None) -> None:
        self.frames = frames
        self.format = format
        self.header = header

    def line(self, raw: bytes, position: Any, where: str) -> list[Record | Dropped]:
        """The items of one complete line (without its newline); the header line gives none."""
        try:
            text = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as err:
            return [
                Dropped(
                    "malformed", f"line: expected UTF-8 text; received {_clip(repr(raw))} ({err})", position
                )
            ]
        if not text.strip():
            return []
        if self.format == "jsonl":
            return self.frames.json(text, position, "line", lists=False)
        cells = next(csv.reader([text]))
        if self.header is None:
            header = [c.strip().lstrip("\ufeff") for c in cells]  # a byte order mark is not a name
            if len(set(header)) < len(header):
                raise TwinferValueError(
                    f"header of {where}: expected distinct column names; received {header!r}"
                )
            if self.frames.time_key not in header:
                raise TwinferValueError(
                    f"header of {where}: expected a time column {self.frames.time_key!r} (time_key); "
                    f"received columns {header!r}"
                )
            self.header = header
            return []
        if len(cells) != len(self.header):
            return [
                Dropped(
                    "malformed",
                    f"line: expected {len(self.header)} fields ({', '.join(self.header)}); received "
                    f"{len(cells)}: {_clip(text)}",
                    position,
                )
            ]
        record, dropped = self.frames.parse(dict(zip(self.header, cells, strict=True)), position)
        return [*dropped, record] if record is not None else list(dropped)


def _check_start(start: object, keys: Sequence[str]) -> dict[str, Any] | None:
    if start is None:
        return None
    if not isinstance(start, dict) or any(k not in start for k in keys):
        raise TwinferValueError(
            f"start: expected a position from this kind of source (a mapping with keys {list(keys)}); "
            f"received {start!r}"
        )
    return dict(start)


class FileSource:
    """Follows a CSV or JSON-lines file that is still being written, as ``tail -f`` does.

    The first line of a CSV file is its header (the column names; ``time_key`` must be one). A last line
    without its newline is kept until the newline arrives. A file that shrinks below what was read
    (truncated in place) is read again from its start, after a ``"truncated"`` event; when the path names
    a new file (rotated: renamed away and created anew), the old file is read to its end, then the new
    one from its start, after a ``"rotated"`` event. A path that does not exist yet is waited for.

    The position ``{"inode", "offset", "header"}`` is the byte offset just after the last line handed
    out (not after what was merely read), with the header already read; ``start=`` resumes there. A
    start position of another inode (the file was rotated while the twin was down) or beyond the end of
    the file (truncated) starts the file from its beginning, after the event.

    Args:
        path: the file.
        channels: the known channel names.
        time_key: the time column (CSV) or key (JSON lines).
        format: ``"csv"`` or ``"jsonl"``.
        start: a position from :meth:`position` to resume from.
        poll_interval: seconds between two looks at a file that has nothing new.

    """

    def __init__(
        self,
        path: str | Path,
        channels: Iterable[str],
        *,
        time_key: str = "t",
        format: Format = "csv",
        start: Any = None,
        poll_interval: float = 0.05,
    ) -> None:
        self.path = Path(path)
        self._lines = _Lines(_Frames(_check_channels(channels, time_key), time_key), _check_format(format))
        if not isinstance(poll_interval, int | float) or not 0 < poll_interval <= 60:
            raise TwinferValueError(f"poll_interval: expected seconds in (0, 60]; received {poll_interval!r}")
        self.poll_interval = float(poll_interval)
        begun = _check_start(start, ("inode", "offset", "header"))
        self._start = begun
        self._handle: IO[bytes] | None = None
        self._inode: int | None = None
        self._offset = 0  # just after the last complete line parsed (and handed out)
        self._buffer = b""  # read after _offset, not yet a complete line

    def _open(self, items: list[Record | Dropped]) -> bool:
        """Open the path if it is not open yet (False while it does not exist); events go to ``items``."""
        if self._handle is not None:
            return True
        try:
            handle = open(self.path, "rb")  # noqa: SIM115  (kept open while following the file)
        except FileNotFoundError:
            return False
        info = os.fstat(handle.fileno())
        self._handle, self._inode, self._offset, self._buffer = handle, info.st_ino, 0, b""
        start, self._start = self._start, None
        if start is None:
            return True
        offset = start["offset"]
        if start["inode"] != info.st_ino:
            items.append(
                self._event(
                    "rotated",
                    f"inode: expected {start['inode']} (the file of the snapshot); received "
                    f"{info.st_ino}, a new file read from its start",
                )
            )
        elif isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= info.st_size:
            items.append(
                self._event(
                    "truncated",
                    f"offset: expected at most the file size {info.st_size}; received "
                    f"{offset!r}, read from its start",
                )
            )
        else:
            handle.seek(offset)
            self._offset = offset
            header = start["header"]
            self._lines.header = [str(h) for h in header] if header is not None else None
        return True

    def _event(self, reason: str, detail: str) -> Dropped:
        self._lines.header = None
        return Dropped(reason, f"{self.path}: {detail}", self.position())

    def position(self) -> dict[str, Any]:
        if self._start is not None:
            return dict(self._start)
        header = self._lines.header
        return {"inode": self._inode, "offset": self._offset, "header": list(header) if header else None}

    def _parse(self, items: list[Record | Dropped], final: bool = False) -> None:
        """Parse the complete lines of the buffer; when ``final`` (the file is done) its rest as well."""
        while len(items) < _MAX_ITEMS and self._buffer:
            end = self._buffer.find(b"\n")
            if end >= 0:
                raw, used = self._buffer[:end], end + 1
            elif final or len(self._buffer) > _CHUNK:  # the rest of a finished file; or not a line file
                raw, used = self._buffer, len(self._buffer)
            else:
                return
            self._buffer = self._buffer[used:]
            self._offset += used
            items.extend(self._lines.line(raw, self.position(), str(self.path)))

    def _changed(self, handle: IO[bytes], items: list[Record | Dropped]) -> None:
        """Handle a truncation or a rotation of the file, if one happened."""
        read_to = self._offset + len(self._buffer)
        if os.fstat(handle.fileno()).st_size < read_to:
            handle.seek(0)
            self._offset, self._buffer = 0, b""
            items.append(
                self._event(
                    "truncated",
                    f"size: expected at least {read_to} bytes (read so far); received a "
                    "shorter file, read from its start",
                )
            )
            return
        try:
            inode = os.stat(self.path).st_ino
        except FileNotFoundError:
            return  # renamed away and the new file not there yet: the old one may still grow
        if inode == self._inode:
            return
        while chunk := handle.read(_CHUNK):  # finish the old file to its end
            self._buffer += chunk
            self._parse(items)
            if len(items) >= _MAX_ITEMS:  # hand these out first; the old file's rest at the next polls
                return
        self._parse(items, final=True)
        handle.close()
        old, self._handle = self._inode, None
        self._open(items)
        items.append(
            self._event(
                "rotated",
                f"inode: expected {old} (the file being read); received {self._inode}, a "
                "new file read from its start",
            )
        )

    def poll(self, timeout: float) -> list[Record | Dropped]:
        deadline = time.monotonic() + max(float(timeout), 0.0)
        while True:
            items: list[Record | Dropped] = []
            if self._open(items):
                self._parse(items)
                handle = self._handle
                if not items and handle is not None:
                    chunk = handle.read(_CHUNK)
                    if chunk:
                        self._buffer += chunk
                        self._parse(items)
                    else:
                        self._changed(handle, items)
            if items:
                return items
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            time.sleep(min(self.poll_interval, left))

    def commit(self, position: Any) -> None:
        """Nothing to do: a file keeps its lines; the position in the snapshot is enough."""

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _take(inbox: queue.SimpleQueue[_T], timeout: float) -> list[_T]:
    """What ``inbox`` holds, at most :data:`_MAX_ITEMS`, waiting up to ``timeout`` s for the first."""
    try:
        taken = [inbox.get(timeout=max(float(timeout), 0.0))]
    except queue.Empty:
        return []
    while len(taken) < _MAX_ITEMS:
        try:
            taken.append(inbox.get_nowait())
        except queue.Empty:
            break
    return taken


class StreamSource:
    """Reads CSV (header first) or JSON lines from a stream such as standard input.

    A daemon thread reads the stream line by line, so :meth:`poll` never waits longer than its timeout;
    :attr:`finished` says when the stream has ended and every line was handed out. A stream cannot be
    rewound: the position ``{"line": n}`` (lines handed out) is for reports, and ``commit`` does nothing.

    Args:
        stream: a binary stream (``sys.stdin.buffer``) or a text stream.
        channels: the known channel names.
        time_key: the time column or key.
        format: ``"csv"`` or ``"jsonl"``.

    """

    def __init__(
        self,
        stream: IO[bytes] | IO[str],
        channels: Iterable[str],
        *,
        time_key: str = "t",
        format: Format = "csv",
    ) -> None:
        self._lines = _Lines(_Frames(_check_channels(channels, time_key), time_key), _check_format(format))
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._count = 0
        self._ended = False
        self._error = ""
        self.name = str(getattr(stream, "name", "the stream"))
        self._thread = threading.Thread(target=self._read, args=(stream,), name="twinfer-stream", daemon=True)
        self._thread.start()

    def _read(self, stream: IO[bytes] | IO[str]) -> None:
        try:
            for line in iter(stream.readline, "" if isinstance(stream, io.TextIOBase) else b""):
                self._queue.put(line.encode("utf-8") if isinstance(line, str) else line)
        except (OSError, ValueError) as err:  # closed under us: the stream has ended
            self._error = str(err)
        finally:
            self._queue.put(None)

    @property
    def finished(self) -> bool:
        """Whether the stream has ended and all its lines were handed out."""
        return self._ended

    def position(self) -> dict[str, int]:
        return {"line": self._count}

    def poll(self, timeout: float) -> list[Record | Dropped]:
        items: list[Record | Dropped] = []
        if self._ended:
            return items
        for line in _take(self._queue, timeout):
            if line is None:  # the end, put last
                self._ended = True
                break
            self._count += 1
            items.extend(self._lines.line(line.rstrip(b"\n"), self.position(), self.name))
        return items

    def commit(self, position: Any) -> None:
        """Nothing to do: a stream cannot be read again."""

    def close(self) -> None:
        """Stop handing out lines (the reading thread is a daemon and ends with the stream)."""
        self._ended = True


@dataclass
class _Message:
    """A received QoS 1/2 message awaiting its acknowledgement."""

    mid: int
    qos: int
    session: int  # which connection delivered it: an ack only goes back on that one
    last_t: float | None  # the latest time among its frames handed out (None: no usable frame)


class MqttSource:
    """Subscribes to an MQTT topic whose payloads are frames as JSON.

    A payload is one JSON object ``{"t": ..., "<channel>": value, ...}`` or a list of them. The client
    keeps a persistent session (fixed ``client_id``, ``clean_session=False``): with QoS 1 the broker keeps
    the frames published while the twin is down. Messages are acknowledged only in :meth:`commit`, in the
    order they came (MQTT 3.1.1 section 4.6), once the twin has snapshotted the frames up to the given
    position: a twin killed before its snapshot is sent the unacknowledged messages again when it
    reconnects under the same id. The client reconnects by itself when the broker goes away and comes
    back (and subscribes again: a restarted broker may have lost the session); :attr:`connected` says
    whether it is connected now.

    The position is the latest frame time handed out (None before any); ``start=`` sets it. Frames at or
    before it that come again after a restart are handed out as usual: the twin drops them as duplicates.

    Brokers bound how many unacknowledged messages they send a client: with MQTT 5 the client's Receive
    Maximum (65535 here), with MQTT 3.1.1 a limit of their own (mosquitto's ``max_inflight_messages``,
    20). They also bound how many they keep for a client while it is away (mosquitto's
    ``max_queued_messages``, 1000). A twin that commits only at its snapshots needs those limits above
    the messages of one snapshot interval: batch frames into list payloads, or raise the broker's limits.

    Args:
        host: broker host.
        port: broker port.
        topic: topic filter to subscribe to.
        channels: the known channel names.
        client_id: the fixed client id under which the broker keeps the session.
        qos: subscription QoS (1: at least once, the default).
        time_key: the key of the frame time.
        start: a position from :meth:`position`.
        username: user name (brokers that keep sessions only for known users need one).
        password: password for ``username``.
        connect_timeout: seconds to wait for the first connection (None: do not wait).
        protocol: MQTT version, ``"5"`` or ``"3.1.1"`` (for brokers without MQTT 5).

    """

    def __init__(
        self,
        host: str,
        port: int,
        topic: str,
        channels: Iterable[str],
        *,
        client_id: str,
        qos: int = 1,
        time_key: str = "t",
        start: float | None = None,
        username: str | None = None,
        password: str | None = None,
        connect_timeout: float | None = 10.0,
        protocol: MqttVersion = "5",
    ) -> None:
        self._frames = _Frames(_check_channels(channels, time_key), time_key)
        if not isinstance(topic, str) or not topic:
            raise TwinferValueError(f"topic: expected a non-empty topic filter; received {topic!r}")
        if start is not None:
            value, _, detail = _number("start", start)
            if value is None:
                raise TwinferValueError(f"{detail} (a position of an MQTT source: the last frame time)")
            start = value
        self.topic = topic
        self.qos = check_qos(qos)
        self._last_t: float | None = start
        self._inbox: queue.SimpleQueue[tuple[int, int, int, bytes]] = queue.SimpleQueue()
        self._unacked: deque[_Message] = deque()
        self._session = 0
        self._lock = threading.Lock()
        self._conn = Connection(
            host,
            port,
            client_id,
            manual_ack=True,
            username=username,
            password=password,
            on_connect=self._new_session,
            subscribe=(topic, self.qos),
            on_message=self._on_message,
            protocol=protocol,
        )
        self._conn.wait_connected(connect_timeout)

    def _new_session(self, client: Any, session_present: bool) -> None:
        with self._lock:
            self._session += 1

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        with self._lock:
            session = self._session
        self._inbox.put((int(message.mid), int(message.qos), session, bytes(message.payload)))

    @property
    def connected(self) -> bool:
        """Whether the client is connected to the broker now."""
        return self._conn.connected

    @property
    def last_error(self) -> str:
        """Why the connection was last lost or refused (empty: never)."""
        return self._conn.last_error

    def position(self) -> float | None:
        return self._last_t

    def _items(self, payload: bytes) -> list[Record | Dropped]:
        """The payload's items, each with the position after it (the latest frame time so far)."""
        items = self._frames.json(payload, None, f"payload on {self.topic!r}", lists=True)
        for k, item in enumerate(items):
            if isinstance(item, Record):
                self._last_t = item.t if self._last_t is None else max(self._last_t, item.t)
            items[k] = replace(item, position=self._last_t)
        return items

    def poll(self, timeout: float) -> list[Record | Dropped]:
        items: list[Record | Dropped] = []
        for mid, qos, session, payload in _take(self._inbox, timeout):
            got = self._items(payload)
            items.extend(got)
            if qos > 0:
                times = [i.t for i in got if isinstance(i, Record)]
                with self._lock:
                    self._unacked.append(_Message(mid, qos, session, max(times) if times else None))
        return items

    def commit(self, position: Any) -> None:
        """Acknowledge, in order, the messages whose frames are all at or before ``position``."""
        with self._lock:
            while self._unacked:
                first = self._unacked[0]
                if first.last_t is not None and (position is None or first.last_t > position):
                    return
                self._unacked.popleft()
                if first.session == self._session:  # older ones the broker sends again (or has lost)
                    self._conn.client.ack(first.mid, first.qos)

    def close(self) -> None:
        """Disconnect cleanly; unacknowledged messages stay with the broker for the next session."""
        self._conn.close()
