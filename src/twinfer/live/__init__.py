"""A live twin: online estimation from a stream of timestamped frames (issue #54).

:class:`Twin` runs a compiled estimator (:func:`twinfer.compile`) on frames as they arrive, puts them onto
the model's steps (:class:`Clock`), raises condition-monitoring alarms (:class:`DriftAlarm`,
:class:`InnovationAlarm`) and snapshots itself so a restarted twin continues exactly.
"""

from twinfer.live._clock import Clock, RateError, Step
from twinfer.live._grid import GridTwin, PlacementWarning, grid_twin, pmu_buses, spare_buses
from twinfer.live._monitor import DriftAlarm, InnovationAlarm, Monitor, innovation_alarms
from twinfer.live._twin import CHUNK, Rows, Twin, TwinDiverged

__all__ = [
    "CHUNK",
    "Clock",
    "DriftAlarm",
    "GridTwin",
    "InnovationAlarm",
    "Monitor",
    "PlacementWarning",
    "RateError",
    "Rows",
    "Step",
    "Twin",
    "TwinDiverged",
    "grid_twin",
    "innovation_alarms",
    "pmu_buses",
    "spare_buses",
]
