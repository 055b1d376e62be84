"""The few JAX internals capture cannot avoid, kept in one place.

Checked against JAX 0.10.2 (jaxlib 0.10.2). Everything else in ``dfit_nb.capture``
uses the public ``jax.extend.core`` API. When JAX moves one of these, only this
module changes.

* Name stacks: tagging an equation with an extra ``jax.named_scope``-like scope
  needs ``SourceInfo.replace`` and ``NameStack.extend``; there is no public way
  to edit the name stack of an existing equation.
* Source locations: ``source_info_util.summarize`` turns an equation's traceback
  into ``file:line``; a nested jit's ``Jaxpr.debug_info.func_src_info``
  (``"name at file:line"``) says where its function was written.
* Primitive names changed across versions; ``CONTAINER_ALIASES`` maps every
  spelling we know to one canonical name.
* The compilation cache key: capture reads its own op-name tags back from the
  compiled HLO, and JAX's persistent cache key leaves op names out by default,
  so a cached program differing only in them would come back with another
  program's tags. ``metadata_in_cache_key`` is the config state's context
  manager (only ``jax.config.update``, which is global, is public).
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
from typing import Any

from jax._src import config as _config
from jax._src import source_info_util

#: Canonical container kinds, keyed by every primitive spelling seen across JAX
#: versions (``pjit`` became ``jit``; ``remat2`` / ``remat`` became ``checkpoint``;
#: ``custom_vjp_call_jaxpr`` became ``custom_vjp_call``).
CONTAINER_ALIASES: dict[str, str] = {
    "jit": "jit",
    "pjit": "jit",
    "xla_call": "jit",
    "closed_call": "call",
    "core_call": "call",
    "remat": "remat",
    "remat2": "remat",
    "checkpoint": "remat",
    "custom_jvp_call": "custom_jvp",
    "custom_vjp_call": "custom_vjp",
    "custom_vjp_call_jaxpr": "custom_vjp",
    "scan": "scan",
    "while": "while",
    "cond": "cond",
    # one jaxpr run once, its inputs the equation's (a custom batching rule's primal, a named composite)
    "custom_vmap_call": "call",
    "composite": "call",
    # one jaxpr run once per shard of a mesh (jax.shard_map; jax.pmap traces to a jit holding one)
    "shard_map": "shard_map",
    # jax.lax.custom_linear_solve: of its four jaxprs the forward pass runs ``solve`` on the right-hand side
    "custom_linear_solve": "linear_solve",
}


def tag_source_info(source_info: Any, tag: str) -> Any:
    """Return ``source_info`` with ``tag`` appended to its name stack."""
    return source_info.replace(name_stack=source_info.name_stack.extend(tag))


def name_stack_str(source_info: Any) -> str:
    """The equation's name stack as a ``/``-joined path ('' at the top level)."""
    return str(source_info.name_stack)


def user_source(source_info: Any) -> str:
    """``file:line`` of the user frame that created the equation ('' if unknown)."""
    try:
        return source_info_util.summarize(source_info)
    except Exception:  # a missing traceback must never fail a capture
        return ""


@functools.cache
def _library_roots() -> tuple[str, ...]:
    """Folders whose code is a library's: the standard library's, and every installed-package folder on the path."""
    paths = sysconfig.get_paths()
    roots = {paths.get("stdlib", ""), paths.get("platstdlib", ""), paths.get("purelib", ""), paths.get("platlib", "")}
    roots |= {p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")}
    return tuple(os.path.join(os.path.realpath(r), "") for r in roots if r)


def function_file(jaxpr: Any) -> str:
    """The file a traced function was written in, from its jaxpr's debug info ('' if unknown)."""
    info = getattr(getattr(jaxpr, "jaxpr", jaxpr), "debug_info", None)
    src = getattr(info, "func_src_info", None) or ""
    if " at " not in src:
        return ""
    where = src.rsplit(" at ", 1)[1]
    return where.rsplit(":", 1)[0] if ":" in where else where


def is_library_file(path: str) -> bool:
    """Whether ``path`` is an installed package's or the standard library's, not code the user wrote.

    An editable install (``pip install -e``) keeps its code where it was written, so its functions count as the
    user's.

    >>> import json
    >>> is_library_file(json.__file__), is_library_file("/home/me/model.py")
    (True, False)
    """
    if not path:
        return False
    real = os.path.realpath(path)
    return any(real.startswith(root) for root in _library_roots())


def metadata_in_cache_key() -> Any:
    """A context in which compilations key JAX's persistent cache on op names and locations too."""
    return _config.compilation_cache_include_metadata_in_key(True)
