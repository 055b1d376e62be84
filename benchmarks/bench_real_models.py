"""Eight real models x four presets: each preset's standing, and the selection's shown gain against the replay.

Issue 41's check on the models a new user brings (``benchmarks/real_models.py``: Keras ResNet50 and MobileNetV2, an
NNX ViT-B/16, a Linen ResNet-18 and its Adam step, the Equinox MNIST CNN, a Flax GPT-2 small, an Equinox U-Net),
on ``tpu_like``, ``cerebras_like``, ``sambanova_like`` and ``npu_like``:

1. **Standing.** Every single style replayed (one call), the fastest style's latency, utilisation and the class
   that dominates its time; then that style streamed (``inferences=--inferences``): throughput, steady-state
   utilisation, the stage that sets the pace and its class, pipeline sections.
2. **Selection.** ``select_dataflows`` for energy and for latency. The *shown* gain is the policy's own
   ``replayed_gain()`` (what its repr, the report's table and the playbook print); the *check* replays the chosen
   per-op policy and the best single style again through ``dfit_nb.replay``, with the replay's kept outputs
   cleared so both run afresh, and takes their gain. The target:
   0 cases where they differ by more than 0.1 percentage points. Beside them, the DP's additive figure for the
   chosen assignment (``totals.gain_vs_best_single``), the starting point that the replay corrects, the
   fallbacks, and the time each selection took.

Run: ``python benchmarks/bench_real_models.py [--models a,b] [--presets a,b] [--size N] [--json out.json]``
(about 20 minutes on 2 cores for all eight at their full sizes; ``--size 32`` gives small versions in minutes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import real_models

import dfit_nb
from dfit_nb.sim import _replay, presets, select_dataflows

PRESETS = ("tpu_like", "cerebras_like", "sambanova_like", "npu_like")
OBJECTIVES = ("energy", "latency")


def _metric(run: Any, objective: str) -> float:
    s = run.summary
    return float(s["energy_j"]) if objective == "energy" else float(s["latency_s"])


def standing(trace: Any, hw: Any, inferences: int) -> dict[str, Any]:
    """Every style's one-call latency and energy, and the fastest one streamed."""
    runs = {style: dfit_nb.replay(trace, hw, style, time_bins=8) for style in ("ws", "os", "is")}
    fastest = min(runs, key=lambda k: float(runs[k].summary["latency_s"]))
    s = runs[fastest].summary
    stream = dfit_nb.replay(trace, hw, fastest, time_bins=8, inferences=inferences).summary
    return {
        "latency_us": {k: float(r.summary["latency_s"]) * 1e6 for k, r in runs.items()},
        "energy_uj": {k: float(r.summary["energy_j"]) * 1e6 for k, r in runs.items()},
        "fastest": fastest,
        "utilization": float(s["utilization"]),
        "bound": str(s["bottleneck_class"].item()),
        "throughput": float(stream["throughput_inferences_per_s"]),
        "steady_utilization": float(stream["steady_state_utilization"]),
        "period_us": float(stream["steady_state_period_s"]) * 1e6,
        "sections": int(stream["sections"]),
        "bottleneck": f"{stream['bottleneck_stage_region'].item() or '-'} "
                      f"({stream['bottleneck_stage_class'].item()})",
    }


