"""dfit_nb.precision: reduced-precision GEMM/conv inputs, their output drift (globally and region by region), their
price on the machine model, and the verdict that never recommends a format without its quality evidence."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import dfit_nb
from dfit_nb.errors import DfitError
from dfit_nb.precision_study import ALL, FORMATS, PrecisionError, PrecisionStudy, precision_verdict, reduced_trace
from dfit_nb.sim import presets

#: a float32 datapath: npu_like prices every dtype at its 1-byte native word, so no format could win there
FP32_NPU = presets.get("npu_like").replace(word_bytes=4)


# ------------------------------------------------------------------------------------------------ the models
def mlp(params, x):
    with jax.named_scope("encoder"):
        h = jnp.tanh(x @ params["w1"] + params["b1"])
    with jax.named_scope("head"):
        return h @ params["w2"]


def mlp_params(sensitive: bool):
    """``sensitive``: the head's int8 weights are made fragile: hidden unit 0 is dead (its input weights are
    zero) but its outgoing weights were left large, so each output channel's int8 scale is set by a weight that
    contributes nothing, and the weights that matter round to a few levels. Floating formats do not care."""
    k1, k2 = jax.random.split(jax.random.PRNGKey(1))
    w1 = jax.random.normal(k1, (32, 64)) / math.sqrt(32)
    w2 = jax.random.normal(k2, (64, 10)) / 8
    if sensitive:
        w1 = w1.at[:, 0].set(0.0)
        w2 = w2.at[0, :].set(8.0)
    return {"w1": w1, "b1": jnp.zeros(64), "w2": w2}


MLP_X = jax.random.normal(jax.random.PRNGKey(2), (64, 32))


def cnn(params, x):
    dn = ("NHWC", "HWIO", "NHWC")
    with jax.named_scope("conv1"):
        h = jax.nn.relu(lax.conv_general_dilated(x, params["k1"], (1, 1), "SAME", dimension_numbers=dn))
    with jax.named_scope("conv2"):
        h = jax.nn.relu(lax.conv_general_dilated(h, params["k2"], (2, 2), "SAME", dimension_numbers=dn))
    with jax.named_scope("classifier"):
        return jnp.mean(h, axis=(1, 2)) @ params["w"]


def cnn_params():
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(3), 3)
    return {"k1": jax.random.normal(k1, (3, 3, 3, 8)) / 5, "k2": jax.random.normal(k2, (3, 3, 8, 16)) / 8,
            "w": jax.random.normal(k3, (16, 5)) / 4}


CNN_X = jax.random.normal(jax.random.PRNGKey(4), (4, 8, 8, 3))


@pytest.fixture(scope="module")
def mlp_study():
    """The sensitive MLP, every default format, priced on a float32 datapath."""
    return dfit_nb.precision(mlp, mlp_params(sensitive=True), MLP_X, hw=FP32_NPU)


@pytest.fixture(scope="module")
def cnn_study():
    """The conv net, bf16 and int8, priced on tpu_like (a 2-byte native word)."""
    return dfit_nb.precision(cnn, cnn_params(), CNN_X, formats=("bf16", "int8"), hw=presets.get("tpu_like"))


def _rel(study, fmt, region=ALL, output="out"):
    return float(study.data["rel_error"].sel(format=fmt, region=region, output=output))


# --------------------------------------------------------------------------------------------------- quality
@pytest.mark.parametrize("name", ["mlp_study", "cnn_study"])
def test_bf16_drift_is_small_but_not_zero(name, request):
    study = request.getfixturevalue(name)
    sel = study.data.sel(format="bf16", region=ALL, output="out")
    assert 0 < float(sel["rel_error"]) < 1e-2
    assert float(sel["max_abs_error"]) > 0
    assert 0.9999 < float(sel["cosine"]) <= 1.0
    # the interpreter with nothing reduced is the program itself, bit for bit
    assert study.data.attrs["interpreter_max_abs_diff"] == 0.0


@pytest.mark.parametrize("name", ["mlp_study", "cnn_study"])
def test_int8_drifts_more_than_bf16(name, request):
    study = request.getfixturevalue(name)
    assert _rel(study, "int8") > 2 * _rel(study, "bf16")


def test_region_by_region_isolates_the_sensitive_layer(mlp_study):
    ds = mlp_study.data
    assert ds["region"].values.tolist() == [ALL, "encoder", "head"]
    assert ds["gemm_ops"].values.tolist() == [2, 1, 1]
    # int8: the head alone carries nearly all of the drift; the encoder alone very little
    head, encoder, both = _rel(mlp_study, "int8", "head"), _rel(mlp_study, "int8", "encoder"), _rel(mlp_study, "int8")
    assert head > 5 * encoder
    assert head > 0.5 * both
    # bf16 keeps its relative precision whatever the range: the head is not special there
    assert _rel(mlp_study, "bf16", "head") < 3 * _rel(mlp_study, "bf16", "encoder")
    verdict = mlp_study.verdict(tolerance=0.05)
    assert verdict["carriers"].sel(format="int8").item() == "head"
    assert not bool(verdict["backed"].sel(format="int8"))
    assert "Drift carried by: head" in verdict["reason"].sel(format="int8").item()


def test_the_unmodified_model_is_not_sensitive():
    study = dfit_nb.precision(mlp, mlp_params(sensitive=False), MLP_X, formats=("int8",))
    assert _rel(study, "int8", "head") < 0.03
    assert _rel(study, "int8") < 0.03


def test_whole_model_drift_equals_a_direct_comparison_of_outputs(mlp_study, cnn_study):
    """Global drift = the metrics of the function rewritten by hand against the function itself."""
    params = mlp_params(sensitive=True)

    def bf16(a):
        return a.astype(jnp.bfloat16).astype(jnp.float32)

    def mlp_bf16(p, x):
        h = jnp.tanh(bf16(x) @ bf16(p["w1"]) + p["b1"])
        return bf16(h) @ bf16(p["w2"])

    ref = np.asarray(jax.jit(mlp)(params, MLP_X), np.float64)
    out = np.asarray(jax.jit(mlp_bf16)(params, MLP_X), np.float64)
    sel = mlp_study.data.sel(format="bf16", region=ALL, output="out")
    np.testing.assert_allclose(float(sel["max_abs_error"]), np.abs(out - ref).max(), rtol=1e-6)
    np.testing.assert_allclose(float(sel["rel_error"]), np.linalg.norm(out - ref) / np.linalg.norm(ref), rtol=1e-6)
    np.testing.assert_allclose(float(sel["cosine"]),
                               (out * ref).sum() / np.linalg.norm(out) / np.linalg.norm(ref), rtol=1e-9)
    assert float(sel["top1_agreement"]) == np.mean(out.argmax(-1) == ref.argmax(-1))

    # int8 on the conv net: activation per tensor, kernels per output feature (HWIO: axis 3), the dense
    # weight per output column
    def int8(a, axes=None):
        s = jnp.max(jnp.abs(a), axis=axes, keepdims=True) / 127.0
        return jnp.clip(jnp.round(a / s), -127, 127) * s

    def cnn_int8(p, x):
        dn = ("NHWC", "HWIO", "NHWC")
        h = jax.nn.relu(lax.conv_general_dilated(int8(x), int8(p["k1"], (0, 1, 2)), (1, 1), "SAME",
                                                 dimension_numbers=dn))
        h = jax.nn.relu(lax.conv_general_dilated(int8(h), int8(p["k2"], (0, 1, 2)), (2, 2), "SAME",
                                                 dimension_numbers=dn))
        return int8(jnp.mean(h, axis=(1, 2))) @ int8(p["w"], (0,))

    ref = np.asarray(jax.jit(cnn)(cnn_params(), CNN_X), np.float64)
    out = np.asarray(jax.jit(cnn_int8)(cnn_params(), CNN_X), np.float64)
    np.testing.assert_allclose(_rel(cnn_study, "int8"), np.linalg.norm(out - ref) / np.linalg.norm(ref), rtol=1e-5)


def test_top1_agreement_on_logits_only():
    def two_heads(params, x):
        logits = mlp(params, x)
        return {"logits": logits, "norm": jnp.sqrt(jnp.sum(logits ** 2)), "score": logits[:, :1]}

    study = dfit_nb.precision(two_heads, mlp_params(sensitive=True), MLP_X, formats=("bf16", "int8"))
    ds = study.data
    assert ds["output"].values.tolist() == ["['logits']", "['norm']", "['score']"]
    assert ds["is_logits"].values.tolist() == [True, False, False]  # last axis > 1 only
    top1 = ds["top1_agreement"].sel(region=ALL)
    assert np.isnan(top1.sel(output=["['norm']", "['score']"]).values).all()
    bf16, int8 = (float(top1.sel(format=f, output="['logits']")) for f in ("bf16", "int8"))
    assert 0.9 <= bf16 <= 1.0 and 0.0 <= int8 < bf16  # the fragile int8 head flips some argmaxes
    # the verdict reads top-1 on logits: int8 is refused even at a loose drift tolerance
    verdict = study.verdict(tolerance=0.5)
    assert not bool(verdict["backed"].sel(format="int8")) and bool(verdict["backed"].sel(format="bf16"))
    assert "top-1 agreement" in verdict["reason"].sel(format="int8").item()
    # logits= overrides the rule, by name or index
    named = dfit_nb.precision(two_heads, mlp_params(sensitive=True), MLP_X, formats="bf16", logits=["['score']"])
    assert named.data["is_logits"].values.tolist() == [False, False, True]
    none = dfit_nb.precision(two_heads, mlp_params(sensitive=True), MLP_X, formats="bf16", logits=False)
    assert np.isnan(none.data["top1_agreement"].values).all()


def test_nested_jaxprs_scan_cond_while_remat_custom_vjp():
    """The bundled scan model: layers under lax.scan with a remat'ed dense block, a custom_vjp activation, a
    data-dependent cond and while_loop. Its GEMMs are reached and reduced inside every container."""
    fn, args = dfit_nb.examples.get("scan_model").build()
    study = dfit_nb.precision(fn, *args, formats="bf16")
    ds = study.data
    assert ds.attrs["interpreter_max_abs_diff"] == 0.0
    assert ds["region"].values.tolist() == [ALL, "readout", "stack/block/dense", "stack/mix"]
    trace = dfit_nb.capture(fn, *args)
    gemms = trace.ops["primitive"].isin(["dot_general", "conv_general_dilated"]) & trace.ops["live"]
    assert int(ds["gemm_ops"].sel(region=ALL)) == int(gemms.sum())
    rel = ds["rel_error"].sel(format="bf16", output="out")
    assert (rel > 0).all() and (rel < 1e-2).all()


def test_a_trace_is_accepted_and_its_regions_are_the_traces(mlp_study):
    trace = dfit_nb.capture(mlp, mlp_params(sensitive=True), MLP_X)
    study = dfit_nb.precision(trace, mlp_params(sensitive=True), MLP_X, formats=("int8",))
    gemm_regions = sorted(set(trace.ops["region"].values[trace.ops["primitive"].values == "dot_general"].tolist()))
    assert study.data["region"].values.tolist() == [ALL, *gemm_regions]
    assert _rel(study, "int8", "head") == _rel(mlp_study, "int8", "head")
    # region_depth groups deeper paths
    fn, args = dfit_nb.examples.get("mlp").build()
    grouped = dfit_nb.precision(fn, *args, formats="bf16", region_depth=1)
    assert grouped.data["region"].values.tolist() == [ALL, "mlp"]
    deep = dfit_nb.precision(fn, *args, formats="bf16", region_depth=np.int64(1))  # a NumPy integer is a whole number
    assert deep.data["region"].values.tolist() == [ALL, "mlp"]
    np.testing.assert_allclose(grouped.data["rel_error"].sel(region="mlp").values,
                               grouped.data["rel_error"].sel(region=ALL).values)


# --------------------------------------------------------------------------------------------------- pricing
def test_energy_per_inference_falls_with_narrower_formats(mlp_study):
    ds = mlp_study.data
    assert ds.attrs["native_word_bytes"] == 4.0
    assert ds["word_bytes"].values.tolist() == [2.0, 1.0, 1.0]
    j = ds["joules_per_inference"].sel(region=ALL)
    f32 = float(ds["float32_joules_per_inference"])
    assert f32 > float(j.sel(format="bf16")) > float(j.sel(format="int8"))
    assert float(j.sel(format="fp8_e4m3")) == float(j.sel(format="int8"))  # both priced as 1-byte words
    assert (ds["energy_ratio"] < 1).all() and (ds["latency_ratio"] <= 1).all()
    assert (ds["dram_bytes_ratio"].sel(region=ALL) < 1).all()
    # one region alone saves less than every GEMM at once
    assert (ds["energy_ratio"].sel(region=["encoder", "head"]) > ds["energy_ratio"].sel(region=ALL)).all()


def test_a_format_no_narrower_than_the_native_word_wins_nothing(cnn_study):
    ds = cnn_study.data
    assert float(ds["energy_ratio"].sel(format="bf16", region=ALL)) == 1.0  # tpu_like: 2-byte words already
    assert float(ds["energy_ratio"].sel(format="int8", region=ALL)) < 1.0
    verdict = cnn_study.verdict(tolerance=0.05)
    assert bool(verdict["backed"].sel(format="bf16")) and verdict["win"].sel(format="bf16") == 0
    assert not bool(verdict["recommended"].sel(format="bf16"))
    assert "no win: the machine's native word, 2 B" in verdict["reason"].sel(format="bf16").item()


def test_reduced_trace_changes_only_the_chosen_ops():
    trace = dfit_nb.capture(mlp, mlp_params(sensitive=False), MLP_X)
    dots = np.flatnonzero(trace.ops["primitive"].values == "dot_general")
    out = reduced_trace(trace, dots[:1], "bf16")
    o = int(dots[0])
    assert out.ops["dtype"].values[o] == "bfloat16"
    assert int(out.ops["bytes_read"][o]) == int(trace.ops["bytes_read"][o]) // 2
    assert int(out.ops["bytes_written"][o]) == int(trace.ops["bytes_written"][o]) // 2
    others = np.setdiff1d(np.arange(trace.ops.sizes["op"]), [o])
    for name in ("dtype", "in_shapes", "bytes_read", "bytes_written"):
        assert (out.ops[name].values[others] == trace.ops[name].values[others]).all()
    into = trace.edges["dst"].values == o
    np.testing.assert_array_equal(out.edges["bytes"].values[into], trace.edges["bytes"].values[into] // 2)
    np.testing.assert_array_equal(out.edges["bytes"].values[~into], trace.edges["bytes"].values[~into])
    assert trace.ops["dtype"].values[o] == "float32"  # the original is untouched


# --------------------------------------------------------------------------------------------------- verdict
def test_the_verdict_never_recommends_without_evidence(mlp_study):
    loose = mlp_study.verdict(tolerance=0.5, min_top1=0.0)
    assert loose["recommended"].values.tolist() == [True, True, True]
    strict = precision_verdict(mlp_study.data, tolerance=1e-4)
    assert strict["backed"].values.tolist() == [False, False, False]
    assert strict["recommended"].values.tolist() == [False, False, False]
    assert all("NOT backed" in r for r in strict["reason"].values.tolist())
    assert strict.attrs["tolerance"] == 1e-4 and strict.attrs["metric"] == "rel_error"
    # quality only: never recommended, whatever the drift
    quality = dfit_nb.precision(mlp, mlp_params(sensitive=False), MLP_X, formats="bf16").verdict(tolerance=0.5)
    assert bool(quality["backed"].item()) and not bool(quality["recommended"].item())
    assert np.isnan(quality["win"].item()) and "not priced (hw=None)" in quality["reason"].item()
    # cosine as the metric
    cos = mlp_study.verdict(tolerance=1e-3, metric="cosine", min_top1=0.0)
    assert bool(cos["backed"].sel(format="bf16"))


def test_every_variable_has_units_and_a_description(mlp_study):
    for name, var in mlp_study.data.data_vars.items():
        assert "units" in var.attrs and var.attrs.get("description"), name
    html = mlp_study._repr_html_()
    assert "<table" in html and "int8" in html and "head" in html
    assert repr(mlp_study).startswith("<dfit_nb.PrecisionStudy mlp on npu_like")
    assert isinstance(mlp_study, PrecisionStudy)


def test_the_study_saves_to_netcdf(mlp_study, tmp_path):
    import xarray as xr

    path = tmp_path / "p.nc"
    mlp_study.data.to_netcdf(path)
    with xr.open_dataset(path) as back:
        np.testing.assert_allclose(back["rel_error"].values, mlp_study.data["rel_error"].values)


# ------------------------------------------------------------------------------------------------- bad input
def test_unknown_format_lists_the_valid_ones():
    with pytest.raises(PrecisionError, match=r"unknown format\(s\) 'fp4'.*valid formats: bf16, fp16, fp8_e4m3"):
        dfit_nb.precision(mlp, mlp_params(False), MLP_X, formats=("bf16", "fp4"))
    with pytest.raises(PrecisionError, match="formats is empty"):
        dfit_nb.precision(mlp, mlp_params(False), MLP_X, formats=())
    assert set(FORMATS) >= {"bf16", "fp8_e4m3", "int8"}


def test_a_function_without_gemms_says_so():
    with pytest.raises(PrecisionError, match=r"no dot_general or conv_general_dilated op.*nothing to reduce"):
        dfit_nb.precision(lambda x: jnp.tanh(x) * 2.0, MLP_X)


def test_non_floating_outputs_are_refused():
    with pytest.raises(PrecisionError, match=r"no output .* is floating point \(out: int32\[64\]\)"):
        dfit_nb.precision(lambda p, x: jnp.argmax(mlp(p, x), axis=-1), mlp_params(False), MLP_X)


def test_a_reference_that_is_not_finite_is_named():
    # drift against a NaN or inf reference measures nothing: the study names the outputs instead
    x = MLP_X.at[0, 0].set(jnp.nan)
    with pytest.raises(PrecisionError, match=r"float32 run .* gives NaN or inf in out \(\d+ of \d+ elements\).*"
                                             r"finite reference"):
        dfit_nb.precision(mlp, mlp_params(False), x)


@pytest.mark.parametrize("kwargs, match", [
    ({"hw": "npu_like"}, "hw must be one dfit_nb.sim.Hardware"),
    ({"dataflow": "xs"}, "unknown dataflow 'xs'"),
    ({"region_depth": 0}, "region_depth must be None or a whole number >= 1"),
    ({"logits": ["nope"]}, "logits names no output: 'nope'"),
    # inferences is a whole number >= 1, checked before the study (0, NaN and 2.5 are not)
    ({"inferences": 0, "hw": presets.get("npu_like")}, r"inferences must be a whole number >= 1.*got 0"),
    ({"inferences": float("nan"), "hw": presets.get("npu_like")}, r"inferences must be a whole number >= 1.*nan"),
    ({"inferences": 2.5}, r"inferences must be a whole number >= 1.*got 2\.5"),
])
def test_bad_options_raise_clear_errors(kwargs, match):
    with pytest.raises(PrecisionError, match=match):
        dfit_nb.precision(mlp, mlp_params(False), MLP_X, formats="bf16", **kwargs)


def test_bad_arguments_and_traces_raise_clear_errors():
    trace = dfit_nb.capture(mlp, mlp_params(False), MLP_X)
    with pytest.raises(PrecisionError, match=r"do not fit the trace: it takes arrays .*float32\[64,32\], got .*"
                                             r"float32\[8,32\]"):
        dfit_nb.precision(trace, mlp_params(False), MLP_X[:8], formats="bf16")
    with pytest.raises(PrecisionError, match="must be a concrete array"):
        dfit_nb.precision(trace, mlp_params(False), jax.ShapeDtypeStruct((64, 32), jnp.float32), formats="bf16")
    trace.jaxpr = None  # as after load_trace
    with pytest.raises(PrecisionError, match="holds no jaxpr"):
        dfit_nb.precision(trace, mlp_params(False), MLP_X, formats="bf16")
    with pytest.raises(PrecisionError, match="needs a function or a dfit_nb Trace"):
        dfit_nb.precision(42, MLP_X)
    assert issubclass(PrecisionError, DfitError)


def test_bad_verdict_inputs(mlp_study):
    with pytest.raises(PrecisionError, match="tolerance must be a number"):
        mlp_study.verdict(tolerance=-1)
    with pytest.raises(PrecisionError, match="unknown metric 'l2'"):
        mlp_study.verdict(metric="l2")
    with pytest.raises(PrecisionError, match="min_top1 must be a number between 0 and 1"):
        mlp_study.verdict(min_top1=2)
    with pytest.raises(PrecisionError, match=r"needs the result of dfit_nb\.precision"):
        precision_verdict(mlp_study.data[["gemm_ops"]])
    # without its "(all)" region the verdict failed on a KeyError from xarray's .sel
    with pytest.raises(PrecisionError, match=r"needs the result of dfit_nb\.precision.*'\(all\)' region"):
        precision_verdict(mlp_study.data.drop_sel(region="(all)"))
