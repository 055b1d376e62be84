"""The simulator of a tiled dataflow accelerator.

Pure ``jax.numpy``; never imports altair or ipywidgets.

>>> from dfit_nb import sim
>>> hw = sim.presets.get("scalesim_32")
>>> ds = sim.cost({"m": [128], "k": [256], "n": [64]}, hw, "os", memory="ideal")
>>> int(ds["cycles"][0])
2543
"""

from . import presets as presets
from .compare import compare as compare
from .cost import cost as cost
from .grid import sweep as sweep
from .hardware import Hardware as Hardware
from .hardware import HardwareError as HardwareError
from .machine import DATAFLOWS as DATAFLOWS
from .policy import Policy as Policy
from .policy import select_dataflows as select_dataflows
from .reconcile import reconcile as reconcile
from .replay import replay as replay
from .replay import replay_batch as replay_batch
from .run import Run as Run
from .run import load_run as load_run
from .shapes import shape_sensitivity as shape_sensitivity
from .shapes import tail_latency as tail_latency

__all__ = ("DATAFLOWS", "Hardware", "HardwareError", "Policy", "Run", "compare", "cost", "load_run", "presets",
           "reconcile", "replay", "replay_batch", "select_dataflows", "shape_sensitivity", "sweep", "tail_latency")