def selection(trace: Any, hw: Any, objective: str) -> dict[str, Any]:
    """The selection, its shown gain, and the same gain replayed again from scratch."""
    t0 = time.perf_counter()
    policy = select_dataflows(trace, hw, objective)
    took = time.perf_counter() - t0
    shown = policy.replayed_gain()
    best = str(policy.baselines.attrs["best_single"])
    _replay._kept.clear()  # the replay keeps its last outputs by their inputs: run the check's replays afresh
    again = {"policy": _metric(dfit_nb.replay(trace, hw, policy, time_bins=8), objective),
             "best": _metric(dfit_nb.replay(trace, hw, best, time_bins=8), objective)}
    replayed = (again["best"] - again["policy"]) / again["best"] if again["best"] > 0 else 0.0
    return {"policy": policy.name, "switches": policy.switches, "best_single": best,
            "dp_gain": float(policy.totals["gain_vs_best_single"]), "shown_gain": shown,
            "replayed_gain": replayed, "fallback": bool(policy.fallback), "seconds": took,
            "search": str(policy.totals.attrs.get("search", ""))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(real_models.MODELS))
    p.add_argument("--presets", default=",".join(PRESETS))
    p.add_argument("--size", type=int, default=None, help="input size for every model (default: each model's own)")
    p.add_argument("--inferences", type=int, default=64)
    p.add_argument("--json", type=Path, default=None, help="write every figure to this file")
    a = p.parse_args()
    warnings.simplefilter("ignore")  # spills and parameter-region notes are expected on these machines
    dfit_nb.setup()
    results: dict[str, Any] = {}
    t_start = time.perf_counter()
    for model in a.models.split(","):
        t0 = time.perf_counter()
        fn, args = real_models.build(model, a.size)
        trace = dfit_nb.capture(fn, *args)
        ops = trace.ops.sizes["op"]
        gemms = int(np.sum(trace.ops["m"].values > 0))
        print(f"\n## {model}: {ops} ops, {gemms} GEMMs, {real_models.parameters(args):,} argument elements, "
              f"captured in {time.perf_counter() - t0:.1f} s", flush=True)
        results[model] = {"ops": ops, "gemms": gemms}
        for name in a.presets.split(","):
            hw = presets.get(name)
            row = {"standing": standing(trace, hw, a.inferences)}
            st = row["standing"]
            lat = " ".join(f"{k} {v:9.1f}" for k, v in st["latency_us"].items())
            print(f"{name:15s} latency us: {lat} | util {st['utilization']:6.2%} ({st['bound']}) | streamed "
                  f"{a.inferences}: {st['throughput']:9.1f} inf/s, steady util {st['steady_utilization']:6.2%}, "
                  f"{st['sections']} section(s), pace: {st['bottleneck']}", flush=True)
            for objective in OBJECTIVES:
                sel = selection(trace, hw, objective)
                row[objective] = sel
                diff = abs(sel["shown_gain"] - sel["replayed_gain"]) * 100
                print(f"{'':15s} {objective:7s} {sel['policy'][:40]:40s} DP {sel['dp_gain']:+7.2%} shown "
                      f"{sel['shown_gain']:+7.2%} replayed {sel['replayed_gain']:+7.2%} (|diff| {diff:.3f} pp)"
                      f"{' fell back' if sel['fallback'] else ''} {sel['seconds']:6.1f} s", flush=True)
            results[model][name] = row
        jax.clear_caches()
        if a.json:  # after every model: a long run that stops keeps what it measured
            a.json.write_text(json.dumps(results, indent=1))
    cases = [(m, n, o) for m in results for n in results[m] if isinstance(results[m][n], dict)
             and "standing" in results[m][n] for o in OBJECTIVES]
    off = [c for c in cases if abs(results[c[0]][c[1]][c[2]]["shown_gain"]
                                   - results[c[0]][c[1]][c[2]]["replayed_gain"]) > 1e-3]
    falls = sum(results[m][n][o]["fallback"] for m, n, o in cases)
    dp_off = sum(abs(results[m][n][o]["dp_gain"] - results[m][n][o]["replayed_gain"]) > 1e-3 for m, n, o in cases)
    print(f"\n{len(cases)} cases: {len(off)} where the shown gain differs from the replayed one by more than 0.1 pp "
          f"(target 0){': ' + str(off) if off else ''}; {falls} fell back to a single style; the DP's additive "
          f"figure was off by more than 0.1 pp in {dp_off}; {time.perf_counter() - t_start:.0f} s in all")
    if a.json:
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
