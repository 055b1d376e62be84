"""Kernels: launches, launch share and DRAM traffic of the replay per fusion mode ("none", "rules", "compiler").

The replay prices a program as a sequence of kernels (``dfit_nb.sim.kernels``: ops the compiler fuses keep their
intermediates on chip, pay one launch, overlap vector work with the PE array). For each ``fusion=`` mode, side by
side, on the ``tpu_v4`` preset (``ws`` dataflow; its compiler, like XLA:TPU, ends a kernel at a softmax's or a layer
norm's reductions: ``Hardware.row_reductions = "split"``), all captured statically from ``jax.ShapeDtypeStruct``
arguments (nothing is allocated or run):

1. a GPT-style decoder written here in plain ``jax.numpy`` (weights as arguments, ``jax.named_scope`` per layer:
   token + position embedding, pre-layer-norm blocks of causal masked multi-head self-attention and a GELU MLP of
   4 x d_model, a final layer norm and an untied LM head), by default 4 layers, d_model 256, 4 heads, seq 128,
   vocab 1024, batch 1;
2. the same decoder at GPT-2-small size (12 layers, d_model 768, 12 heads, seq 128, vocab 50257, batch 1);
3. a ResNet-18 training step with Adam: the bundled ``dfit_nb.examples.resnet18.forward`` (no batch norm; the
   bundled example has no training step, so it is built here: softmax cross-entropy, ``jax.value_and_grad``,
   ``optax.adam(1e-3)``, ``optax.apply_updates``), batch 8 of 64 x 64 RGB images, float32.

Per model and mode: the leaf ops the replay prices (``len(prepare(trace, "none").op)``), the kernels that launch
(distinct ``run.ops["kernel"]`` among ops with ``launch_cycles > 0``; a kernel of free reshape/broadcast ops alone
launches nothing; "(all)" adds those views: ``prepare(trace, mode).kernels.count``), the ops fused into a kernel
with others and the free ones (``run.ops["fused"]``, ``run.ops["free"]``), XLA's executed fusions
(``trace.lowering.sizes["fusion"]``, the same for every mode) and the ratio kernels / XLA fusions (target for the
default "rules": within 1.25x; both readings are printed, 0.80-1.25 and at most 1.25), the launch cycles summed over
ops as a share of the replayed latency (target for "rules": at most 15%), the latency (cycles at the preset's
clock), DRAM bytes and energy, and what ``dfit_nb.sim.cost`` (and ``sweep``, per machine) prices for the same
grouping, each kernel alone (``total_cycles``: inputs from DRAM, results back, nothing overlapped between
kernels), with its ratio to the replayed latency.

What ``trace.lowering`` counts (``dfit_nb/capture/lowering.py``): one row per HLO instruction the runtime executes
as a unit in the optimized HLO of the *capture backend* (this machine's CPU, not a TPU): every fusion and every
standalone instruction (dot, copy, custom-call, ...) of the ENTRY computation *and* of the computations it runs
instruction by instruction (while bodies and conditions, conditional branches, calls, async computations), plus
one ``control`` row per while/conditional/call itself. Instructions inside fused computations and reducers are
folded into their fusion's row; ``parameter``, ``constant``, ``tuple``, ``get-tuple-element``, ``bitcast``,
``after-all``, ``opt-barrier`` and ``add-dependency`` are never rows. Each row is counted once, not once per loop
iteration (none of the programs here has a loop). The rows are printed by ``kind`` (``kLoop``, ``kInput``,
``kOutput``, ``kCustom``: on the CPU backend its dots and convolutions, not fused with their epilogues;
``unfused``; ``control``).

For the training step, the replayed DRAM bytes are set against a minimum traffic: what the step must move once.
P = parameter bytes, S = Adam's state (``mu`` and ``nu``, 2 P, plus its int32 step count), A = activations kept
for backward, I = the batch (images and labels):

    minimum = 2 P (parameters read, new ones written) + 2 S (state read and written)
              + 2 P (gradients written, read by the update) + 2 A (residuals written, read by backward) + I (read)

A is the residuals ``jax.vjp`` keeps for the backward pass of the loss (``jax.ad_checkpoint.print_saved_residuals``
lists them, from ``jax.ShapeDtypeStruct``s too) *less* those it lists as ``from the argument`` (the parameters and
the batch themselves: already counted as P and I) and those it lists as outputs of ``broadcast_in_dim`` (ReLU's
``full_like(g, 0)``: a literal no compiler stores); both are printed. What remains is counted as listed: each ReLU's
output (float32) *and* its ``x > 0`` mask (bool), though a compiler could derive the mask from the output, so A
leans high and the minimum with it.

The replay counts DRAM bytes in the machine's words (``tpu_v4``: 2 bytes; a float32 tensor moves as bf16, a bool
keeps its byte), so the minimum is printed both at the program's dtypes and at the preset's word, and the target is
checked against the latter (the same unit). The replayed bytes are split into reads, writes and spills (the per-op
``dram_reads_input + dram_reads_weight``, ``dram_writes_output``, ``spilled_bytes``), beside the step's inputs and
outputs at the word. A ratio below 1 means the replay moves less than the minimum, and the script says so.

Wall seconds of each capture and each replay (a replay that meets a new padded program size includes compiling
it) and the script's total run time (about 20 s on 2 shared cores) are printed. No timing is asserted. Run:
``python benchmarks/bench_kernels.py [--quick] [--gpt2-vocab 50257] [--batch 1] [--images 64 --image-batch 8]``
(``--quick``: only the first model).

With ``--tpu v4:2x2x1`` each program is also lowered by XLA:TPU for that topology (``capture(..., lower_for=...)``,
ahead of time, no TPU; it needs Google's ``libtpu``, in a throwaway venv: ``docs/validation.md``) and the rules are
set against XLA:TPU's kernels: the counts (its executed instructions less DMA halves and layout-only calls), a replay
with its grouping (``fusion="compiler"``), and pair counting of which ops the two put in one kernel.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import re
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from jax import ad_checkpoint

import dfit_nb
from dfit_nb.examples import resnet18
from dfit_nb.sim import cost, presets
from dfit_nb.sim._prepare import prepare
from dfit_nb.sim.kernels import splits_rows

MODES = ("none", "rules", "compiler")
DEFAULT = "rules"
PRESET = "tpu_v4"
_T0 = time.perf_counter()
#: the device of a TPU topology the programs are also lowered for (``--tpu``), or None
TPU: Any = None


# ----------------------------------------------------------------------------------------------------------------
# A GPT-style decoder in plain jax.numpy
# ----------------------------------------------------------------------------------------------------------------
def gpt_specs(*, layers: int, d_model: int, vocab: int, seq: int, batch: int,
              dtype: Any = jnp.float32) -> tuple[dict[str, Any], Any]:
    """``(params, tokens)`` as shape specs for :func:`gpt`: untied token embedding and LM head."""
    spec = lambda *s: jax.ShapeDtypeStruct(s, dtype)
    d_ff = 4 * d_model
    block = {
        "ln1": {"scale": spec(d_model), "bias": spec(d_model)},
        "wqkv": spec(d_model, 3 * d_model), "bqkv": spec(3 * d_model),
        "wo": spec(d_model, d_model), "bo": spec(d_model),
        "ln2": {"scale": spec(d_model), "bias": spec(d_model)},
        "w1": spec(d_model, d_ff), "b1": spec(d_ff),
        "w2": spec(d_ff, d_model), "b2": spec(d_model),
    }
    params = {"wte": spec(vocab, d_model), "wpe": spec(seq, d_model), "blocks": [dict(block) for _ in range(layers)],
              "ln_f": {"scale": spec(d_model), "bias": spec(d_model)}, "head": spec(d_model, vocab)}
    return params, jax.ShapeDtypeStruct((batch, seq), jnp.int32)


def _layer_norm(p: dict[str, Any], x: Any, eps: float = 1e-5) -> Any:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * p["scale"] + p["bias"]


def _causal_attention(p: dict[str, Any], x: Any, heads: int) -> Any:
    b, s, d = x.shape
    dh = d // heads
    q, k, v = jnp.split((x @ p["wqkv"] + p["bqkv"]).reshape(b, s, 3, heads, dh), 3, axis=2)
    q, k, v = (t[:, :, 0] for t in (q, k, v))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(dh).astype(np.float32)
    mask = jnp.tril(jnp.ones((s, s), bool))
    scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
    probs = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, d) @ p["wo"] + p["bo"]


def gpt(params: dict[str, Any], tokens: Any, heads: int = 4) -> Any:
    """Logits ``(batch, seq, vocab)`` of a pre-norm GPT decoder; regions ``embed``, ``layer_<i>/{attn, mlp}``,
    ``ln_f``, ``head``."""
    with jax.named_scope("embed"):
        x = jnp.take(params["wte"], tokens, axis=0) + params["wpe"][: tokens.shape[1]]
    for i, p in enumerate(params["blocks"]):
        with jax.named_scope(f"layer_{i}"):
            with jax.named_scope("attn"):
                x = x + _causal_attention(p, _layer_norm(p["ln1"], x), heads)
            with jax.named_scope("mlp"):
                h = jax.nn.gelu(_layer_norm(p["ln2"], x) @ p["w1"] + p["b1"], approximate=True)
                x = x + h @ p["w2"] + p["b2"]
    with jax.named_scope("ln_f"):
        x = _layer_norm(params["ln_f"], x)
    with jax.named_scope("head"):
        return x @ params["head"]


# ----------------------------------------------------------------------------------------------------------------
# A ResNet-18 training step with Adam
# ----------------------------------------------------------------------------------------------------------------
def _loss(params: dict[str, Any], images: Any, labels: Any) -> Any:
    logits = resnet18.forward(params, images)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=-1))


def resnet_train_step(batch: int, size: int) -> tuple[Any, tuple[Any, ...]]:
    """``(step, (params, opt_state, images, labels))``: one Adam step of ResNet-18 on a batch, as shape specs."""
    import optax

    opt = optax.adam(1e-3)
    params, images = resnet18.specs(batch=batch, size=size)
    opt_state = jax.eval_shape(opt.init, params)
    labels = jax.ShapeDtypeStruct((batch,), jnp.int32)

    def step(params, opt_state, images, labels):
        loss, grads = jax.value_and_grad(_loss)(params, images, labels)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step, (params, opt_state, images, labels)


def nbytes(tree: Any, word: int | None = None) -> int:
    """Bytes of every array (or shape spec) leaf of ``tree``; with ``word``, each element at most ``word`` bytes
    (the replay's unit: a dtype wider than the machine's native word is cast down to it, a narrower one kept)."""
    size = lambda x: np.dtype(x.dtype).itemsize if word is None else min(np.dtype(x.dtype).itemsize, word)
    return int(sum(np.prod(x.shape, dtype=np.int64) * size(x) for x in jax.tree.leaves(tree)))


_RESIDUAL = re.compile(r"^\s*([a-z]+[0-9]*)\[([0-9,]*)\]\s*(.*)$")
_DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": jnp.bfloat16, "i32": np.int32, "bool": np.bool_}


def saved_residuals(params: Any, images: Any, labels: Any, word: int | None = None) -> dict[str, float]:
    """Bytes (and count) of the residuals ``vjp`` of the loss keeps, by what they are, from the text
    ``jax.ad_checkpoint.print_saved_residuals`` prints: ``values`` (outputs of forward ops other than a broadcast),
    ``masks`` (bool outputs: ReLU's ``x > 0``), ``broadcasts`` (outputs of ``broadcast_in_dim``: ReLU's
    ``full_like(g, 0)``, a literal) and ``arguments`` (the parameters and the batch themselves); ``word`` as in
    :func:`nbytes`."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        ad_checkpoint.print_saved_residuals(_loss, params, images, labels)
    out = dict.fromkeys(("values", "masks", "broadcasts", "arguments", "count"), 0.0)
    for line in buf.getvalue().splitlines():
        m = _RESIDUAL.match(line)
        if m is None:
            continue
        dims = [int(d) for d in m.group(2).split(",") if d]
        item = np.dtype(_DTYPES[m.group(1)]).itemsize
        size = int(np.prod(dims, dtype=np.int64)) * (item if word is None else min(item, word))
        what = m.group(3)
        if what.startswith("from the argument"):
            out["arguments"] += size
        elif what.startswith("output of broadcast_in_dim"):
            out["broadcasts"] += size
        else:
            out["masks" if m.group(1) == "bool" else "values"] += size
            out["count"] += 1
    return out


