"""The simulator of a tiled dataflow accelerator.

Pure ``jax.numpy``; never imports altair or ipywidgets. The implementation modules that hold a public
function of the same name are private (``_replay``, ``_batch``, ``_sweep``, ``_cost``, ``_compare``, ``_reconcile``,
``_thermal``), so ``dfit_nb.sim.replay`` is the function, never a module it shadows; import public names from
``dfit_nb.sim``.

>>> from dfit_nb import sim
>>> hw = sim.presets.get("scalesim_32")
>>> ds = sim.cost({"m": [128], "k": [256], "n": [64]}, hw, "os", memory="ideal")
>>> int(ds["cycles"][0])
2543
"""

from . import presets as presets
from ._area import AreaError as AreaError
from ._area import area as area
from ._area import power as power
from ._batch import replay_batch as replay_batch
from ._compare import CompareError as CompareError
from ._compare import compare as compare
from ._cost import cost as cost
from ._design import Design as Design
from ._design import DesignError as DesignError
from ._design import design as design
from ._optable import CostInputError as CostInputError
from ._prepare import REPLAY_DATAFLOWS as REPLAY_DATAFLOWS
from ._prepare import ReplayError as ReplayError
from ._reconcile import reconcile as reconcile
from ._replay import SpillWarning as SpillWarning
from ._replay import program_key as program_key
from ._replay import warm as warm
from ._sweep import sweep as sweep
from ._thermal import ThermalError as ThermalError
from ._thermal import thermal as thermal
from .calibration import Calibration as Calibration
from .calibration import calibrate as calibrate
from .hardware import Hardware as Hardware
from .hardware import HardwareError as HardwareError
from .kernels import FUSION_MODES as FUSION_MODES
from .kernels import FusionError as FusionError
from .machine import DATAFLOWS as DATAFLOWS
from .pareto import pareto_front as pareto_front
from .policy import Policy as Policy
from .policy import PolicyError as PolicyError
from .policy import replay as replay
from .policy import select_dataflows as select_dataflows
from .run import Run as Run
from .run import load_run as load_run
from .shapes import shape_sensitivity as shape_sensitivity
from .shapes import tail_latency as tail_latency

__all__ = ("DATAFLOWS", "FUSION_MODES", "REPLAY_DATAFLOWS", "AreaError", "Calibration", "CompareError",
           "CostInputError", "Design", "DesignError", "FusionError", "Hardware", "HardwareError", "Policy",
           "PolicyError", "ReplayError", "Run", "SpillWarning", "ThermalError", "area", "calibrate", "compare", "cost",
           "design", "load_run", "open_sweep", "pareto_front", "power", "presets", "program_key", "reconcile",
           "replay", "replay_batch", "select_dataflows", "shape_sensitivity", "sweep", "tail_latency", "thermal",
           "to_zarr", "warm")


def __getattr__(name: str) -> object:
    """``to_zarr`` and ``open_sweep`` are loaded on first use: their module subclasses Dask's callbacks, and
    ``import dfit_nb`` should not pay for importing Dask (0.1-0.2 s) when no lazy sweep is made."""
    if name in ("to_zarr", "open_sweep"):
        from . import scale

        return getattr(scale, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
