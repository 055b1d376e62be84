"""What ``dfit-nb report`` captures: a bundled example, a ``pkg.mod:fn`` with its ``--args`` described as shapes
and dtypes (:func:`parse_spec`, :func:`concrete`), or what a zero-argument ``pkg.mod:build`` returns
(:func:`build_inputs`); bad input raises :class:`UsageError` naming it. Importable from :mod:`dfit_nb.cli`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from . import examples
from .errors import DfitError

#: ``--args`` dtype spellings -> NumPy/JAX dtype names
DTYPES = {
    "bool": "bool", "pred": "bool",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "int": "int32",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64", "float": "float32",
    "c64": "complex64", "c128": "complex128",
}
_TOKEN = re.compile(r"^([A-Za-z][A-Za-z0-9]*)\[([^\[\]]*)\]$")
#: the most bytes one ``--args`` argument may describe (256 TiB): far beyond any accelerator's memory, and it
#: keeps byte and FLOP counts clear of 64-bit overflow (XLA aborts the whole process on an array of 2**63 bytes)
MAX_ARG_BYTES = 2**48
SPEC_HELP = ("space-separated dtype[shape] per positional argument, e.g. \"f32[8,128] f32[128,64]\" or \"i32[]\" for "
             f"a scalar; dtypes: {', '.join(DTYPES)}")
_LIMIT = f"{MAX_ARG_BYTES:,} bytes ({MAX_ARG_BYTES / 2**40:g} TiB)"
_DIMS_HELP = (f"dimensions are whole numbers >= 1 in digits, comma-separated, e.g. f32[8,128], at most {_LIMIT} "
              "per argument")

#: what ``dfit-nb report`` captures when given no function: a serving-sized layer, so every preset has work to
#: spread, the bottlenecks differ between presets and per-layer dataflow switching pays on some
DEFAULT_EXAMPLE = "bert_block"


class UsageError(DfitError, ValueError):
    """Bad command-line input: the message names the bad token and what would be valid (exit status 2)."""


def parse_spec(spec: str) -> list[Any]:
    """``"f32[8,128] i32[]"`` -> ``jax.ShapeDtypeStruct``s (UsageError naming the bad token).

    >>> [(s.shape, str(s.dtype)) for s in parse_spec("f32[8, 128] bf16[4] i32[]")]
    [((8, 128), 'float32'), ((4,), 'bfloat16'), ((), 'int32')]
    >>> parse_spec("f33[2]")
    Traceback (most recent call last):
    ...
    dfit_nb._cli_inputs.UsageError: bad --args token 'f33[2]': unknown dtype 'f33'; valid dtypes: bool, pred, ...
    """
    import jax
    import jax.numpy as jnp

    # spaces inside brackets ("f32[8, 128]") and commas between tokens ("f32[2], f32[3]") are allowed
    text = re.sub(r"\[([^\]]*)\]", lambda m: "[" + re.sub(r"\s+", "", m.group(1)) + "]", spec.strip())
    tokens = [t for t in re.split(r"[\s]+|(?<=\]),", text) if t]
    out = []
    for tok in tokens:
        m = _TOKEN.match(tok)
        if not m:
            raise UsageError(f"bad --args token {_quote(tok)}: expected dtype[shape]; {SPEC_HELP}")
        dt, dims = m.group(1).lower(), m.group(2)
        if dt not in DTYPES:
            raise UsageError(f"bad --args token {_quote(tok)}: unknown dtype {m.group(1)!r}; valid dtypes: "
                             f"{', '.join(DTYPES)}")
        shape = tuple(_dimension(tok, d) for d in (dims.split(",") if dims else []))
        dtype = jnp.dtype(DTYPES[dt])
        elements = 1
        for n in shape:
            elements *= n
        if elements * dtype.itemsize > MAX_ARG_BYTES:
            raise UsageError(f"bad --args token {_quote(tok)}: {elements:.4g} elements x {dtype.itemsize} bytes = "
                             f"{elements * dtype.itemsize:.4g} bytes, above the limit of {_LIMIT} per argument; "
                             "give smaller dimensions")
        out.append(jax.ShapeDtypeStruct(shape, dtype))
    return out


def _quote(token: str) -> str:
    """``repr(token)``, shortened to one readable line when a token is thousands of characters long."""
    return repr(token) if len(token) <= 80 else repr(f"{token[:60]}...{token[-12:]}") + f" ({len(token)} characters)"


def _dimension(token: str, text: str) -> int:
    """One dimension of ``token`` (a whole number >= 1 in digits) or a UsageError naming it."""
    if not text:
        raise UsageError(f"bad --args token {_quote(token)}: empty dimension; {_DIMS_HELP}")
    if not re.fullmatch(r"[+-]?[0-9]+", text):  # 1e20, 2.5, x, 0x10: no notation but digits
        raise UsageError(f"bad --args token {_quote(token)}: dimension {_quote(text)} is not a whole number in "
                         f"digits; {_DIMS_HELP}")
    digits = text.lstrip("+-").lstrip("0")
    if text.startswith("-") and digits:
        raise UsageError(f"bad --args token {_quote(token)}: dimension {_quote(text)} is negative; {_DIMS_HELP}")
    if not digits:  # JAX takes zero-size arrays, but they have no work to cost or replay
        raise UsageError(f"bad --args token {_quote(token)}: dimension {_quote(text)} is zero (a zero-size array "
                         f"has nothing to cost or replay); {_DIMS_HELP}")
    if len(digits) > 19:  # above 2**63 whatever the dtype; also keeps int() clear of its 4300-digit limit
        raise UsageError(f"bad --args token {_quote(token)}: dimension {_quote(text)} is too large: an argument "
                         f"may describe at most {_LIMIT}; give smaller dimensions")
    return int(digits)


def concrete(structs: Sequence[Any]) -> list[Any]:
    """Arrays for the runtime modes: ones for floating and complex dtypes, zeros otherwise (safe as indices)."""
    import jax.numpy as jnp

    return [jnp.ones(s.shape, s.dtype) if jnp.issubdtype(s.dtype, jnp.inexact) else jnp.zeros(s.shape, s.dtype)
            for s in structs]


def _check_fits(structs: Sequence[Any], mode: str, target: str) -> None:
    """Runtime modes run the function on real arrays: refuse ``--args`` whose arrays alone exceed the memory free,
    before allocating them (an allocation that large ends in the OOM killer, not an error)."""
    need = sum(int(s.size) * s.dtype.itemsize for s in structs)
    from ._memory import device_available_bytes

    free, device = device_available_bytes()
    if need > free:
        raise UsageError(f"--mode {mode} runs {target} on real arrays: --args describe {need / 1e9:.4g} GB, more "
                         f"than the {free / 1e9:.4g} GB free on {device}; use --mode static (shapes only, nothing "
                         "runs) or smaller dimensions")


def load_function(target: str, option: str = "--module") -> Any:
    """``pkg.mod:fn`` (``fn`` may be dotted: ``Class.method``) -> the callable (UsageError naming what failed);
    ``option``: the command-line option that gave ``target``, named in the messages."""
    mod_name, sep, attr = target.partition(":")
    if not sep or not mod_name or not attr:
        what = "pkg.mod:build (a module, a colon, a function of no arguments)" if option == "--build" else \
            "pkg.mod:fn (a module, a colon, a function)"
        raise UsageError(f"bad {option} {target!r}: expected {what}")
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:  # like `python -m`: modules in the current directory import
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(mod_name)
    except ModuleNotFoundError as err:
        raise UsageError(f"{option} {target!r}: cannot import module {mod_name!r} ({err}); give an importable "
                         "module path (installed, or relative to the current directory)") from None
    except Exception as err:
        raise UsageError(f"{option} {target!r}: importing {mod_name!r} failed: {type(err).__name__}: {err}") from None
    finally:
        if added:
            sys.path.remove(cwd)
    obj = module
    for i, part in enumerate(attr.split(".")):
        if not hasattr(obj, part):
            where = ".".join([mod_name, *attr.split(".")[:i]])
            public = sorted(n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n, None)))
            raise UsageError(f"{option} {target!r}: {where!r} has no attribute {part!r}; its public callables: "
                             f"{', '.join(public[:20]) or '(none)'}{' ...' if len(public) > 20 else ''}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UsageError(f"{option} {target!r}: {attr!r} is {_a(obj)}, not a function")
    return obj


def build_inputs(target: str, mode: str = "static") -> tuple[Any, list[Any]]:
    """``--build pkg.mod:build``: import ``build``, call it with no arguments, and check that it returned
    ``(fn, args)``: a callable and a tuple or list of its positional arguments (UsageError naming what was expected
    and what was given). In the runtime modes ``jax.ShapeDtypeStruct`` leaves become arrays, as ``--args`` do.
    """
    import jax

    build = load_function(target, "--build")
    name = getattr(build, "__name__", None) or target.partition(":")[2]
    expected = (f"--build {target!r}: {name}() must return (fn, args), the function to capture and a tuple or list "
                "of its positional arguments, e.g. `return model.apply, (variables, x)`")
    try:
        out = build()
    except Exception as err:  # the user's code: one line, not a traceback
        raise UsageError(f"--build {target!r}: calling {name}() failed: {first_line(err)} ({name} is called with "
                         "no arguments and must return (fn, args))") from None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        got = f"a {type(out).__name__} of {len(out)} items" if isinstance(out, (tuple, list)) else _a(out)
        raise UsageError(f"{expected}; it returned {got}")
    fn, fn_args = out
    if not callable(fn):
        raise UsageError(f"{expected}; its first item is {_a(fn)}, not callable")
    if not isinstance(fn_args, (tuple, list)):
        hint = " (wrap a single argument as (x,))" if hasattr(fn_args, "shape") else ""
        raise UsageError(f"{expected}; its second item is {_a(fn_args)}, not a tuple or list{hint}")
    fn_args = list(fn_args)
    if mode != "static":
        leaves, tree = jax.tree.flatten(fn_args)
        structs = [x for x in leaves if isinstance(x, jax.ShapeDtypeStruct)]
        if structs:  # allocated here: the same memory check as --args first
            _check_fits(structs, mode, target)
            made = iter(concrete(structs))
            leaves = [next(made) if isinstance(x, jax.ShapeDtypeStruct) else x for x in leaves]
            fn_args = jax.tree.unflatten(tree, leaves)
    return fn, fn_args


def _a(obj: object) -> str:
    """What ``obj`` is, for a message: ``None``, ``an int``, ``a dict``, ``an array float32[3]``."""
    if obj is None:
        return "None"
    if hasattr(obj, "shape") and hasattr(obj, "dtype"):
        return f"an array {obj.dtype}[{','.join(str(d) for d in obj.shape)}]"
    name = type(obj).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def inputs(args: argparse.Namespace) -> tuple[Any, list[Any], str]:
    """The function, its arguments and a label, validated before anything heavy runs."""
    if args.build is not None:
        if args.spec is not None:
            raise UsageError(f"--args describes the arguments of --module; --build {args.build!r} returns its own "
                             "(fn, args): drop --args")
        fn, fn_args = build_inputs(args.build, args.mode)
        return fn, fn_args, f"{getattr(fn, '__name__', type(fn).__name__)} from --build {args.build}"
    if args.module is None:
        if args.spec is not None:
            raise UsageError("--args describes the arguments of --module; bundled examples (--example) build their own")
        name = args.example or DEFAULT_EXAMPLE
        fn, fn_args = examples.get(name).build()
        return fn, list(fn_args), f"example {name}"
    structs = parse_spec(args.spec or "")
    fn = load_function(args.module)
    if args.mode == "static":
        return fn, structs, f"{args.module}({args.spec or ''})"
    _check_fits(structs, args.mode, args.module)
    return fn, concrete(structs), f"{args.module}({args.spec or ''})"


def first_line(err: BaseException) -> str:
    """An error from the user's function (JAX, MLIR) on one line: its first line, and how many more it has."""
    lines = [line for line in str(err).splitlines() if line.strip()]
    if len(lines) <= 1:
        return f"{type(err).__name__}: {lines[0].strip() if lines else ''}"
    return (f"{type(err).__name__}: {lines[0].strip()} (and {len(lines) - 1} more lines: call the function in "
            "Python for the whole message)")
