"""A registry of example programs: name -> how to build (fn, args)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

_EXAMPLES: dict[str, Example] = {}


@dataclasses.dataclass(frozen=True)
class Example:
    """A named JAX program with a builder for its parameters and inputs.

    ``make(**sizes)`` returns ``(fn, args)`` such that ``fn(*args)`` runs;
    ``defaults`` are the sizes used when none are given.
    """

    name: str
    description: str
    make: Callable[..., tuple[Callable[..., Any], tuple[Any, ...]]]
    defaults: dict[str, Any]

    def build(self, **sizes: Any) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        """``(fn, args)`` at the default sizes, overridden by ``sizes``.

        Unknown size names raise ``TypeError`` listing the valid ones.
        """
        unknown = set(sizes) - set(self.defaults)
        if unknown:
            raise TypeError(
                f"example {self.name!r} has no size(s) {sorted(unknown)}; valid: {sorted(self.defaults)}"
            )
        return self.make(**{**self.defaults, **sizes})


def register(example: Example) -> Example:
    """Add ``example`` to the registry (replacing one of the same name)."""
    _EXAMPLES[example.name] = example
    return example


def get(name: str) -> Example:
    """The example called ``name``; ``KeyError`` lists the valid names."""
    try:
        return _EXAMPLES[name]
    except KeyError:
        raise KeyError(f"no example {name!r}; valid: {sorted(_EXAMPLES)}") from None


def names() -> tuple[str, ...]:
    """Names of the registered examples."""
    return tuple(_EXAMPLES)
