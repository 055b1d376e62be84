"""Memory this process may still allocate, and sizes as people read them: one figure for every floor.

``capture`` (refusing runtime captures whose arrays cannot fit), ``sim.memory`` (refusing replays, sweeps and
costs that cannot fit) and the CLI (refusing ``--args`` beyond memory) all ask here, so they agree.
``DFIT_NB_MEMORY_LIMIT`` (bytes, or ``"8GB"``, ``"512MiB"``) sets the budget instead of the system's figure.

>>> human(3 * 2**30), parse_bytes("512MiB") == 512 * 2**20
('3.0 GiB', True)
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from .errors import DfitError

#: the environment variable that overrides the memory budget
LIMIT_ENV = "DFIT_NB_MEMORY_LIMIT"

_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 10**3, "kib": 2**10, "m": 2**20, "mb": 10**6, "mib": 2**20,
          "g": 2**30, "gb": 10**9, "gib": 2**30, "t": 2**40, "tb": 10**12, "tib": 2**40}


class MemoryGuardError(DfitError, MemoryError):
    """The work would need more memory than is available; refused before allocating it."""


def parse_bytes(text: str | float) -> float:
    """``"8GB"``, ``"512 MiB"``, ``"1e9"`` or a number -> bytes.

    >>> parse_bytes("512MiB") == 512 * 2**20
    True
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), ""
    else:
        m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([a-zA-Z]*)\s*", str(text))
        if m is None or m.group(2).lower() not in _UNITS:
            raise MemoryGuardError(f"{LIMIT_ENV}={text!r} is not a size; use bytes or a number with a unit "
                                   f"({', '.join(u for u in _UNITS if u)}), e.g. '8GB'")
        try:
            value, unit = float(m.group(1)), m.group(2).lower()
        except ValueError:
            raise MemoryGuardError(f"{LIMIT_ENV}={text!r} is not a size; use bytes or e.g. '8GB'") from None
    if not value > 0 or value == float("inf"):
        raise MemoryGuardError(f"{LIMIT_ENV}={text!r}: the budget must be a positive, finite size")
    return value * _UNITS[unit]


def _cgroup_room() -> float | None:
    """What a cgroup (v2, else v1) still lets this process allocate, if it is limited."""
    v1 = "/sys/fs/cgroup/memory/memory."
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         (v1 + "limit_in_bytes", v1 + "usage_in_bytes")):
        try:
            cap = Path(limit).read_text().strip()
            used = float(Path(usage).read_text().strip())
        except (OSError, ValueError):
            continue
        if cap.isdigit() and float(cap) < 2**60:  # "max" or a huge number: no limit
            return max(float(cap) - used, 0.0)
    return None


#: how long one reading of the system's available memory is reused: a warm cost() call takes well under a
#: millisecond and reading psutil and the cgroup files took a fifth of it, while what the guards protect against
#: (allocating gigabytes) does not turn on memory that changed in the last instants
_READING_TTL_S = 0.25
_reading: tuple[float, float] | None = None  # (monotonic time, bytes)


def available_bytes() -> float:
    """Bytes this process may still allocate: ``DFIT_NB_MEMORY_LIMIT`` if set, else the system's available memory
    capped by a cgroup limit (one reading reused for a quarter of a second)."""
    global _reading
    override = os.environ.get(LIMIT_ENV, "").strip()
    if override:
        return parse_bytes(override)
    now = time.monotonic()
    if _reading is not None and now - _reading[0] < _READING_TTL_S:
        return _reading[1]
    try:
        import psutil

        room = float(psutil.virtual_memory().available)
    except (ImportError, OSError):  # psutil is a dependency; without it, Linux's own figure, else no guard
        try:
            text = Path("/proc/meminfo").read_text()
            room = float(re.search(r"MemAvailable:\s+(\d+)\s*kB", text).group(1)) * 1024  # type: ignore[union-attr]
        except (OSError, AttributeError, ValueError):
            room = float("inf")
    cgroup = _cgroup_room()
    room = min(room, cgroup) if cgroup is not None else room
    _reading = (now, room)
    return room


def device_available_bytes() -> tuple[float, str]:
    """Bytes free for new arrays on JAX's default device (its allocator's limit less what is in use, on an
    accelerator) and the device's name; on the CPU backend, or when ``DFIT_NB_MEMORY_LIMIT`` sets the budget,
    :func:`available_bytes`."""
    import jax

    device = jax.devices()[0]
    if os.environ.get(LIMIT_ENV, "").strip():
        return available_bytes(), str(device)
    with_stats = getattr(device, "memory_stats", None)
    try:
        stats = with_stats() if with_stats is not None else None
    except Exception:  # a backend without statistics: the host's figure
        stats = None
    if stats and "bytes_limit" in stats:
        return float(stats["bytes_limit"]) - float(stats.get("bytes_in_use", 0)), str(device)
    return available_bytes(), str(device)


def human(nbytes: float) -> str:
    """``3221225472`` -> ``"3.0 GiB"``."""
    for unit, scale in (("EiB", 2**60), ("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20),
                        ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} B"
