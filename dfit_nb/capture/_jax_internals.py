"""The few JAX internals capture cannot avoid, kept in one place.

Checked against JAX 0.10.2 (jaxlib 0.10.2). Everything else in ``dfit_nb.capture``
uses the public ``jax.extend.core`` API. When JAX moves one of these, only this
module changes.

* Name stacks: tagging an equation with an extra ``jax.named_scope``-like scope
  needs ``SourceInfo.replace`` and ``NameStack.extend``; there is no public way
  to edit the name stack of an existing equation.
* Source locations: ``source_info_util.summarize`` turns an equation's traceback
  into ``file:line``.
* Primitive names changed across versions; ``CONTAINER_ALIASES`` maps every
  spelling we know to one canonical name.
* The compilation cache key: capture reads its own op-name tags back from the
  compiled HLO, and JAX's persistent cache key leaves op names out by default,
  so a cached program differing only in them would come back with another
  program's tags. ``metadata_in_cache_key`` is the config state's context
  manager (only ``jax.config.update``, which is global, is public).
"""

from __future__ import annotations

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


def metadata_in_cache_key() -> Any:
    """A context in which compilations key JAX's persistent cache on op names and locations too."""
    return _config.compilation_cache_include_metadata_in_key(True)
