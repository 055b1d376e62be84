"""The Explorer's machine controls as data: the sliders' menus and options, and the machine a setting of them
describes over a base machine (:func:`machine_from_controls`), named after what it changes
(:func:`modified_name`). Importable from :mod:`dfit_nb.widgets.explorer`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..sim.hardware import FIELDS, Hardware, sram_split

# Slider menus; each slider also holds the shown machine's own value (see ``_menu``).
PE = (4, 8, 12, 16, 32, 64, 128, 256)
SRAM_KB = (8, 16, 32, 48, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
GRID = (1, 2, 4, 5, 8, 16, 20, 32, 64)
NOC_BW = tuple(float(2 ** i) for i in range(11))  # 1 .. 1024 B/cycle per link
DRAM_BW = tuple(float(2 ** i) for i in range(13))  # 1 .. 4096 B/cycle for the chip
# control -> the Hardware field it sets (SRAM is the total of the three partitions, in KiB: sram_split)
_SLIDERS = {"tile_rows": "tile_rows", "tile_cols": "tile_cols", "pe_rows": "pe_rows", "pe_cols": "pe_cols",
            "noc_bw": "noc_link_bytes_per_cycle", "dram_bw": "dram_bytes_per_cycle"}
_MENUS = {"tile_rows": GRID, "tile_cols": GRID, "pe_rows": PE, "pe_cols": PE, "sram_kb": SRAM_KB,
          "noc_bw": NOC_BW, "dram_bw": DRAM_BW}


def _number(value: Any) -> int | float:
    """A Python number from a scalar field (a swept machine's fields are numpy floats): whole values as ``int``,
    so slider labels and modified-machine names read ``8``, not ``8.0``."""
    v = float(np.asarray(value))
    return int(v) if v.is_integer() else v


def _label(value: float) -> str:
    # exact (repr), so two options never share a label and a label never hides a fraction
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _menu(menu: tuple[float, ...], value: float) -> list[tuple[str, int | float]]:
    """The slider's (label, value) options: the menu with ``value`` inserted exactly where it is not on it."""
    values = sorted({*(_number(m) for m in menu), _number(value)})  # a set: 8 and 8.0 are one option
    return [(_label(v), v) for v in values]


def same_machine(a: Hardware, b: Hardware) -> bool:
    """Whether ``a`` and ``b`` are the same machine: name, execution style and every field of ``FIELDS``.

    Examples
    --------
    >>> from dfit_nb.sim import presets
    >>> from dfit_nb.widgets.explorer import same_machine
    >>> npu = presets.get("npu_like")
    >>> same_machine(npu, npu.replace(pe_cols=16.0)), same_machine(npu, npu.replace(pe_cols=8))
    (True, False)
    """
    return a.name == b.name and a.execution == b.execution and not _differing(a, b)


def _differing(base: Hardware, hw: Hardware) -> list[str]:
    """The fields of ``FIELDS`` whose values differ between two scalar machines, sorted by name."""
    return sorted(f for f in FIELDS if float(np.asarray(getattr(base, f))) != float(np.asarray(getattr(hw, f))))


def modified_name(base: Hardware, hw: Hardware) -> str:
    """``base.name`` when ``hw`` has every field of ``base``, else a name that lists what changed.

    Examples
    --------
    >>> from dfit_nb.sim import presets
    >>> from dfit_nb.widgets.explorer import modified_name
    >>> npu = presets.get("npu_like")
    >>> modified_name(npu, npu.replace(pe_cols=32, tile_rows=2))
    'npu_like (modified: pe_cols=32, tile_rows=2)'
    >>> modified_name(npu, npu)
    'npu_like'
    """
    changed = _differing(base, hw)
    if not changed:
        return base.name
    return f"{base.name} (modified: {', '.join(f'{f}={_label(_number(getattr(hw, f)))}' for f in changed)})"


def machine_from_controls(base: Hardware, values: dict[str, Any]) -> tuple[Hardware, list[str]]:
    """The machine the Explorer's sliders describe over ``base``, and notes for its status line.

    ``values``: slider -> value, for ``tile_rows``, ``tile_cols``, ``pe_rows``, ``pe_cols``, ``noc_bw``,
    ``dram_bw`` and ``sram_kb``. SRAM is split by :func:`dfit_nb.sim.hardware.sram_split`, the rule
    ``sweep(sram_kb=...)`` uses, so a slider setting and a swept value are one machine. A partition below the
    floor the PE array needs is raised to it (a sweep refuses such a machine; the widget shows the nearest one
    and a note says so).

    Examples
    --------
    >>> from dfit_nb.sim import presets
    >>> npu = presets.get("npu_like")
    >>> hw, notes = machine_from_controls(npu, {"tile_rows": 4, "tile_cols": 5, "pe_rows": 16, "pe_cols": 16,
    ...                                         "noc_bw": 64.0, "dram_bw": 64.0, "sram_kb": 128})
    >>> hw.sram_input_bytes, hw.sram_weight_bytes, hw.sram_output_bytes, notes
    (65536, 32768, 32768, [])
    """
    fields: dict[str, Any] = {field: values[key] for key, field in _SLIDERS.items()}
    word = _number(base.word_bytes)
    floor = math.ceil(2 * max(fields["pe_rows"], fields["pe_cols"]) * word)
    parts = {f: int(v) for f, v in sram_split(base, float(values["sram_kb"])).items()}
    total = sum(parts.values())
    notes = []
    if min(parts.values()) < floor:  # Hardware would refuse it: keep the widget alive, say what was raised
        raised = [f for f, v in parts.items() if v < floor]
        parts = {f: max(v, floor) for f, v in parts.items()}
        notes.append(f"SRAM raised to the floor of {floor} B per partition (2 x max(PE rows, PE cols) x "
                     f"{word} B words) in {', '.join(f.split('_')[1] for f in raised)}: "
                     f"{sum(parts.values()) / 1024:g} KiB per tile, not {total / 1024:g}")
    hw = base.replace(**fields, **parts)
    return hw.replace(name=modified_name(base, hw)), notes
