"""The graph engines' caches of compiled programs, and of the functions those programs are keyed by.

A graph's program depends on its structure (its subsystems' functions, shapes and ports, its interfaces'
laws and ends, the schedule), never on its numbers, so graphs that differ only in numbers share one
compiled program. Every such cache of the package's graph engines lives here, so that
:func:`clear_compiled` drops them all at once.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import jax


class StructureCache:
    """``build()`` once per structure ``key()``, kept least recently used first (``size`` None: unbounded).

    A key that cannot be formed or hashed (an unhashable law or function) builds anew, unkept.
    """

    __slots__ = ("_entries", "name", "size")

    def __init__(self, name: str, size: int | None):
        self.name = name
        self.size = size
        self._entries: collections.OrderedDict[Any, Any] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Callable[[], Any], build: Callable[[], Any]) -> Any:
        """The entry of structure ``key()``, built by ``build()`` when absent."""
        try:
            k = key()
            hash(k)
        except TypeError:
            return build()
        if k in self._entries:
            self._entries.move_to_end(k)
            return self._entries[k]
        built = self._entries[k] = build()
        while self.size is not None and len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return built

    def clear(self) -> None:
        self._entries.clear()


COMPILED = StructureCache("message-passing programs (compiled_for)", 16)
BANDED = StructureCache("banded scans (banded_estimate)", 8)
BANDED_JACOBIANS = StructureCache("banded_estimate's structure Jacobians", 16)
MONOLITHIC = StructureCache("central models' functions (Graph.monolithic)", 16)
JACOBIANS = StructureCache("model_graph's dependence Jacobians", 16)
GROUP_NODES = StructureCache("model_graph's subsystem functions", 64)
SEGMENT_NODES = StructureCache("chain_graph's segment functions", None)
CACHES = (COMPILED, BANDED, BANDED_JACOBIANS, MONOLITHIC, JACOBIANS, GROUP_NODES, SEGMENT_NODES)


def clear_compiled() -> None:
    """Drop every compiled graph program this process holds (graphs, central models, banded scans).

    A compiled program keeps its machine code mapped until it is dropped; a process that compiles many
    large graphs one after another (``chain-scaling``'s sizes) can exhaust the kernel's per-process map
    count (``vm.max_map_count``, 65530 by default: "LLVM ERROR: Unable to allocate section memory"). A
    banded scan of 64 two-mass subsystems holds ~18,000 maps. Call this between graphs of different
    structure that will not run again; they are recompiled if they do.
    """
    for cache in CACHES:
        cache.clear()
    jax.clear_caches()