# ----------------------------------------------------------------------------------------------------------------
# Measuring
# ----------------------------------------------------------------------------------------------------------------
def measure(name: str, fn: Any, args: tuple[Any, ...]) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """Capture ``fn(*args)`` statically, replay it on the preset once per fusion mode; print the kernel table.
    Returns the table's figures and the runs, by mode."""
    t0 = time.perf_counter()
    trace = dfit_nb.capture(fn, *args)
    took = time.perf_counter() - t0
    low = trace.lowering
    xla = int(low.sizes["fusion"])
    kinds = {k: int(v) for k, v in zip(*np.unique(low["kind"].values.astype(str), return_counts=True), strict=True)}
    leaf = len(prepare(trace, "none").op)
    print(f"\n{name}: captured in {took:.1f} s; {int(trace.ops.sizes['op'])} ops in the trace, {leaf} leaf ops "
          f"priced; XLA's executed fusions (CPU backend) {xla} ({', '.join(f'{k} {v}' for k, v in kinds.items())})")
    hw = presets.get(PRESET)
    rows: dict[str, dict[str, float]] = {}
    runs: dict[str, Any] = {}
    for mode in MODES:
        t0 = time.perf_counter()
        run = dfit_nb.replay(trace, hw, "ws", fusion=mode)
        seconds = time.perf_counter() - t0
        runs[mode] = run
        launch = run.ops["launch_cycles"].values
        kernel = run.ops["kernel"].values
        latency = float(run.summary["latency_cycles"])
        k = prepare(trace, mode, splits_rows(hw)).kernels
        rows[mode] = {
            "kernels": len(np.unique(kernel[launch > 0])), "all_kernels": k.count, "payers": int(k.payer.sum()),
            "launch": float(launch.sum()), "latency": latency, "share": float(launch.sum()) / latency,
            "us": latency / (hw.clock_ghz * 1e3), "dram": float(run.summary["dram_bytes"]),
            "energy": float(run.summary["energy_j"]), "fused": int(np.asarray(run.ops["fused"].values, bool).sum()),
            "free": int(np.asarray(run.ops["free"].values, bool).sum()), "seconds": seconds,
            # sim.cost of the same kernels, each alone (what sweep() prices per machine)
            "alone": float(cost(trace, hw, "ws", fusion=mode)["total_cycles"]),
        }
    print(f"{'fusion':9s} {'kernels':>8s} {'(all)':>6s} {'/XLA':>6s} {'fused ops':>9s} {'free ops':>8s} "
          f"{'launch cyc':>11s} {'latency cyc':>12s} {'launch %':>8s} {'latency us':>10s} {'DRAM MB':>9s} "
          f"{'energy mJ':>9s} {'replay s':>8s} {'cost cyc':>12s} {'/latency':>8s}")
    for mode, r in rows.items():
        print(f"{mode:9s} {r['kernels']:8d} {r['all_kernels']:6d} {r['kernels'] / xla:6.2f} {r['fused']:9d} "
              f"{r['free']:8d} {r['launch']:11,.0f} {r['latency']:12,.0f} {r['share']:8.1%} {r['us']:10.1f} "
              f"{r['dram'] / 1e6:9.1f} {r['energy'] * 1e3:9.3f} {r['seconds']:8.2f} {r['alone']:12,.0f} "
              f"{r['alone'] / r['latency']:8.2f}")
    d = rows[DEFAULT]
    ratio = d["kernels"] / xla
    print(f"targets ({DEFAULT}): kernels / XLA fusions {ratio:.2f} (within 1.25x either way, 0.80-1.25: "
          f"{'met' if 1 / 1.25 <= ratio <= 1.25 else 'NOT met'}; at most 1.25x: "
          f"{'met' if ratio <= 1.25 else 'NOT met'}); launch share {d['share']:.1%} (<= 15%: "
          f"{'met' if d['share'] <= 0.15 else 'NOT met'})")
    # the same kernels as XLA:CPU would launch them: its dots are custom calls, each launched apart from its
    # epilogue fusion, so a rule kernel of a GEMM with vector work of its own is two launches there
    prep = prepare(trace, DEFAULT, splits_rows(hw))
    k = prep.kernels
    gemm_kernels = np.unique(k.kernel[prep.arrays["gemm"] > 0])
    with_epilogue = sum(1 for g in gemm_kernels if ((k.kernel == g) & ~k.free & (prep.arrays["gemm"] <= 0)).any())
    cpu_like = d["kernels"] + with_epilogue
    print(f"the {DEFAULT} kernels counted as XLA:CPU launches them (each of the {with_epilogue} GEMM kernels with an "
          f"epilogue as two: a dot custom call, then its fusion): {cpu_like}, {cpu_like / xla:.2f}x XLA's {xla}")
    floor = tpu_v4_floor_us()
    if floor is not None:
        fixed = d["kernels"] * floor
        print(f"measured floor: the fastest of the TPU v4 matmul fusions in ../shared/data/tpu_v4_matmul takes "
              f"{floor:.2f} us; {d['kernels']} kernels x {floor:.2f} us = {fixed:.1f} us, "
              f"{fixed / d['us']:.0%} of the replayed {d['us']:.1f} us")
    return rows, runs


