"""The bundled examples: the CLI's default is a BERT-base-sized layer whose GEMMs are what the paper's sizes say."""

from __future__ import annotations

import dfit_nb
from dfit_nb import cli, examples


def test_the_default_example_is_a_bert_base_sized_layer():
    assert cli.DEFAULT_EXAMPLE in examples.names()
    sizes = examples.get(cli.DEFAULT_EXAMPLE).defaults
    assert (sizes["d_model"], sizes["heads"], sizes["d_ff"], sizes["seq"]) == (768, 12, 3072, 256)
    trace = dfit_nb.capture(*_build(cli.DEFAULT_EXAMPLE))
    ops = trace.ops
    gemm = (ops["m"] > 0) & (ops["container"] == "")
    s, d, f = 256, 768, 3072
    # qkv, scores, weighted values, projection, fc1, fc2: 2 FLOPs per MAC
    expected = 2 * (s * d * 3 * d + s * s * d + s * s * d + s * d * d + s * d * f + s * f * d)
    assert float((ops["m"] * ops["k"] * ops["n"] * ops["batch"]).where(gemm).sum()) * 2 == expected
    assert {"encoder/layer_0/attn/qkv", "encoder/layer_0/mlp/fc1"} <= set(trace.regions["region"].values.tolist())


def _build(name):
    fn, args = examples.get(name).build()
    return (fn, *args)
