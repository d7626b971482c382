"""A recorded array as a stream delivers it: timestamped frames of named channels, a batch at a time.

A live twin (:class:`twinfer.live.Twin`) is fed frames ``(t, {channel: value})``; a stream (a file being
written, stdin, MQTT) delivers them a few at a time. :func:`record_frames` replays a recorded observation
array that way, so a twin run on a record sees what it would see live.

References:
    Issue #54 (a live twin): frames, sources and batches.

"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np


def record_frames(
    observations: np.ndarray, names: Sequence[str], dt: float, batch: int
) -> Iterator[list[tuple[float, dict[str, Any]]]]:
    """The rows of ``observations`` (T, m) at ``t = k dt`` as frames ``(t, {name: value})``.

    Args:
        observations: the recorded rows, one column per name.
        names: the channels' names.
        dt: the sampling step [s].
        batch: frames per yielded list (the last may be shorter).

    Yields:
        Lists of up to ``batch`` frames, in time order.

    """
    for start in range(0, observations.shape[0], batch):
        block = observations[start : start + batch]
        times = (start + np.arange(block.shape[0])) * dt
        yield [
            (t, dict(zip(names, row, strict=True)))
            for t, row in zip(times.tolist(), block.tolist(), strict=True)
        ]
