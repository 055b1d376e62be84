"""Errors and warnings dfit_nb raises, so users can catch or filter them by class."""

from __future__ import annotations


class DfitError(Exception):
    """Base class of every error dfit_nb raises on purpose."""


class CaptureError(DfitError, RuntimeError):
    """The function could not be traced, lowered or run for capture; the cause is chained."""


class DfitWarning(UserWarning):
    """Base class of dfit_nb's warnings."""


class OpaquePrimitiveWarning(DfitWarning):
    """A primitive without a cost rule was recorded as an 'opaque' op."""


class MeasurementWarning(DfitWarning):
    """A runtime measurement was incomplete (e.g. the profiler saw no events for some ops)."""
