"""Events: the schema shared by simulated and measured events, the ``ds.dfit`` accessor, exporters.

This floor sits beside capture, below sim: it imports neither sim nor views.
"""

from . import accessor, binning, schema
from .measured import measured_events
from .perfetto import to_perfetto
from .schema import EVENT_VARS, KINDS, EventSchemaError, events_dataset

__all__ = ["EVENT_VARS", "KINDS", "EventSchemaError", "accessor", "binning", "events_dataset", "measured_events",
           "schema", "to_perfetto"]
