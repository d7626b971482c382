"""Facts about the machine a run has: the memory it can still take.

Read before a run starts, so a run that cannot fit is refused with a message instead of being killed.
"""

from __future__ import annotations

import os
from pathlib import Path


def available_memory() -> int | None:
    """Bytes of memory this process can still take, None where it is not known.

    The kernel's ``MemAvailable``, capped by the cgroup's headroom when the process runs in a container.
    """
    candidates: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                candidates.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        current = Path("/sys/fs/cgroup/memory.current").read_text().strip()
        if limit != "max":
            candidates.append(max(int(limit) - int(current), 0))
    except (OSError, ValueError):
        pass
    if not candidates:
        try:
            candidates.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (OSError, ValueError, AttributeError):
            return None
    return min(candidates)
