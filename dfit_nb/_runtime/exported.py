"""Traced programs kept on disk beside JAX's compilation cache, so a fresh process skips tracing them too.

JAX's persistent compilation cache (:mod:`dfit_nb._runtime.compile_cache`, switched on by ``dfit_nb.setup()``) saves the
XLA compile, but every fresh process (a second ``dfit-nb report``, a new kernel, each pytest-xdist worker) still
traces and lowers each program in Python first: 0.3-0.7 s for a replay or cost program on 2 cores, most of a warm
first call; 0.6-0.9 s for a sweep's, ``replay_batch``'s or a batch selection's program
(``benchmarks/bench_new_process.py``), which go through here too when they run on one device. :func:`call` runs a
jitted function through :mod:`jax.export` instead: the first time a (function, argument shapes, static arguments)
combination is seen, the function is exported (traced once, as a plain call would) and the serialized StableHLO is
written to ``<compilation cache>/dfit_nb_exported/``; later processes deserialize it (about 10 ms) and call it,
and XLA's compile of it is then a hit in JAX's cache.
The numbers are the same program's (``tests/test_exported.py`` checks them equal to a plain call's).

When it stands aside (the plain jitted call runs): ``dfit_nb.setup()`` has not configured a persistent compilation
cache (then there is nowhere to keep the files), ``DFIT_NB_EXPORTED=0``, an argument is a tracer (a call inside
``jit`` / ``vmap`` / ``grad``) or is placed on several devices (a sharded sweep or batch: an exported program is
for one device), or exporting fails. A file that cannot be read or deserialized is ignored with a
:class:`~dfit_nb.errors.CompilationCacheWarning` (once per process) and replaced; one that cannot be written
leaves the program in memory for this process only.

The key of a file holds everything the trace depends on: the function's module and name, a fingerprint of the
dfit_nb sources (any edit makes new keys), the JAX and jaxlib versions, the backend, the x64 flag, the argument
tree with its static metadata, each leaf's abstract value (shape, dtype, weak type) and the static arguments.
Files of old keys are never read again; deleting the directory is always safe.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
import warnings
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import jax

from .._atomic import atomic_file
from ..errors import CompilationCacheWarning
from . import compile_cache as _compile_cache

#: ``DFIT_NB_EXPORTED=0`` (or ``off``, ``false``, ``no``) switches the exported-program cache off
ENV = "DFIT_NB_EXPORTED"
#: the sub-directory of the compilation cache that holds the serialized programs
SUBDIR = "dfit_nb_exported"

_lock = threading.Lock()
_loaded: dict[tuple[Any, ...], Callable[..., Any]] = {}
#: (function, caller's signature) -> (the _loaded table it was found in, the program): :func:`call_signed`'s index
_signed: dict[tuple[Any, Hashable], tuple[dict[tuple[Any, ...], Callable[..., Any]], Callable[..., Any]]] = {}
_warned = False
_registered = threading.Event()
#: the classes :func:`serializable` was given that JAX has not been told of yet: class -> serialized name
_pending: dict[type, str] = {}


def enabled() -> bool:
    """Whether :func:`call` exports: a persistent compilation cache is configured and ``DFIT_NB_EXPORTED`` is
    not ``0`` / ``off`` / ``false`` / ``no``."""
    if os.environ.get(ENV, "").strip().lower() in ("0", "off", "false", "no"):
        return False
    return directory() is not None


def directory() -> Path | None:
    """``<compilation cache>/dfit_nb_exported``, or ``None`` without a persistent compilation cache."""
    state = _compile_cache.state()
    if state is None or state.directory is None:
        return None
    return _folder(state.directory)


@functools.lru_cache(maxsize=8)
def _folder(cache_directory: str) -> Path:
    """Built once per directory: a warm cost() call asks :func:`enabled` every time."""
    return Path(cache_directory) / SUBDIR


@functools.cache
def source_fingerprint() -> str:
    """SHA-256 of every ``.py`` file of the installed dfit_nb package (names and contents), computed once."""
    root = Path(__file__).resolve().parents[1]  # the dfit_nb package, this runtime package included
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def serializable(cls: type, name: str) -> None:
    """Let :mod:`jax.export` serialize ``cls`` (a pytree node class of dfit_nb's own, such as ``Hardware``) among
    the arguments of the programs :func:`call` keeps, under the stable ``name``. Its static metadata (the aux
    data) is written as JSON text, never pickled. Called by the class' own module; JAX is told on the first
    export, so registering one changes nothing until a program is kept."""
    with _lock:
        _pending[cls] = name
        _registered.clear()


def _register_pytrees() -> None:
    """Hand the classes of :func:`serializable` to :mod:`jax.export` (static arguments such as the grid are baked
    into the program, not serialized)."""
    if _registered.is_set():
        return
    with _lock:  # held throughout: no thread exports before every pending class is registered
        for cls, name in _pending.items():
            try:
                jax.export.register_pytree_node_serialization(
                    cls, serialized_name=name,
                    serialize_auxdata=lambda aux: json.dumps([str(a) for a in aux]).encode(),  # no pickle: data only
                    deserialize_auxdata=lambda data: tuple(json.loads(data)))
            except ValueError:  # registered already (a reloaded module)
                pass
        _pending.clear()
        _registered.set()


def _key(fn: Callable[..., Any], static: dict[str, Any], leaves: list[Any], tree: Any) -> str:
    """The file's key (see the module docstring): computed once per process and signature."""
    avals = [str(jax.typeof(x)) for x in leaves]
    parts = [fn.__module__, fn.__qualname__, source_fingerprint(), jax.__version__, jax.lib.__version__,
             jax.default_backend(), str(jax.config.jax_enable_x64), str(tree), *avals,
             repr(sorted(static.items()))]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def call(fn: Callable[..., Any], static: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **static, **kwargs)`` for a ``jax.jit`` function ``fn``, through a cached export (see the
    module docstring); the plain call where the cache stands aside.

    ``static``: the static arguments, by name (hashable; baked into the program). ``args`` and ``kwargs``: the
    array arguments (pytrees of arrays).

    >>> import jax, jax.numpy as jnp
    >>> from dfit_nb._runtime import exported as _exported
    >>> f = jax.jit(lambda x, power: x ** power, static_argnames="power")
    >>> float(_exported.call(f, {"power": 2}, jnp.float32(3.0)))
    9.0
    """
    compiled = _resolve(fn, static, args, kwargs)
    if compiled is None:
        return fn(*args, **static, **kwargs)
    return compiled(*args, **kwargs)


def call_signed(fn: Callable[..., Any], static: dict[str, Any], signature: Hashable, *args: Any, **kwargs: Any
                ) -> Any:
    """:func:`call` for a caller that names its arguments' signature itself, for the calls that pay per
    microsecond (a warm ``cost()`` of a few ops): a warm call is one dictionary lookup, where :func:`call`
    flattens the arguments, checks each and builds its key from them.

    ``signature``: hashable, and it must determine, with ``fn`` and ``static``, the argument tree and each leaf's
    shape, dtype and weak type (for example the padded sizes the caller built its arrays for); the arguments must
    be concrete arrays on one device (never tracers), as the caller knows they are.

    >>> import jax, numpy as np
    >>> from dfit_nb._runtime import exported as _exported
    >>> f = jax.jit(lambda x, power: x ** power, static_argnames="power")
    >>> float(_exported.call_signed(f, {"power": 2}, ("one float32",), np.float32(3.0)))
    9.0
    """
    # the program is found by the caller's key, and used while _loaded (this process's programs, one entry each)
    # is the table it was found in: a test that starts a fresh table makes it load again, as call() would
    held, compiled = _signed.get((fn, signature), (None, None)) if enabled() else (None, None)
    if held is not _loaded or compiled is None:
        compiled = _resolve(fn, static, args, kwargs)
        if compiled is None:
            return fn(*args, **static, **kwargs)
        _signed[(fn, signature)] = (_loaded, compiled)  # one assignment: atomic under the GIL
    return compiled(*args, **kwargs)


def _resolve(fn: Callable[..., Any], static: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
             ) -> Callable[..., Any] | None:
    """The exported program of ``fn`` for these arguments (loaded, or exported now), or ``None`` where the
    cache stands aside (the caller makes the plain call)."""
    leaves, tree = jax.tree.flatten((args, kwargs))
    if not enabled() or any(isinstance(x, jax.core.Tracer) or _on_several_devices(x) for x in leaves):
        return None
    # looked up in this process by a plain tuple (a warm call pays a few microseconds, not the file key's
    # hashing); the shape, dtype and weak type of each leaf decide the program, as they do for jax.jit
    local = (fn, tuple(sorted(static.items())), tree, bool(jax.config.jax_enable_x64),
             tuple((type(x), getattr(x, "shape", None), getattr(x, "dtype", None), getattr(x, "weak_type", None))
                   for x in leaves))
    with _lock:
        compiled = _loaded.get(local)
    if compiled is None:
        key = _key(fn, static, leaves, tree)
        compiled = _load(key, fn) or _export(fn, static, args, kwargs, key)
        if compiled is None:
            return None
        with _lock:
            _loaded[local] = compiled
    return compiled


def _on_several_devices(x: Any) -> bool:
    """Whether ``x`` is an array placed (sharded or replicated) on more than one device."""
    sharding = getattr(x, "sharding", None)
    return sharding is not None and len(sharding.device_set) > 1


def _path(key: str) -> Path:
    folder = directory()
    assert folder is not None  # call() checked enabled()
    return folder / f"{key}.stablehlo"


def _warn_once(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(message, CompilationCacheWarning, stacklevel=4)


def _load(key: str, fn: Callable[..., Any]) -> Callable[..., Any] | None:
    path = _path(key)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        _warn_once(f"dfit_nb: could not read the exported program {path} ({err}); tracing it again")
        return None
    _register_pytrees()
    try:
        exported = jax.export.deserialize(bytearray(data))
    except Exception as err:  # truncated, corrupted, or from an incompatible JAX: trace again and replace it
        _warn_once(f"dfit_nb: ignoring the unreadable exported program {path} ({type(err).__name__}: {err}); "
                   "tracing it again")
        return None
    return _compiled(exported, fn)


def _export(fn: Callable[..., Any], static: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any],
            key: str) -> Callable[..., Any] | None:
    _register_pytrees()
    try:
        exported = jax.export.export(getattr(fn, "jitted", fn))(*args, **static, **kwargs)
        data = exported.serialize()
    except Exception:  # a program export cannot hold: the plain call, uncached
        return None
    _store(_path(key), bytes(data))
    return _compiled(exported, fn)


def _compiled(exported: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
    """The exported program as a jitted function, compiled as ``fn`` is (a model program: with dfit_nb's
    :mod:`compiler options <dfit_nb._runtime.compile_options>`)."""
    return jax.jit(exported.call, compiler_options=getattr(fn, "compiler_options", None))


def _store(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a temporary beside it, then a rename); failures are left silent:
    the program stays in memory for this process, and the compilation cache has warned about its directory."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with atomic_file(path, prefix=f".{path.stem[:16]}-") as f:
            f.write(data)
    except OSError:
        pass
