"""``dfit_nb.setup()``: the process-wide settings that make dfit_nb fast, made on request, never at import."""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from ._runtime import compile_cache as _compile_cache
from ._runtime import deferred_iri as _deferred_iri
from ._runtime import dispatch as _dispatch

__all__ = ["SetupReport", "setup"]

#: the keys of :class:`SetupReport` for the three things :func:`setup` does
CACHE = "jax_compilation_cache_dir"
DISPATCH = "jax_cpu_enable_async_dispatch"
IRI = f"sys.modules[{_deferred_iri.NAME!r}]"

_lock = threading.Lock()

#: why :func:`setup` leaves JAX's persistent cache alone, by :attr:`~dfit_nb._runtime.compile_cache.CacheState.source`
_CACHE_LEFT = {
    "off": f"switched off by {_compile_cache.ENV}",
    "jax": "configured in JAX by the user (JAX_COMPILATION_CACHE_DIR or jax.config)",
    "disabled": "jax_enable_compilation_cache is False",
}


@dataclass(frozen=True)
class SetupReport:
    """What one :func:`setup` call did.

    Attributes
    ----------
    changed : dict
        Each setting this call changed, with the value it gave it: ``jax_compilation_cache_dir`` and JAX's
        thresholds for what is written there, ``"atomic cache writes"`` (JAX's cache object replaced by one that
        writes each entry to a temporary file and renames it), ``jax_cpu_enable_async_dispatch`` and
        ``sys.modules['rfc3987_syntax']``. Empty when everything was done already.
    unchanged : dict
        Each of those settings this call left as it was, with the reason: set by an earlier ``setup()``, chosen by
        the user (an environment variable, ``jax.config``), switched off by a ``DFIT_NB_*`` variable, or too late
        (JAX's backends exist, the module is imported already).
    compilation_cache : str or None
        The directory of JAX's persistent compilation cache after the call (``None``: no persistent cache).
    """

    changed: dict[str, Any] = field(default_factory=dict)
    unchanged: dict[str, str] = field(default_factory=dict)
    compilation_cache: str | None = None

    def __str__(self) -> str:
        lines = [f"changed   {key} = {value!r}" for key, value in self.changed.items()]
        lines += [f"unchanged {key}: {why}" for key, why in self.unchanged.items()]
        return "\n".join(lines) or "nothing to do"


def _cache(changed: dict[str, Any], unchanged: dict[str, str]) -> str | None:
    import jax

    state = _compile_cache.configure()
    if state.changed:
        for name in state.changed:
            changed[name] = True if name == _compile_cache.ATOMIC_WRITES else jax.config.values[name]
        for name, env in (("jax_persistent_cache_min_compile_time_secs", _compile_cache.JAX_TIME_ENV),
                          ("jax_persistent_cache_min_entry_size_bytes", _compile_cache.JAX_SIZE_ENV)):
            if name not in state.changed:
                unchanged[name] = f"set by the user ({env} or jax.config)"
    elif state.source in ("dfit_nb", "env"):
        unchanged[CACHE] = "set by an earlier dfit_nb.setup()"
    else:
        unchanged[CACHE] = _CACHE_LEFT.get(state.source) or f"{state.source}: {state.reason}"
    return state.directory


def _dispatch_sync(changed: dict[str, Any], unchanged: dict[str, str]) -> None:
    why = _dispatch.reason_unchanged()
    if not why and _dispatch.configure():
        changed[DISPATCH] = False
    else:
        unchanged[DISPATCH] = why or _dispatch.reason_unchanged()


def _iri(changed: dict[str, Any], unchanged: dict[str, str]) -> None:
    if _deferred_iri.defer():
        changed[IRI] = "a stand-in that imports the module at the first IRI check"
        return
    value = os.environ.get(_deferred_iri.ENV, "").strip()
    module = sys.modules.get(_deferred_iri.NAME, False)
    if value.lower() in ("0", "off", "false", "no"):
        unchanged[IRI] = f"{_deferred_iri.ENV}={value}"
    elif isinstance(module, _deferred_iri.StandIn):
        unchanged[IRI] = "deferred already"
    elif module is not False:
        unchanged[IRI] = "too late: imported already"
    else:
        unchanged[IRI] = "not installed (it, or lark, which it needs)"


def setup() -> SetupReport:
    """Make the process-wide settings under which dfit_nb runs fastest, and say what changed.

    ``import dfit_nb`` changes nothing outside dfit_nb. ``setup()`` changes, for the whole process:

    1. JAX's persistent compilation cache: on, in ``~/.cache/dfit_nb/jax`` (``$XDG_CACHE_HOME/dfit_nb/jax``),
       with entries written atomically (a temporary file renamed into place, so another process never reads a
       half-written one) and every program that compiles for 0.2 s or more kept. A second process (the next
       ``dfit-nb report``, a new kernel) then loads dfit_nb's programs instead of compiling them again. Your
       own jitted functions are cached there too.
    2. JAX's CPU dispatch: synchronous (``jax_cpu_enable_async_dispatch=False``), which makes dfit_nb's many
       small programs faster. JAX reads it when it creates its CPU client, so call ``setup()`` before the
       process's first JAX computation; later it is reported as too late.
    3. ``rfc3987_syntax`` (an IRI checker that jsonschema imports, and Altair with it, where JupyterLab is
       installed) is imported at its first use rather than with jsonschema, saving about a second per process
       that draws a chart. Effective only before Altair is imported.

    The command-line tool, ``%load_ext dfit_nb`` and the tutorials call it. It never overrides what you
    configured: a cache directory or threshold set in JAX (``JAX_COMPILATION_CACHE_DIR``,
    ``jax.config.update``) is kept, and ``DFIT_NB_COMPILATION_CACHE=0`` (or a directory),
    ``DFIT_NB_SYNC_CPU_DISPATCH=0`` and ``DFIT_NB_DEFER_IRI=0`` switch each part off. Calling it again changes
    nothing more. A cache directory that cannot be used gives one
    :class:`~dfit_nb.errors.CompilationCacheWarning`, and dfit_nb runs on without a persistent cache.

    Returns
    -------
    SetupReport
        ``changed`` (setting -> the value given), ``unchanged`` (setting -> why it was left as it was) and
        ``compilation_cache`` (the cache directory in use, or ``None``).

    Examples
    --------
    >>> import dfit_nb
    >>> report = dfit_nb.setup()
    >>> again = dfit_nb.setup()  # idempotent: the second call changes nothing
    >>> again.changed
    {}
    >>> sorted(again.unchanged)
    ['jax_compilation_cache_dir', 'jax_cpu_enable_async_dispatch', "sys.modules['rfc3987_syntax']"]
    >>> again.compilation_cache == report.compilation_cache
    True
    """
    changed: dict[str, Any] = {}
    unchanged: dict[str, str] = {}
    with _lock:
        directory = _cache(changed, unchanged)
        _dispatch_sync(changed, unchanged)
        _iri(changed, unchanged)
    return SetupReport(changed, unchanged, directory)