# ----------------------------------------------------------------------------------------------------------------
# Against XLA:TPU's own fusions (ahead-of-time compile for a TPU topology: libtpu, no TPU)
# ----------------------------------------------------------------------------------------------------------------
#: instructions of an executed schedule that are not kernels: the async halves of DMAs (XLA:TPU prefetches operands
#: between memories with copy-start/-done and slice-start/-done pairs) and its layout-only custom call
_NOT_KERNELS = re.compile(r"^(?:[a-z-]+-(?:start|done)|bitcast)$")
_LAYOUT_CALLS = ("ConcatBitcast",)


def executed_kernels(lowering: Any) -> tuple[int, dict[str, int]]:
    """Kernels in a lowering (``trace.lowering``): every executed instruction but DMA halves and layout-only calls;
    and the count of every executed instruction by ``opcode/kind`` (to print)."""
    opcode = lowering["opcode"].values.astype(str)
    kind = lowering["kind"].values.astype(str)
    names = lowering["fusion"].values.astype(str)
    hlo = str(lowering["hlo"].values) if "hlo" in lowering else ""
    layout = {n for n in names if any(f'%{n} = ' in line and f'custom_call_target="{c}"' in line
                                      for line in hlo.splitlines() for c in _LAYOUT_CALLS)} if hlo else set()
    keep = np.array([not _NOT_KERNELS.match(o) and n not in layout for o, n in zip(opcode, names, strict=True)])
    labels, counts = np.unique([f"{o}/{k}" for o, k in zip(opcode, kind, strict=True)], return_counts=True)
    return int(keep.sum()), dict(zip(labels.tolist(), counts.tolist(), strict=True))


