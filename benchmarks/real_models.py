"""Eight real models as a new user would capture them (issue 41): each builder returns ``(fn, args)``, the weights
passed as arguments (``docs/recipes.md``), and the model is built by its own library, not re-implemented.

| name | library | model | input (per call) |
|---|---|---|---|
| ``keras_resnet50`` | Keras 3 (JAX backend) | ``keras.applications.ResNet50`` | 1 x 224 x 224 x 3 |
| ``keras_mobilenetv2`` | Keras 3 | ``keras.applications.MobileNetV2`` | 1 x 224 x 224 x 3 |
| ``nnx_vit`` | Flax NNX | ViT-B/16 (12 blocks, width 768, 12 heads) | 1 x 224 x 224 x 3 |
| ``linen_resnet18`` | Flax Linen | ResNet-18 (batch norm, inference) | 1 x 224 x 224 x 3 |
| ``linen_resnet18_adam`` | Flax Linen + optax | its training step, Adam | 8 x 224 x 224 x 3 |
| ``eqx_cnn`` | Equinox | the Equinox MNIST tutorial's CNN | 64 x 1 x 28 x 28 |
| ``flax_gpt2`` | Flax Linen | GPT-2 small (12 blocks, 768, tied embedding) | 1 x 256 tokens |
| ``eqx_unet`` | Equinox | a three-level U-Net (64-128-256 channels) | 1 x 3 x 128 x 128 |

``size`` scales the spatial inputs and the sequence (``size=32`` gives quick, small versions of every model).
Keras is imported with ``KERAS_BACKEND=jax`` set by :func:`_keras` only when a Keras model is built.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Built = tuple[Callable[..., Any], tuple[Any, ...]]


def _keras() -> Any:
    if os.environ.setdefault("KERAS_BACKEND", "jax") != "jax":
        raise RuntimeError(f"KERAS_BACKEND={os.environ['KERAS_BACKEND']!r}: these models need the JAX backend")
    import keras

    return keras


def _keras_model(model: Any, shape: tuple[int, ...]) -> Built:
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    def forward(trainable: Any, non_trainable: Any, x: Any) -> Any:
        y, _ = model.stateless_call(trainable, non_trainable, x)
        return y

    return forward, (trainable, non_trainable, jnp.ones(shape, jnp.float32))


def keras_resnet50(size: int = 224) -> Built:
    keras = _keras()
    return _keras_model(keras.applications.ResNet50(weights=None, input_shape=(size, size, 3)), (1, size, size, 3))


def keras_mobilenetv2(size: int = 224) -> Built:
    keras = _keras()
    return _keras_model(keras.applications.MobileNetV2(weights=None, input_shape=(size, size, 3)),
                        (1, size, size, 3))


def nnx_vit(size: int = 224) -> Built:
    from flax import nnx

    patch, width, heads, depth = 16, 768, 12, 12
    if size < 64:  # the quick version: a smaller ViT on a smaller image
        patch, width, heads, depth = 8, 64, 4, 2

    class Block(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.norm1 = nnx.LayerNorm(width, rngs=rngs)
            self.attn = nnx.MultiHeadAttention(num_heads=heads, in_features=width, decode=False, rngs=rngs)
            self.norm2 = nnx.LayerNorm(width, rngs=rngs)
            self.fc1 = nnx.Linear(width, 4 * width, rngs=rngs)
            self.fc2 = nnx.Linear(4 * width, width, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            x = x + self.attn(self.norm1(x))
            return x + self.fc2(nnx.gelu(self.fc1(self.norm2(x))))

    class ViT(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            tokens = (size // patch) ** 2 + 1
            self.patch = nnx.Conv(3, width, (patch, patch), strides=(patch, patch), rngs=rngs)
            self.cls = nnx.Param(jnp.zeros((1, 1, width)))
            self.pos = nnx.Param(jax.random.normal(rngs.params(), (1, tokens, width)) * 0.02)
            self.blocks = nnx.List([Block(rngs) for _ in range(depth)])
            self.norm = nnx.LayerNorm(width, rngs=rngs)
            self.head = nnx.Linear(width, 1000, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            x = self.patch(x)
            x = x.reshape(x.shape[0], -1, width)
            x = jnp.concatenate([jnp.broadcast_to(self.cls.value, (x.shape[0], 1, width)), x], axis=1)
            x = x + self.pos.value
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x[:, 0]))

    graph, state = nnx.split(ViT(nnx.Rngs(0)))

    def forward(state: Any, x: Any) -> Any:
        return nnx.merge(graph, state)(x)

    return forward, (state, jnp.ones((1, size, size, 3), jnp.float32))


def _linen_resnet18() -> Any:
    import flax.linen as nn

    class Block(nn.Module):
        features: int
        stride: int = 1

        @nn.compact
        def __call__(self, x: Any, train: bool) -> Any:
            norm = lambda name: nn.BatchNorm(use_running_average=not train, name=name)
            y = nn.Conv(self.features, (3, 3), (self.stride, self.stride), use_bias=False, name="conv1")(x)
            y = nn.relu(norm("bn1")(y))
            y = nn.Conv(self.features, (3, 3), use_bias=False, name="conv2")(y)
            y = norm("bn2")(y)
            if self.stride != 1 or x.shape[-1] != self.features:
                x = nn.Conv(self.features, (1, 1), (self.stride, self.stride), use_bias=False, name="down")(x)
                x = norm("down_bn")(x)
            return nn.relu(x + y)

    class ResNet18(nn.Module):
        @nn.compact
        def __call__(self, x: Any, train: bool = False) -> Any:
            x = nn.Conv(64, (7, 7), (2, 2), padding=[(3, 3), (3, 3)], use_bias=False, name="stem")(x)
            x = nn.relu(nn.BatchNorm(use_running_average=not train, name="stem_bn")(x))
            x = nn.max_pool(x, (3, 3), (2, 2), padding="SAME")
            for stage, features in enumerate((64, 128, 256, 512)):
                for i in range(2):
                    stride = 2 if stage > 0 and i == 0 else 1
                    x = Block(features, stride, name=f"layer{stage + 1}_{i}")(x, train)
            return nn.Dense(1000, name="fc")(x.mean(axis=(1, 2)))

    return ResNet18()


def linen_resnet18(size: int = 224) -> Built:
    model = _linen_resnet18()
    x = jnp.ones((1, size, size, 3), jnp.float32)
    variables = model.init(jax.random.key(0), x)

    def forward(variables: Any, x: Any) -> Any:
        return model.apply(variables, x)

    return forward, (variables, x)


def linen_resnet18_adam(size: int = 224, batch: int = 8) -> Built:
    import optax

    model = _linen_resnet18()
    x = jnp.ones((batch, size, size, 3), jnp.float32)
    labels = jnp.zeros((batch,), jnp.int32)
    variables = model.init(jax.random.key(0), x)
    params, stats = variables["params"], variables["batch_stats"]
    optimizer = optax.adam(1e-3)
    opt_state = optimizer.init(params)

    @jax.jit
    def train_step(params: Any, stats: Any, opt_state: Any, batch: Any) -> Any:
        x, labels = batch

        def loss_fn(params: Any) -> Any:
            logits, updated = model.apply({"params": params, "batch_stats": stats}, x, train=True,
                                          mutable=["batch_stats"])
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
            return loss, updated["batch_stats"]

        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), stats, opt_state, loss

    return train_step, (params, stats, opt_state, (x, labels))


def eqx_cnn(size: int = 28, batch: int = 64) -> Built:
    import equinox as eqx

    class CNN(eqx.Module):
        layers: list

        def __init__(self, key: Any) -> None:
            k1, k2, k3, k4 = jax.random.split(key, 4)
            flat = 3 * (size - 4) ** 2  # a 4x4 valid convolution, then Equinox's 2x2 max pool of stride 1
            self.layers = [
                eqx.nn.Conv2d(1, 3, kernel_size=4, key=k1),
                eqx.nn.MaxPool2d(kernel_size=2),
                jax.nn.relu,
                jnp.ravel,
                eqx.nn.Linear(flat, 512, key=k2),
                jax.nn.sigmoid,
                eqx.nn.Linear(512, 64, key=k3),
                jax.nn.relu,
                eqx.nn.Linear(64, 10, key=k4),
                jax.nn.log_softmax,
            ]

        def __call__(self, x: Any) -> Any:
            for layer in self.layers:
                x = layer(x)
            return x

    params, static = eqx.partition(CNN(jax.random.key(0)), eqx.is_array)

    def forward(params: Any, x: Any) -> Any:
        return jax.vmap(eqx.combine(params, static))(x)

    return forward, (params, jnp.ones((batch, 1, size, size), jnp.float32))


def flax_gpt2(size: int = 256) -> Built:
    import flax.linen as nn

    vocab, width, heads, depth, context = 50257, 768, 12, 12, 1024
    if size < 64:  # the quick version
        vocab, width, heads, depth = 512, 64, 4, 2

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x: Any) -> Any:
            mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
            y = nn.LayerNorm(name="ln_1")(x)
            x = x + nn.SelfAttention(num_heads=heads, name="attn")(y, mask=mask)
            y = nn.LayerNorm(name="ln_2")(x)
            y = nn.Dense(4 * width, name="c_fc")(y)
            return x + nn.Dense(width, name="c_proj")(nn.gelu(y))

    class GPT2(nn.Module):
        @nn.compact
        def __call__(self, tokens: Any) -> Any:
            wte = nn.Embed(vocab, width, name="wte")
            wpe = nn.Embed(context, width, name="wpe")
            x = wte(tokens) + wpe(jnp.arange(tokens.shape[1])[None])
            for i in range(depth):
                x = Block(name=f"h_{i}")(x)
            return wte.attend(nn.LayerNorm(name="ln_f")(x))  # the LM head is the tied embedding

    model = GPT2()
    tokens = jnp.zeros((1, size), jnp.int32)
    variables = model.init(jax.random.key(0), tokens)

    def forward(variables: Any, tokens: Any) -> Any:
        return model.apply(variables, tokens)

    return forward, (variables, tokens)


def eqx_unet(size: int = 128) -> Built:
    import equinox as eqx

    channels = (64, 128, 256)

    class ConvBlock(eqx.Module):
        conv1: eqx.nn.Conv2d
        conv2: eqx.nn.Conv2d

        def __init__(self, cin: int, cout: int, key: Any) -> None:
            k1, k2 = jax.random.split(key)
            self.conv1 = eqx.nn.Conv2d(cin, cout, 3, padding=1, key=k1)
            self.conv2 = eqx.nn.Conv2d(cout, cout, 3, padding=1, key=k2)

        def __call__(self, x: Any) -> Any:
            return jax.nn.relu(self.conv2(jax.nn.relu(self.conv1(x))))

    class UNet(eqx.Module):
        down: list
        up: list
        upsample: list
        bottom: ConvBlock
        out: eqx.nn.Conv2d

        def __init__(self, key: Any) -> None:
            keys = iter(jax.random.split(key, 16))
            cin, self.down = 3, []
            for c in channels[:-1]:
                self.down.append(ConvBlock(cin, c, next(keys)))
                cin = c
            self.bottom = ConvBlock(cin, channels[-1], next(keys))
            self.upsample, self.up = [], []
            for c in reversed(channels[:-1]):
                self.upsample.append(eqx.nn.ConvTranspose2d(2 * c, c, 2, stride=2, key=next(keys)))
                self.up.append(ConvBlock(2 * c, c, next(keys)))
            self.out = eqx.nn.Conv2d(channels[0], 3, 1, key=next(keys))

        def __call__(self, x: Any) -> Any:
            skips = []
            for block in self.down:
                x = block(x)
                skips.append(x)
                x = eqx.nn.MaxPool2d(2, stride=2)(x)
            x = self.bottom(x)
            for upsample, block, skip in zip(self.upsample, self.up, reversed(skips), strict=True):
                x = block(jnp.concatenate([upsample(x), skip], axis=0))
            return self.out(x)

    params, static = eqx.partition(UNet(jax.random.key(0)), eqx.is_array)

    def forward(params: Any, x: Any) -> Any:
        return jax.vmap(eqx.combine(params, static))(x)

    return forward, (params, jnp.ones((1, 3, size, size), jnp.float32))


#: name -> builder, in the issue's order
MODELS: dict[str, Callable[..., Built]] = {
    "keras_resnet50": keras_resnet50,
    "keras_mobilenetv2": keras_mobilenetv2,
    "nnx_vit": nnx_vit,
    "linen_resnet18": linen_resnet18,
    "linen_resnet18_adam": linen_resnet18_adam,
    "eqx_cnn": eqx_cnn,
    "flax_gpt2": flax_gpt2,
    "eqx_unet": eqx_unet,
}


def build(name: str, size: int | None = None) -> Built:
    """The model ``name`` of :data:`MODELS`, at its default input size or ``size``."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; valid: {', '.join(MODELS)}")
    builder = MODELS[name]
    return builder() if size is None else builder(size)


def parameters(args: Any) -> int:
    """The number of array elements among ``args`` (the weights dominate it)."""
    return int(sum(np.size(leaf) for leaf in jax.tree_util.tree_leaves(args)))
