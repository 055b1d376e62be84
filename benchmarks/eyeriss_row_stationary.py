"""Would a fourth dataflow, row stationary, explain Eyeriss' measured buffer and DRAM traffic? A study, not a model.

Issue 39 asks for row stationary (RS, the dataflow of the Eyeriss paper's taxonomy) "if the three styles cannot
explain its buffer and DRAM traffic". ``bench_eyeriss.py`` shows that they cannot on VGG-16. Before RS is added to
the one machine model (everywhere a dataflow is chosen), this script asks whether RS would: it prices each of the
18 measured layers (``../shared/data/eyeriss_jssc2017/eyeriss_layers.csv``, never copied here) under RS with the
best mapping a mapper could choose on the chip's own sizes, and compares that mapping's global-buffer and DRAM
bytes with the measured ones. Nothing here is fitted to the measurements, and nothing here is used by
``dfit_nb``: it is the evidence for a design decision (docs/validation.md, Eyeriss).

Row stationary as priced here (Chen, Emer, Sze, ISCA 2016 and JSSC 2017, as their public summaries describe it):

* a logical PE set of R x e PEs (filter rows x output rows) computes a 2-D convolution: a filter row stays in a PE,
  ifmap rows move diagonally, partial sums accumulate up a column; r sets of different channels are stacked
  vertically (their sums accumulate through the column) and t sets of different filters side by side, on the
  12 x 14 array (a set wider than 14 columns is folded over further rows of the array);
* each PE holds p filters x q channels of a filter row (p q S words of its 224-word filter scratchpad, q S of
  its 12-word ifmap scratchpad, p of its 24-word psum scratchpad); a pass computes p t filters x q r channels x e
  output rows for n images (n divides the batch);
* the 108 KB global buffer holds partial sums of m filters (a multiple of p t) over e output rows (all F columns,
  n images, 2 bytes each) and the ifmap strip of the pass's q r channels (double-buffered); filters go from DRAM
  to the PEs (not through the buffer);
* loop order, innermost first: filter groups of p t within m, channel groups of q r, output-row strips of e,
  filter blocks of m. So per layer: ifmap strips are read from DRAM once per filter block (M / m) and from the
  buffer once per filter group (M / (p t)); partial sums are written to the buffer once per channel group and
  read back for each but the first, the final ones read once more on their way to DRAM; filters are read from
  DRAM once per strip and image group (E / e x N / n); a strip of e output rows reads (e - 1) U + R ifmap rows.

The mapper takes, per layer, the mapping with the lowest DRAM and buffer energy at the paper's normalised costs
(DRAM 200, global buffer 6 per access: Chen, Emer, Sze, ISCA 2016), or, with ``--objective buffer``, the least
buffer traffic (the chip's VGG-16 time is its buffer traffic at ~15 B per cycle, ``bench_eyeriss.py``).

Run: ``python benchmarks/eyeriss_row_stationary.py [--objective energy|buffer] [--filters-through-buffer]``
(about 10 s on 2 shared cores).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "eyeriss_jssc2017" / "eyeriss_layers.csv"
ROWS, COLS = 12, 14  # the PE array
SPAD_IFMAP, SPAD_FILTER, SPAD_PSUM = 12, 224, 24  # words per PE
BUFFER = 108 * 1024  # bytes
WORD = 2  # bytes: 16-bit fixed point, partial sums included
E_DRAM, E_BUFFER = 200.0, 6.0  # normalised energy per access (ISCA 2016)


def ceil_div(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    return -(-np.asarray(a) // np.asarray(b))


def best_mapping(layer: pd.Series, objective: str, filters_through_buffer: bool) -> dict[str, float]:
    """The row-stationary mapping of one layer with the lowest ``objective``, and its buffer and DRAM bytes."""
    n_img, h, w, r_, s_, e_out, f_out, c, m_total, u, groups = (int(layer[k]) for k in (
        "batch_N", "H_in_padded", "W_in_padded", "R", "S", "E_out", "F_out", "C_in_per_group", "M_out_total",
        "stride_U", "groups"))
    mg = m_total // groups  # filters per group: each group is its own convolution, run one after the other
    ifmap, filters = n_img * c * h * w * WORD, r_ * s_ * c * mg * WORD  # per group
    ofmap = n_img * e_out * f_out * mg * WORD
    best: tuple[float, dict[str, float]] | None = None
    row_blocks = ROWS // r_
    for e in range(1, min(e_out, COLS * row_blocks) + 1):
        sets = row_blocks * (COLS // e) if e <= COLS else row_blocks // ceil_div(e, COLS)
        strip = (e - 1) * u + r_
        overlap = ceil_div(e_out, e) * strip / h  # ifmap rows read per strip over the ifmap's rows
        for p in range(1, SPAD_PSUM + 1):
            for q in range(1, SPAD_IFMAP // s_ + 1):
                if p * q * s_ > SPAD_FILTER:
                    break
                for r in range(1, sets + 1):
                    t = np.arange(1, sets // r + 1)
                    t = t[(q * r <= c) & (p * t <= mg)]
                    if not len(t):
                        continue
                    for n in (k for k in range(1, n_img + 1) if n_img % k == 0):
                        # m: every multiple of p t up to the group's filters, as arrays over (t, m / (p t))
                        k = np.arange(1, mg // p + 1)[None, :]
                        pt = (p * t)[:, None]
                        m = pt * k
                        ok = (m <= mg) & (m * e * f_out * n * WORD + 2 * q * r * n * strip * w * WORD <= BUFFER)
                        if not ok.any():
                            continue
                        blocks, groups_c = ceil_div(mg, m), ceil_div(c, q * r)
                        f_reads = filters * ceil_div(e_out, e) * (n_img // n)
                        dram = ifmap * overlap * blocks + f_reads + ofmap
                        buffer = (ifmap * overlap * blocks  # strips written in from DRAM
                                  + ifmap * overlap * ceil_div(mg, pt)  # strips read per filter group
                                  + ofmap * (2 * groups_c - 1) + ofmap  # psums written, read back, final read
                                  + (2 * f_reads if filters_through_buffer else 0))
                        score = E_DRAM * dram + E_BUFFER * buffer if objective == "energy" else buffer + 1e-9 * dram
                        score = np.where(ok, score, np.inf)
                        i = np.unravel_index(np.argmin(score), score.shape)
                        if best is None or score[i] < best[0]:
                            best = (float(score[i]), {"e": e, "p": p, "q": q, "r": r, "t": int(t[i[0]]), "n": n,
                                                      "m": int(m[i]), "PEs": r_ * e * r * int(t[i[0]]),
                                                      "buffer": float(np.broadcast_to(buffer, score.shape)[i]),
                                                      "dram": float(np.broadcast_to(dram, score.shape)[i])})
    if best is None:
        raise SystemExit(f"no row-stationary mapping fits {layer['network']} {layer['layer']}")
    out = best[1]
    out["buffer"] *= groups
    out["dram"] *= groups
    return out


def mape(pred: np.ndarray, meas: np.ndarray) -> float:
    return float(np.mean(np.abs(pred / meas - 1.0)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--objective", choices=("energy", "buffer"), default="energy")
    p.add_argument("--filters-through-buffer", action="store_true",
                   help="filters pass through the global buffer on their way to the PEs")
    a = p.parse_args()
    if not DATA.is_file():
        raise SystemExit(f"{DATA} is absent: the measured Eyeriss layers live in the project's shared data folder "
                         "(../shared/data/eyeriss_jssc2017)")
    t0 = time.perf_counter()
    data = pd.read_csv(DATA)
    rows = []
    for _, layer in data.iterrows():
        b = best_mapping(layer, a.objective, a.filters_through_buffer)
        macs = layer["MACs_calc_G"] * 1e9
        rows.append({"layer": f"{layer['network']} {layer['layer']}",
                     **{k: b[k] for k in ("e", "p", "q", "r", "t", "n", "m", "PEs")},
                     "chip PEs": layer["active_PEs_of_168"],
                     "buffer MB RS": b["buffer"] / 1e6, "measured": layer["global_buffer_accesses_MB"],
                     "RS / measured": b["buffer"] / 1e6 / layer["global_buffer_accesses_MB"],
                     "measured B/MAC": layer["global_buffer_accesses_MB"] * 1e6 / macs,
                     "DRAM MB RS": b["dram"] / 1e6, "measured DRAM": layer["DRAM_accesses_MB"],
                     "DRAM RS / measured": b["dram"] / 1e6 / layer["DRAM_accesses_MB"]})
    r = pd.DataFrame(rows)
    print(f"row stationary on the chip's sizes ({ROWS}x{COLS} PEs; scratchpads {SPAD_IFMAP}/{SPAD_FILTER}/"
          f"{SPAD_PSUM} words; {BUFFER // 1024} KB buffer); objective: {a.objective}; filters "
          f"{'through' if a.filters_through_buffer else 'around'} the buffer")
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(r.round(3).to_string(index=False))
    vgg = r["layer"].str.startswith("VGG") & ~r["layer"].str.contains("CONV5")
    for name, sel in (("all 18 layers", np.ones(len(r), bool)), ("AlexNet and VGG-16 CONV5", ~vgg),
                      ("VGG-16 CONV1-1 .. CONV4-3", vgg)):
        print(f"{name:28s} buffer bytes RS / measured {r['RS / measured'][sel].min():.2f}-"
              f"{r['RS / measured'][sel].max():.2f}x (MAPE {mape(r['buffer MB RS'][sel], r['measured'][sel]):.1%}); "
              f"DRAM {r['DRAM RS / measured'][sel].min():.2f}-{r['DRAM RS / measured'][sel].max():.2f}x "
              f"(MAPE {mape(r['DRAM MB RS'][sel], r['measured DRAM'][sel]):.1%})")
    print(f"total run time {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
