"""Events: the schema shared by simulated and measured events, the ``ds.dfit`` accessor, exporters.

This floor sits beside capture, below sim: it imports neither sim nor views.
"""

from . import schema
from .schema import EVENT_VARS, KINDS, EventSchemaError, events_dataset

__all__ = ["EVENT_VARS", "KINDS", "EventSchemaError", "events_dataset", "schema"]