def pair_agreement(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Pair counting between two groupings of the same ops: of the op pairs ``a`` puts in one kernel, the share
    ``b`` does too (precision of ``a`` against ``b``), and of those ``b`` puts together, the share ``a`` does
    (recall)."""
    def pairs(x: np.ndarray) -> float:
        return float((x * (x - 1) / 2).sum())
    _, ia = np.unique(a, return_inverse=True)
    _, ib = np.unique(b, return_inverse=True)
    table = np.zeros((ia.max() + 1, ib.max() + 1))
    np.add.at(table, (ia, ib), 1)
    both, in_a, in_b = pairs(table), pairs(table.sum(1)), pairs(table.sum(0))
    return both / max(in_a, 1.0), both / max(in_b, 1.0)


def against_tpu(name: str, fn: Any, args: tuple[Any, ...], device: Any, rules: dict[str, float]) -> None:
    """Capture ``fn`` lowered for ``device`` (a TPU topology's), replay it with XLA:TPU's fusions
    (``fusion="compiler"``) and set the rules against them: kernel counts and which ops they put together."""
    t0 = time.perf_counter()
    trace = dfit_nb.capture(fn, *args, lower_for=device)
    took = time.perf_counter() - t0
    kernels, by_kind = executed_kernels(trace.lowering)
    hw = presets.get(PRESET)
    print(f"{name} lowered for {trace.attrs['device_kind']} in {took:.1f} s: {int(trace.lowering.sizes['fusion'])} "
          f"executed instructions ({', '.join(f'{k} {v}' for k, v in by_kind.items())}); kernels (no DMA halves, "
          f"no layout-only calls): {kernels}")
    runs = {mode: dfit_nb.replay(trace, hw, "ws", fusion=mode) for mode in ("rules", "compiler")}
    for mode, run in runs.items():
        launch = run.ops["launch_cycles"].values
        latency = float(run.summary["latency_cycles"])
        launched = len(np.unique(run.ops["kernel"].values[launch > 0]))
        label = "rules" if mode == "rules" else "XLA:TPU's fusions (compiler)"
        print(f"  {label:30s} kernels {launched:4d} ({launched / kernels:.2f}x XLA:TPU's {kernels}), launch "
              f"{launch.sum() / latency:6.1%} of {latency / (hw.clock_ghz * 1e3):8.1f} us, DRAM "
              f"{float(run.summary['dram_bytes']) / 1e6:7.1f} MB")
    ratio = rules["kernels"] / kernels
    ops = runs["rules"].ops
    here = len(np.unique(ops["kernel"].values[ops["launch_cycles"].values > 0]))
    print(f"  target ({DEFAULT}): kernels / XLA:TPU's {ratio:.2f} (0.80-1.25: "
          f"{'met' if 1 / 1.25 <= ratio <= 1.25 else 'NOT met'}); the rules launch as many kernels on this trace "
          f"as on the CPU one: {rules['kernels'] == here}")
    # which ops the two put together: the ops that do work in both (not free under the rules, in an XLA fusion)
    r, c = runs["rules"].ops, runs["compiler"].ops
    work = ~np.asarray(r["free"].values, bool) & ~np.asarray(c["free"].values, bool)
    precision, recall = pair_agreement(r["kernel"].values[work], c["kernel"].values[work])
    print(f"  op pairs in one kernel: of the rules', {precision:.0%} share an XLA:TPU fusion; of XLA:TPU's, "
          f"{recall:.0%} share a rules kernel ({int(work.sum())} working ops)")


def tpu_device(topology: str) -> Any:
    """A device of an ahead-of-time TPU topology (``"v4:2x2x1"``), or None with the reason printed."""
    try:
        from jax.experimental import topologies
        return topologies.get_topology_desc(platform="tpu", topology_name=topology).devices[0]
    except Exception as err:  # libtpu absent, or a topology it does not know
        print(f"\nXLA:TPU comparison skipped: no TPU topology {topology!r} ({type(err).__name__}: "
              f"{str(err).splitlines()[0][:200]}). It needs Google's libtpu, the version jax[tpu] pins, in a "
              f"throwaway venv: python -m venv --system-site-packages /tmp/tpuvenv && /tmp/tpuvenv/bin/pip install "
              f"'jax[tpu]=={jax.__version__}' (no TPU needed)")
        return None


def tpu_v4_floor_us() -> float | None:
    """The fastest measured TPU v4 fusion (a matmul of at most 128 per side, mean time over its samples), in us:
    what one kernel costs on that chip however little it does. None where the shared data folder is absent."""
    folder = Path(__file__).resolve().parents[2] / "shared" / "data" / "tpu_v4_matmul"
    files = sorted(folder.glob("fusion_statistics_report_with_scale_sim_*.csv"))
    if not files:
        return None
    return float(min(pd.read_csv(f)["fusion_avg"].min() for f in files))


def decoder(name: str, *, layers: int, d_model: int, heads: int, vocab: int, seq: int, batch: int) -> None:
    params, tokens = gpt_specs(layers=layers, d_model=d_model, vocab=vocab, seq=seq, batch=batch)
    print(f"\n== {name}: {layers} layers, d_model {d_model}, {heads} heads, seq {seq}, vocab {vocab}, batch {batch}, "
          f"float32, {nbytes(params) / 4 / 1e6:.1f} M parameters")
    fn = functools.partial(gpt, heads=heads)
    rows, _ = measure(name, fn, (params, tokens))
    if TPU is not None:
        against_tpu(name, fn, (params, tokens), TPU, rows[DEFAULT])


def minimum_traffic(args: tuple[Any, ...], word: int | None) -> tuple[float, dict[str, float]]:
    """The bytes one training step must move once (see the module docstring), and its parts, at ``word``."""
    params, opt_state, images, labels = args
    res = saved_residuals(params, images, labels, word)
    parts = {"parameters": 2 * nbytes(params, word), "Adam state": 2 * nbytes(opt_state, word),
             "gradients": 2 * nbytes(params, word), "activations kept": 2 * (res["values"] + res["masks"]),
             "batch": nbytes((images, labels), word)}
    return float(sum(parts.values())), {**parts, **{f"res_{k}": v for k, v in res.items()}}


def training_step(batch: int, size: int) -> None:
    step, args = resnet_train_step(batch, size)
    word = int(presets.get(PRESET).word_bytes)
    print(f"\n== ResNet-18 training step (Adam): batch {batch}, {size}x{size}x3 float32 images, "
          f"{nbytes(args[0]) / 4 / 1e6:.2f} M parameters")
    rows, runs = measure("resnet18 train step", step, args)
    if TPU is not None:
        against_tpu("resnet18 train step", step, args, TPU, rows[DEFAULT])
    t0 = time.perf_counter()
    minimum, parts = minimum_traffic(args, None)
    minimum_w, parts_w = minimum_traffic(args, word)
    res_s = time.perf_counter() - t0
    print(f"activations kept for backward (float32): {parts['activations kept'] / 2e6:.1f} MB = "
          f"{parts['res_values'] / 1e6:.1f} MB values + {parts['res_masks'] / 1e6:.1f} MB bool masks "
          f"({int(parts['res_count'])} residuals of vjp, listed twice in {res_s:.1f} s); not counted: "
          f"{parts['res_broadcasts'] / 1e6:.1f} MB broadcast literals, {parts['res_arguments'] / 1e6:.1f} MB "
          f"arguments (parameters and batch, counted as such)")
    for label, total, pp in (("float32 (program dtypes)", minimum, parts),
                             (f"{PRESET}'s {word}-byte word (the replay's unit)", minimum_w, parts_w)):
        terms = " + ".join(f"{k} {v / 1e6:.1f}" for k, v in pp.items() if not k.startswith("res_"))
        print(f"minimum traffic at {label}: {total / 1e6:.1f} MB = {terms} MB")
    outputs = nbytes(jax.eval_shape(step, *args), word)
    print(f"{'fusion':9s} {'DRAM MB':>9s} {'reads MB':>9s} {'writes MB':>9s} {'spills MB':>9s} "
          f"{'/min word':>9s} {'/min f32':>9s}")
    for mode, r in rows.items():
        mb = {v: float(runs[mode].ops[v].values.sum()) / 1e6
              for v in ("dram_reads_input", "dram_reads_weight", "dram_writes_output", "spilled_bytes")}
        print(f"{mode:9s} {r['dram'] / 1e6:9.1f} {mb['dram_reads_input'] + mb['dram_reads_weight']:9.1f} "
              f"{mb['dram_writes_output']:9.1f} {mb['spilled_bytes']:9.1f} {r['dram'] / minimum_w:9.2f} "
              f"{r['dram'] / minimum:9.2f}")
    print(f"for reference at the word: the step's inputs {nbytes(args, word) / 1e6:.1f} MB (read once), its outputs "
          f"(new parameters, new Adam state, loss) {outputs / 1e6:.1f} MB (written once)")
    ratio = rows[DEFAULT]["dram"] / minimum_w
    verdict = "met" if ratio <= 2 else "NOT met"
    if ratio < 1:
        verdict += ", but below 1: the replay moves less than the minimum"
    print(f"target ({DEFAULT}): DRAM / minimum (same unit) {ratio:.2f} (<= 2: {verdict})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="only the first model (the small decoder)")
    p.add_argument("--batch", type=int, default=1, help="decoder batch")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--vocab", type=int, default=1024, help="vocabulary of the small decoder")
    p.add_argument("--gpt2-vocab", type=int, default=50257, help="vocabulary of the GPT-2-small-sized decoder")
    p.add_argument("--image-batch", type=int, default=8)
    p.add_argument("--images", type=int, default=64, help="image side of the ResNet-18 training step")
    p.add_argument("--tpu", metavar="TOPOLOGY", default=None,
                   help="also lower each program for this TPU topology (v4:2x2x1, v6e:2x2) with libtpu and set the "
                        "rules against XLA:TPU's fusions")
    a = p.parse_args()
    global TPU
    TPU = tpu_device(a.tpu) if a.tpu else None
    print(f"fusion modes {', '.join(MODES)} on {PRESET} (ws); jax {jax.__version__}, capture backend "
          f"{jax.devices()[0].platform}; dfit_nb {dfit_nb.__version__}")
    decoder("GPT decoder (small)", layers=4, d_model=256, heads=4, vocab=a.vocab, seq=a.seq, batch=a.batch)
    if not a.quick:
        decoder("GPT-2-small-sized decoder", layers=12, d_model=768, heads=12, vocab=a.gpt2_vocab, seq=a.seq,
                batch=a.batch)
        training_step(a.image_batch, a.images)
    print(f"\ntotal run time {time.perf_counter() - _T0:.1f} s (imports included)")


if __name__ == "__main__":
    main()
