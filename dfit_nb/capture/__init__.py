"""Capture: a JAX program as an instrumented graph IR (primitive, region and lowering levels).

``capture(fn, *args, mode=...)`` returns a :class:`Trace`; see ``docs/architecture.md``.
This package never imports altair or ipywidgets.
"""

from .api import MODES as MODES
from .api import capture as capture
from .costs import OpCost as OpCost
from .costs import register_cost_rule as register_cost_rule
from .costs import registered_primitives as registered_primitives
from .regions import REGION_MODES as REGION_MODES
from .regions import ParameterRegionWarning as ParameterRegionWarning
from .trace import Overhead as Overhead
from .trace import Trace as Trace
from .trace import load_trace as load_trace

__all__ = (
           "MODES",
           "REGION_MODES",
           "OpCost",
           "Overhead",
           "ParameterRegionWarning",
           "Trace",
           "capture",
           "load_trace",
           "register_cost_rule",
           "registered_primitives",
)
