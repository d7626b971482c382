"""Atomic file writing for run folders: a crash never leaves a half-written artefact."""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twinfer._atomic import write_bytes, write_npz

__all__ = ["to_toml", "write_figure", "write_json", "write_npz", "write_text"]


def write_text(path: Path, text: str) -> Path:
    """Write a text file atomically (temporary file in the same folder, then rename)."""
    return write_bytes(path, text.encode())


def write_json(path: Path, payload: Any) -> Path:
    """Write JSON atomically; NaN and infinity are refused (JSON has no such numbers)."""
    return write_text(path, json.dumps(payload, indent=2, sort_keys=True, allow_nan=False) + "\n")


def write_figure(path: Path, figure: Any, dpi: int = 120) -> Path:
    """Save a matplotlib figure as PNG atomically and close it, cropped to its artists.

    The crop is ``bbox_inches="tight"``'s (the artists' extent padded by ``savefig.pad_inches``), taken
    from the canvas's renderer before saving: given ``"tight"``, ``savefig`` renders the whole figure
    once to find the extent and again to write it, so this draws each figure once (the same pixels).
    """
    import matplotlib
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.set_dpi(dpi)
    extent = figure.get_tightbbox(figure.canvas.get_renderer())
    crop = extent.padded(matplotlib.rcParams["savefig.pad_inches"])
    figure.savefig(buffer, format="png", dpi=dpi, bbox_inches=crop)
    plt.close(figure)
    return write_bytes(path, buffer.getvalue())


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _toml_string(text: str) -> str:
    """A TOML basic string holding exactly ``text``.

    Only the quote, the backslash and control characters are escaped; every other character is written
    as itself (UTF-8), never as a JSON-style surrogate pair (a backslash-u escape per half), which TOML
    rejects.

    Raises:
        ValueError: ``text`` holds a lone surrogate (undecodable bytes of a file name, say): no TOML
            string, and no UTF-8 file, can hold one.

    """
    out = []
    for char in text:
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError(
                f"config string {text!r}: expected Unicode text; it holds the lone surrogate "
                f"U+{code:04X} (undecodable bytes), which a TOML file cannot hold."
            )
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _toml_string(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):  # an inline table (a spec's live.groups)
        items = (f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None)
        return "{" + ", ".join(items) + "}"
    raise TypeError(
        f"config value {value!r}: expected bool, int, float, str, list or table; got {type(value)}"
    )


def to_toml(table: Mapping[str, Any]) -> str:
    """Render a mapping (one level of sub-tables, deeper ones inline) as TOML that ``tomllib`` reads back.

    Keys that are not bare TOML keys are quoted; ``None`` values are left out (TOML has no null).
    """
    lines = []
    nested = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    for key, value in table.items():
        if key not in nested and value is not None:
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    for key, sub in nested.items():
        lines.append(f"\n[{_toml_key(key)}]")
        lines.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in sub.items() if v is not None)
    return "\n".join(lines) + "\n"
