"""The simulator of a tiled dataflow accelerator (issue: simulator core).

Pure ``jax.numpy``; never imports altair or ipywidgets. Its hardware model,
presets and per-op cost model arrive with the simulator-core issue.
"""
