"""JAX's persistent compilation cache for dfit_nb's programs, switched on by :func:`dfit_nb.setup`.

Almost all of a first ``dfit-nb report`` or a first ``replay`` in a fresh kernel is XLA compiling the replay
programs (1-10 s each); the same programs run again in 0.1-0.9 s. JAX can keep compiled executables on disk
(``jax_compilation_cache_dir``) and load them in a later process instead of compiling again. ``import dfit_nb``
leaves that cache as it finds it; :func:`configure`, which :func:`dfit_nb.setup` calls (and with it the CLI, the
IPython extension and the tutorials), points it at ``$XDG_CACHE_HOME/dfit_nb/jax`` (``~/.cache/dfit_nb/jax`` when
``XDG_CACHE_HOME`` is unset or not an absolute path, as the XDG base directory rule says) unless told otherwise:

* ``DFIT_NB_COMPILATION_CACHE=0`` (or ``off``, ``false``, ``no``): dfit_nb sets nothing;
* ``DFIT_NB_COMPILATION_CACHE=<path>``: that directory (``~`` expanded, made absolute when ``setup()`` runs);
* a cache directory configured in JAX itself (``JAX_COMPILATION_CACHE_DIR``, or
  ``jax.config.update("jax_compilation_cache_dir", ...)`` before ``setup()``) is never overridden, and neither is
  ``jax_enable_compilation_cache=False``, nor a threshold the user set (by environment variable or a value other
  than JAX's default);
* a directory that cannot be created or written (a read-only home), or one that every user may write to (JAX
  runs the executables it loads from it), gives one :class:`CompilationCacheWarning` and dfit_nb runs on without
  a persistent cache. A directory dfit_nb creates is private to the user (mode 0700).

JAX's cache is process-wide: once it is on, a user's own jitted functions that compile for longer than the
threshold are cached too. JAX reads the directory at the first compile after it is set, so ``setup()`` works at
any point before the programs it should cache are compiled; ``configure`` costs a ``mkdir``, a ``stat`` and one
small probe file.

Writes are atomic. JAX 0.10's file cache (``jax._src.lru_cache.LRUCache.put``) writes an entry in place, with
``Path.write_bytes`` on its final name, so another process that shares the directory (a second report, a notebook
kernel, a test worker) can find the name and read a truncated entry (``zlib.error: incomplete or truncated
stream``, a warning JAX turns into a fresh compile). :func:`configure` therefore gives JAX, before its first use
of the directory, a cache object of that same class whose ``put`` writes a hidden temporary file beside the entry
and renames it onto the entry's name (:class:`AtomicFileCache`): a reader sees no entry or a whole one. Where
``jax_compilation_cache_max_size`` is set, JAX holds a file lock around every read and write and ``put`` is
JAX's own. Where this JAX lacks the private names used (``compilation_cache._cache``), or has already opened its
cache, ``configure`` leaves the cache off rather than let entries be written in place (``source="unsafe"``).

JAX's cache key leaves out source locations and op names (``jax_compilation_cache_include_metadata_in_key`` is
false, and stays so here: with them in the key a new kernel, whose cells are new files, or a call moved by one
line would miss), so an executable loaded from the cache carries the metadata of the process that wrote it.
Code that reads metadata back from a compiled program (capture's ``dfit_op`` tags in ``op_name``) must compile
with that option on for its own compile.

The cache grows without bound (JAX evicts only with ``jax_compilation_cache_max_size``, which needs the
``filelock`` package, not installed with dfit_nb); deleting the directory is always safe.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import stat
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from .._atomic import atomic_file
from ..errors import CompilationCacheWarning

__all__ = ["ENV", "MIN_COMPILE_TIME_S", "CacheState", "atomic_file_cache", "configure", "default_directory",
           "requested_directory", "state"]

#: the environment variable: ``0`` / ``off`` / ``false`` / ``no`` switches dfit_nb's cache off, a path chooses
#: the directory, unset (or ``1`` / ``on`` / ``true`` / ``yes``) means the default directory
ENV = "DFIT_NB_COMPILATION_CACHE"
_OFF = frozenset({"0", "off", "false", "no"})
_ON = frozenset({"", "1", "on", "true", "yes"})

#: JAX's own environment variables for the settings dfit_nb may set: when one is set, the user chose
_JAX_DIR_ENV = "JAX_COMPILATION_CACHE_DIR"
JAX_TIME_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
JAX_SIZE_ENV = "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"
#: JAX's defaults for those thresholds (jax 0.10.2): a value other than these was set by the user
_JAX_DEFAULT_TIME_S = 1.0
_JAX_DEFAULT_SIZE = 0

#: programs that compile faster than this are not written to disk. ``dfit-nb report`` compiles about 40
#: programs on 2 cores: 13-17 of them (the replay, cost and selection programs) in 1.1-3 s on quiet cores (up to
#: 10 s under load), 7-11 in 0.1-0.5 s, the rest (argument setup, small reductions) in under 0.1 s; loading an
#: entry back costs about 0.1 s. JAX's default of 1 s would leave out replay programs on any machine faster than
#: these 2 cores (the smallest compile in 1.1-1.4 s here); 0.2 s keeps every replay program with margin and the
#: mid-sized ones too (warm ``dfit-nb report`` on 2 cores: 16.2-18.8 s at 0.2 s, 18.3-18.6 s at 0.5 s,
#: 19.5-19.8 s at 1 s), while the many tiny programs, which would gain little, stay out of the directory.
MIN_COMPILE_TIME_S = 0.2
#: no size floor: every program past the time threshold is worth keeping (-1: "no size restriction, and do not
#: let JAX raise it for the filesystem")
_MIN_ENTRY_SIZE_BYTES = -1

#: what :func:`configure` reports when it gave JAX's cache atomic writes (an entry of ``CacheState.changed``)
ATOMIC_WRITES = "atomic cache writes"


@dataclass(frozen=True)
class CacheState:
    """What :func:`configure` decided: ``directory`` is the cache directory JAX uses (``None``: no persistent
    cache); ``source`` says who chose it: ``"dfit_nb"`` (the default directory), ``"env"``
    (``DFIT_NB_COMPILATION_CACHE=<path>``), ``"jax"`` (the user configured JAX's cache; dfit_nb left it alone),
    ``"off"`` (``DFIT_NB_COMPILATION_CACHE=0``), ``"disabled"`` (``jax_enable_compilation_cache`` is false),
    ``"unwritable"`` (the directory could not be created or written, or every user may write to it) or
    ``"unsafe"`` (this JAX's cache could not be given atomic writes); ``reason`` says why for the last two.
    ``changed`` names what that call changed: the ``jax.config`` options it set and :data:`ATOMIC_WRITES`
    (empty for a call that found everything done)."""

    directory: str | None
    source: str
    reason: str = ""
    changed: tuple[str, ...] = ()


_state: CacheState | None = None
_warned = False


def default_directory() -> Path:
    """``$XDG_CACHE_HOME/dfit_nb/jax``, or ``~/.cache/dfit_nb/jax`` when ``XDG_CACHE_HOME`` is unset, empty or
    relative (the XDG base directory rule).

    >>> default_directory().parts[-2:]
    ('dfit_nb', 'jax')
    """
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "dfit_nb" / "jax"


def requested_directory(value: str | None = None) -> Path | None:
    """The directory ``DFIT_NB_COMPILATION_CACHE`` (or ``value``) asks for, absolute: ``None`` for ``0`` / ``off`` /
    ``false`` / ``no`` (any case), :func:`default_directory` when unset, empty or ``1`` / ``on`` / ``true`` /
    ``yes``, else that path (``~`` expanded). Raises ``RuntimeError`` when the home directory is needed and unknown.

    >>> requested_directory("off") is None and requested_directory("1") == default_directory().absolute()
    True
    """
    value = (os.environ.get(ENV, "") if value is None else value).strip()
    if value.lower() in _OFF:
        return None
    path = default_directory() if value.lower() in _ON else Path(value).expanduser()
    return path.absolute()


def _prepare(path: Path) -> None:
    """Create ``path`` (itself private to the user: mode 0700) and write, then remove, a probe file in it; raise
    ``OSError`` if either fails, or if the directory is writable by every user: JAX runs what it loads from its
    cache, so such a directory would let anyone on the machine run code in this process."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & stat.S_IWOTH:
        raise PermissionError(f"{path} is writable by every user, and JAX runs the executables it loads from there")
    fd, probe = tempfile.mkstemp(prefix=".dfit_nb-probe-", dir=path)
    os.close(fd)
    os.unlink(probe)


def _warn_once(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(message, CompilationCacheWarning, stacklevel=4)


@functools.cache
def atomic_file_cache() -> type | None:
    """:class:`AtomicFileCache`, JAX's file cache class with atomic writes (``None`` where this JAX has no
    ``jax._src.lru_cache.LRUCache`` to build it on). Built on first use, so that importing this module imports
    nothing of JAX's."""
    try:
        from jax._src import lru_cache
    except ImportError:
        return None
    base = getattr(lru_cache, "LRUCache", None)
    if not isinstance(base, type) or not callable(getattr(base, "put", None)):
        return None
    suffix = getattr(lru_cache, "_CACHE_SUFFIX", "-cache")

    class AtomicFileCache(base):  # type: ignore[misc, valid-type]
        """JAX's file cache whose :meth:`put` writes a hidden temporary file in the cache directory and renames it
        onto the entry's name, so that no process ever reads a half-written entry. With eviction on
        (``jax_compilation_cache_max_size``) JAX's own ``put`` runs, under JAX's file lock."""

        def put(self, key: str, value: bytes) -> None:
            if getattr(self, "eviction_enabled", True):
                return super().put(key, value)
            if not key:
                raise ValueError("key cannot be empty")
            folder = os.fspath(self.path)
            target = os.path.join(folder, f"{key}{suffix}")
            if os.path.exists(target):  # as JAX: an entry is never rewritten
                return
            with atomic_file(target, prefix=f".{key}-") as file:  # a dot: never an entry's name
                file.write(value)

    AtomicFileCache.__qualname__ = AtomicFileCache.__name__
    return AtomicFileCache


def _install_atomic_writes(path: Path) -> str:
    """Open JAX's persistent cache at ``path`` now, as an :class:`AtomicFileCache`, before JAX opens it itself
    (which it does at the first compile after the directory is set). Returns ``""`` on success, else why not."""
    cls = atomic_file_cache()
    try:
        from jax._src import compilation_cache as cc
    except ImportError:
        cc = None
    names = ("_cache", "_cache_initialized", "_cache_initialized_mutex")
    if cls is None or cc is None or not all(hasattr(cc, name) for name in names):
        return "this JAX's compilation cache has no hook for atomic writes (jax._src.compilation_cache._cache)"
    import jax

    with cc._cache_initialized_mutex:
        current: Any = cc._cache
        if current is not None or cc._cache_initialized:
            inner = getattr(current, "_base_cache", current)  # a VerificationCache wraps the file cache
            if isinstance(inner, cls) and os.fspath(inner.path) == str(path):
                return ""
            return "JAX opened its compilation cache before dfit_nb.setup() (its writes are not atomic)"
        try:
            cache: Any = cls(str(path), max_size=jax.config.jax_compilation_cache_max_size)
        except Exception as err:  # e.g. a size limit without the filelock package: JAX would raise too
            return f"{type(err).__name__}: {err}"
        if jax.config.values.get("jax_compilation_cache_check_contents") and hasattr(cc, "VerificationCache"):
            cache = cc.VerificationCache(cache)
        cc._cache = cache
        cc._cache_initialized = True
    return ""


def configure() -> CacheState:
    """Point JAX's persistent compilation cache at dfit_nb's directory with atomic writes, as the module
    docstring says; :func:`dfit_nb.setup` calls it. Returns (and remembers, see :func:`state`) what it decided;
    a second call returns the same decision with nothing in ``changed``. Never raises for a directory it cannot
    use: it warns once (:class:`~dfit_nb.errors.CompilationCacheWarning`) and leaves JAX without a persistent
    cache."""
    global _state
    import jax

    if _state is not None and _state.directory == jax.config.jax_compilation_cache_dir:
        return dataclasses.replace(_state, changed=())  # done already (or refused for a reason still true)
    value = os.environ.get(ENV, "").strip()
    if value.lower() in _OFF:
        _state = CacheState(None, "off")
        return _state
    configured = jax.config.jax_compilation_cache_dir
    if configured is not None or _JAX_DIR_ENV in os.environ:
        _state = CacheState(configured or None, "jax")
        return _state
    if not jax.config.jax_enable_compilation_cache:
        _state = CacheState(None, "disabled")
        return _state

    source = "dfit_nb" if value.lower() in _ON else "env"
    where = repr(value) if source == "env" else "the default cache directory"
    try:
        path = cast(Path, requested_directory(value))  # not None: "off" returned above
        where = str(path)
        _prepare(path)
    except (OSError, RuntimeError) as err:  # RuntimeError: Path.home() when there is no home directory
        reason = f"{type(err).__name__}: {err}"
        _state = CacheState(None, "unwritable", reason)
        _warn_once(f"dfit_nb cannot use {where} as JAX's compilation cache ({reason}); continuing without a "
                   f"persistent compilation cache, so every new process compiles again. Set {ENV} to a writable "
                   f"directory, or to 0 to switch the cache off and silence this warning.")
        return _state
    unsafe = _install_atomic_writes(path)
    if unsafe:
        _state = CacheState(None, "unsafe", unsafe)
        return _state

    changed = [ATOMIC_WRITES, "jax_compilation_cache_dir"]
    jax.config.update("jax_compilation_cache_dir", str(path))
    if JAX_TIME_ENV not in os.environ and \
            jax.config.jax_persistent_cache_min_compile_time_secs == _JAX_DEFAULT_TIME_S:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_TIME_S)
        changed.append("jax_persistent_cache_min_compile_time_secs")
    if JAX_SIZE_ENV not in os.environ and \
            jax.config.jax_persistent_cache_min_entry_size_bytes == _JAX_DEFAULT_SIZE:
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", _MIN_ENTRY_SIZE_BYTES)
        changed.append("jax_persistent_cache_min_entry_size_bytes")
    _state = CacheState(str(path), source, changed=tuple(changed))
    return _state


def state() -> CacheState | None:
    """What the first effective :func:`configure` decided (``None`` before :func:`dfit_nb.setup` ran)."""
    return _state
