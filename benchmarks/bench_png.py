"""The stored notebooks' chart pictures (``dfit_nb.widgets._offline.static_png``): Pillow against the hand-written
PNG codec dfit_nb had before (decode vl-convert's PNG, composite onto white, write a 256-colour palette PNG).

Both choose the palette the same way (the most frequent colours, every other mapped to its nearest, in NumPy);
what differs is the codec: reading vl-convert's RGBA rows (inflate and un-filter) and writing the indexed image
(filter, deflate at level 9, chunks and CRCs). A third variant lets Pillow choose the palette too
(``Image.quantize``, median cut, no dithering). The charts are the tutorials' kind: the run views of
:mod:`dfit_nb.views` on a replay of the MLP example, rendered once by vl-convert (its time is the same for all).
Prints, per chart and variant: milliseconds past vl-convert, bytes written, and the mean and worst pixel error
against the composited original.

Run: ``python benchmarks/bench_png.py [REV]`` (REV: the git revision of the hand-written codec, default
``83a84af``, the last commit that had it).
"""

from __future__ import annotations

import io
import subprocess
import sys
import time
import types
import warnings
from pathlib import Path

import numpy as np
import vl_convert
from PIL import Image

import dfit_nb
from dfit_nb import examples, views
from dfit_nb.sim import presets
from dfit_nb.widgets import _offline

ROOT = Path(__file__).resolve().parents[1]


def _old_codec(rev: str) -> types.ModuleType:
    """The hand-written codec as it was at ``rev`` (read from git, not copied here)."""
    source = subprocess.run(["git", "show", f"{rev}:dfit_nb/widgets/_offline.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType("old_offline")
    exec(compile(source, "old_offline.py", "exec"), module.__dict__)
    return module


def _pillow_quantize(png: bytes, colors: int = 256) -> bytes:
    rgb = _offline._rgb_pixels(png)
    out = io.BytesIO()
    Image.fromarray(rgb).quantize(colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
        out, "PNG", compress_level=9)
    return out.getvalue()


def _best_of(fn, *args, repeat: int = 5) -> tuple[float, bytes]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*args)
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    old = _old_codec(sys.argv[1] if len(sys.argv) > 1 else "83a84af")
    warnings.simplefilter("ignore")
    fn, args = examples.get("mlp").build()
    run = dfit_nb.replay(dfit_nb.capture(fn, *args), presets.get("npu_like"))
    charts = {"timeline": views.timeline(run), "utilization": views.utilization(run),
              "noc_load": views.noc_load(run), "buffer_pressure": views.buffer_pressure(run),
              "regions": views.regions(run)}
    variants = {"hand-written": lambda png: old._palette_png(old._rgb_pixels(png), 256),
                "Pillow codec": lambda png: _offline._palette_png(_offline._rgb_pixels(png), 256),
                "Pillow quantize": _pillow_quantize}
    print(f"{'chart':<16} {'size':>9} {'vl-convert':>10}  " + "  ".join(f"{v:>28}" for v in variants))
    totals = dict.fromkeys(variants, 0.0)
    for name, chart in charts.items():
        spec = chart.to_dict()
        t_render, png = _best_of(lambda s: vl_convert.vegalite_to_png(s, scale=1.0, allowed_base_urls=[]), spec,
                                 repeat=2)
        original = old._rgb_pixels(png).astype(int)
        cells = []
        for label, variant in variants.items():
            seconds, small = _best_of(variant, png)
            totals[label] += seconds
            pixels = np.asarray(Image.open(io.BytesIO(small)).convert("RGB")).astype(int)
            error = np.abs(pixels - original)
            cells.append(f"{seconds * 1e3:6.1f} ms {len(small) / 1e3:5.1f} kB err {error.mean():.2f}/{error.max():3d}")
        h, w = original.shape[:2]
        print(f"{name:<16} {f'{w}x{h}':>9} {t_render * 1e3:7.0f} ms  " + "  ".join(f"{c:>28}" for c in cells))
    print("total past vl-convert: " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in totals.items()))


if __name__ == "__main__":
    main()
