"""Errors and warnings dfit_nb raises, so users can catch or filter them by class."""

from __future__ import annotations


class DfitError(Exception):
    """Base class of every error dfit_nb raises on purpose."""


class CaptureError(DfitError, RuntimeError):
    """The function could not be traced, lowered or run for capture; the cause is chained."""


class SaveError(DfitError, OSError):
    """A result could not be saved; whatever was at the path before is unchanged.

    Also an ``OSError``: a failed write (a full disk, no permission) keeps the cause's ``errno``, chained.
    """


class SaveRefusedError(SaveError):
    """The save was refused before writing anything: the path holds something dfit_nb did not write (or is a
    directory such as ``.``, ``..``, ``/`` or the home directory), so replacing it could destroy a user's files."""


class LoadRefusedError(DfitError, OSError):
    """The load was refused before opening anything: the path is not a regular file or folder (a FIFO, a socket, a
    device), whose reading could block forever or consume what another program writes to it."""


class IntegrityError(DfitError):
    """A saved file's values differ from the checksums saved with them (a damaged disk, copy or download, a deleted
    Zarr chunk): the load was refused rather than return wrong values. The message names the file and the
    variable."""


class FormatVersionError(DfitError):
    """The file was written by a newer major version of dfit_nb's file format than this version reads."""


class DfitWarning(UserWarning):
    """Base class of dfit_nb's warnings."""


class OpaquePrimitiveWarning(DfitWarning):
    """A primitive without a cost rule was recorded as an 'opaque' op."""


class MeasurementWarning(DfitWarning):
    """A runtime measurement was incomplete (e.g. the profiler saw no events for some ops)."""


class CompilationCacheWarning(DfitWarning):
    """JAX's persistent compilation cache could not be used (its directory cannot be created or written, or every
    user may write to it): dfit_nb runs on without it, compiling afresh in every new process. Set
    ``DFIT_NB_COMPILATION_CACHE`` to a directory only you can write, or to ``0`` to switch the cache off."""
