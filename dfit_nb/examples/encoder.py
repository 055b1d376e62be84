"""A pre-norm transformer encoder with a named scope per layer and sub-block.

Regions: ``encoder/layer_<i>/{ln1, attn/{qkv, qk, softmax, av, proj}, ln2,
mlp/{fc1, gelu, fc2}}``, then ``encoder/ln_f``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._init import normal, ones, rng, zeros
from ._registry import Example, register


def init_params(gen: np.random.Generator, *, layers: int, d_model: int, d_ff: int, dtype=np.float32
                ) -> dict[str, Any]:
    """Random parameters for :func:`encoder` (a dict of per-layer dicts), drawn on the host (:mod:`._init`)."""
    def dense(n_in, n_out):
        return normal(gen, (n_in, n_out), 1 / np.sqrt(n_in), dtype)

    params: dict[str, Any] = {"layers": []}
    for _ in range(layers):
        params["layers"].append({
            "ln1": {"scale": ones(d_model, dtype), "bias": zeros(d_model, dtype)},
            "wqkv": dense(d_model, 3 * d_model),
            "wo": dense(d_model, d_model),
            "ln2": {"scale": ones(d_model, dtype), "bias": zeros(d_model, dtype)},
            "w1": dense(d_model, d_ff),
            "b1": zeros(d_ff, dtype),
            "w2": dense(d_ff, d_model),
            "b2": zeros(d_model, dtype),
        })
    params["ln_f"] = {"scale": ones(d_model, dtype), "bias": zeros(d_model, dtype)}
    return params


def layer_norm(p: dict[str, jax.Array], x: jax.Array, eps: float = 1e-5) -> jax.Array:
    """Layer norm over the last axis."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * p["scale"] + p["bias"]


def attention(p: dict[str, Any], x: jax.Array, heads: int) -> jax.Array:
    """Multi-head self-attention; x is (batch, seq, d_model)."""
    b, s, d = x.shape
    dh = d // heads
    with jax.named_scope("qkv"):
        qkv = x @ p["wqkv"]
        q, k, v = jnp.split(qkv.reshape(b, s, 3, heads, dh), 3, axis=2)
        q, k, v = (t[:, :, 0] for t in (q, k, v))
    with jax.named_scope("qk"):
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(jnp.asarray(dh, x.dtype))
    with jax.named_scope("softmax"):
        probs = jax.nn.softmax(scores, axis=-1)
    with jax.named_scope("av"):
        out = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, d)
    with jax.named_scope("proj"):
        return out @ p["wo"]


def mlp_block(p: dict[str, Any], x: jax.Array) -> jax.Array:
    """fc1 -> gelu (tanh approximation) -> fc2."""
    with jax.named_scope("fc1"):
        h = x @ p["w1"] + p["b1"]
    with jax.named_scope("gelu"):
        h = jax.nn.gelu(h, approximate=True)
    with jax.named_scope("fc2"):
        return h @ p["w2"] + p["b2"]


def encoder(params: dict[str, Any], x: jax.Array, heads: int = 4) -> jax.Array:
    """Apply the encoder to ``x`` of shape (batch, seq, d_model)."""
    with jax.named_scope("encoder"):
        for i, p in enumerate(params["layers"]):
            with jax.named_scope(f"layer_{i}"):
                with jax.named_scope("ln1"):
                    h = layer_norm(p["ln1"], x)
                with jax.named_scope("attn"):
                    x = x + attention(p, h, heads)
                with jax.named_scope("ln2"):
                    h = layer_norm(p["ln2"], x)
                with jax.named_scope("mlp"):
                    x = x + mlp_block(p, h)
        with jax.named_scope("ln_f"):
            return layer_norm(params["ln_f"], x)


def make(*, layers: int, batch: int, seq: int, d_model: int, heads: int, d_ff: int, seed: int = 0):
    """``(fn, (params, x))`` for a jitted encoder of the given sizes."""
    if d_model % heads:
        raise ValueError(f"d_model={d_model} must be divisible by heads={heads}")
    gen = rng(seed)
    params = init_params(gen, layers=layers, d_model=d_model, d_ff=d_ff)
    x = normal(gen, (batch, seq, d_model))
    def encoder_fn(params, x):
        return encoder(params, x, heads=heads)

    encoder_fn.__name__ = encoder_fn.__qualname__ = "encoder"

    return jax.jit(encoder_fn), (params, x)


EXAMPLE = register(Example(
    name="encoder",
    description="pre-norm transformer encoder, named scopes per layer and sub-block",
    make=make,
    defaults={"layers": 2, "batch": 2, "seq": 32, "d_model": 64, "heads": 4, "d_ff": 256},
))

#: BERT-base's layer sizes (Devlin et al. 2019: d_model 768, 12 heads, d_ff 3072) at sequence 256, batch 1: a
#: serving-sized layer, big enough that every preset has work to spread and the dataflows differ
BERT_BASE_BLOCK = {"layers": 1, "batch": 1, "seq": 256, "d_model": 768, "heads": 12, "d_ff": 3072}

BERT_BLOCK = register(Example(
    name="bert_block",
    description="one BERT-base-sized encoder layer (d_model 768, 12 heads, d_ff 3072) at sequence 256, batch 1",
    make=make,
    defaults=BERT_BASE_BLOCK,
))
