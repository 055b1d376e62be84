"""``dfit-nb``: the command-line entry point.

``dfit-nb report`` captures a JAX function (a bundled example, any
``pkg.mod:fn`` with its arguments described as shapes and dtypes, or what a
zero-argument ``pkg.mod:build`` returns: a real model with its weights),
prints its region table, costs its ops on hardware presets one op at a time,
replays the whole program on each preset, selects a hybrid dataflow policy per
preset, and writes an offline HTML report (:mod:`dfit_nb.report`) with the
event cubes, Perfetto traces and playbooks next to it.

Examples::

    dfit-nb report                                   # a BERT-base-sized layer, every preset, into ./dfit_report/
    dfit-nb report --example mlp --hw npu_like -o out
    dfit-nb report --module mypkg.model:forward --args "f32[8,128] f32[128,64]" --hw tpu_like
    dfit-nb report --build mypkg.model:build --hw tpu_like    # build() -> (fn, (params, x))

``--build PKG.MOD:BUILD`` names a callable taking no arguments that returns
``(fn, args)``: the function to capture and a tuple (or list) of its positional
arguments, e.g. ``return model.apply, (variables, x)``. Pass the weights as
arguments rather than closing over them: XLA constant-folds what depends only
on closed-over weights (batch norm's per-channel arithmetic, bias adds) and the
trace then no longer describes the model as it is served. Recipes for Flax,
Equinox, Keras and optax are in docs/recipes.md.

Bad input (an unknown preset, a bad ``--args`` token, a module that does not
import, a missing function, a ``build()`` that fails or does not return
``(fn, args)``, an ``-o`` folder or ``--save-trace`` path that cannot be
written) exits with status 2 and a one-line ``dfit-nb: error:`` message naming
it, before any capture or replay starts; no traceback.
"""

from __future__ import annotations

import argparse
import atexit
import concurrent.futures
import importlib
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import examples
from ._extras import MissingExtraError
from ._files import check_target, local_path, refuse_shared_folder
from ._setup import setup
from .capture import MODES, capture
from .errors import DfitError, SaveError, SaveRefusedError
from .events.schema import KINDS
from .sim import DATAFLOWS, REPLAY_DATAFLOWS, cost, presets, reconcile
from .sim.kernels import DEFAULT_FUSION, FUSION_MODES
from .sim.machine import utilization
from .sim.policy import OBJECTIVES
from .sim.streaming import REPORTED_STREAM

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


def _positive_int(text: str) -> int:
    """``--inferences``: a whole number >= 1, or argparse's one-line error naming the value."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1 or not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1 in digits, got {text!r}")
    return value


class UsageError(DfitError, ValueError):
    """Bad command-line input: the message names the bad token and what would be valid (exit status 2)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dfit-nb", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("report", help="capture, replay on presets, select a hybrid policy, write an HTML report",
                       description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    what = r.add_mutually_exclusive_group()
    what.add_argument("--example", default=None, choices=examples.names(),
                      help="bundled example (default bert_block: one BERT-base-sized encoder layer at sequence 256)")
    what.add_argument("--module", default=None, metavar="PKG.MOD:FN",
                      help="capture this function instead, on arrays described by --args (imported; the current "
                           "directory is on the path)")
    what.add_argument("--build", default=None, metavar="PKG.MOD:BUILD",
                      help="call this zero-argument function and capture what it returns: (fn, args), the function "
                           "and a tuple or list of its positional arguments, weights included (e.g. return "
                           "model.apply, (variables, x)); arrays or jax.ShapeDtypeStructs")
    r.add_argument("--args", default=None, metavar="SPEC", dest="spec",
                   help=f"the --module function's positional arguments: {SPEC_HELP}")
    r.add_argument("--mode", default="static", choices=MODES, help="instrumentation mode (default static)")
    r.add_argument("--depth", type=int, default=None, help="deepest region level to print")
    r.add_argument("--hw", nargs="*", default=None, metavar="PRESET",
                   help=f"hardware presets (default: all of {', '.join(presets.names())}); the charts are drawn "
                        "for the first with more than one tile")
    r.add_argument("--dataflow", default="ws", choices=list(REPLAY_DATAFLOWS),
                   help="dataflow of the replay table, event cubes and Perfetto traces (default ws)")
    r.add_argument("--fusion", default=DEFAULT_FUSION, choices=list(FUSION_MODES),
                   help="which ops run as one kernel: the machine's fusion rules (default), the capture's XLA "
                        "fusions, or one kernel per primitive")
    r.add_argument("--inferences", type=_positive_int, default=REPORTED_STREAM, metavar="N",
                   help=f"inferences streamed back to back for the throughput columns (default {REPORTED_STREAM}): a "
                        "layer-pipelined machine overlaps them, a time-multiplexed one runs them one after another")
    r.add_argument("--objective", default="energy", choices=list(OBJECTIVES),
                   help="what the hybrid policy minimises (default energy)")
    r.add_argument("-o", "--output-dir", default="dfit_report", metavar="DIR",
                   help="folder for report.html, <preset>.nc, <preset>.perfetto.json and the playbooks "
                        "(default ./dfit_report)")
    r.add_argument("--save-trace", default=None, metavar="PATH", help="also save the trace to this netCDF path")
    r.add_argument("--charts", default="auto", choices=["auto", "interactive", "svg"],
                   help="charts in the page: interactive (Vega inlined, offline) or static SVG (default auto)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


# ------------------------------------------------------------------------------------------------ inputs


def parse_spec(spec: str) -> list[Any]:
    """``"f32[8,128] i32[]"`` -> ``jax.ShapeDtypeStruct``s (UsageError naming the bad token).

    >>> [(s.shape, str(s.dtype)) for s in parse_spec("f32[8, 128] bf16[4] i32[]")]
    [((8, 128), 'float32'), ((4,), 'bfloat16'), ((), 'int32')]
    >>> parse_spec("f33[2]")
    Traceback (most recent call last):
    ...
    dfit_nb.cli.UsageError: bad --args token 'f33[2]': unknown dtype 'f33'; valid dtypes: bool, pred, ...
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
        raise UsageError(f"--build {target!r}: calling {name}() failed: {_first_line(err)} ({name} is called with "
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


def _inputs(args: argparse.Namespace) -> tuple[Any, list[Any], str]:
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


def _presets(names: Sequence[str] | None) -> list[str]:
    valid = presets.names()
    names = list(valid) if names is None else list(names)
    for n in names:
        if n not in valid:
            raise UsageError(f"unknown preset {n!r}; valid: {', '.join(valid)}")
    return names


def _writable(folder: Path) -> bool:
    """Whether this process may create files in the existing folder ``folder`` (by its effective ids)."""
    effective = os.access in os.supports_effective_ids
    return os.access(folder, os.W_OK | os.X_OK, effective_ids=effective)


def _kind(path: Path) -> str:
    if path.is_dir():
        return "folder"
    if path.is_file():
        return "file"
    return "broken link" if path.is_symlink() else "special file"


def check_output_dir(out_dir: str | os.PathLike[str], names: Sequence[str]) -> Path:
    """Refuse an ``-o`` folder the report could not be written to, before any work: a file there, a folder that
    is not writable or cannot be created, the root of the file system or the home directory (for root too), or
    a file of a name the report writes (``report.html``, ``<preset>.nc``, ``<preset>.perfetto.json``,
    ``playbook_<preset>.md`` / ``.html``) that dfit_nb did not write.

    dfit_nb's own files carry its mark (:func:`dfit_nb._files.written_by_dfit`): those are replaced, as a save
    replaces its own. Nothing is created or written; returns the folder's path. Raises :class:`UsageError` naming
    the path and, for files in the way, every one of them.
    """
    from .report import foreign_report_files, report_file_names

    folder = Path(out_dir)
    label = f"-o {str(out_dir)!r}"
    try:  # the same check as write_report's of its out_dir (given as typed: Path makes 's3://b' 's3:/b')
        refuse_shared_folder(out_dir, label)
    except SaveRefusedError as err:
        raise UsageError(str(err)) from None
    if os.path.lexists(folder) and not folder.is_dir():
        raise UsageError(f"{label} is a {_kind(folder)}, not a folder; give a folder for the report (created if "
                         "missing)")
    existing = folder
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    if existing != folder:  # it will be created with its missing parents: the nearest that exists decides
        if not existing.is_dir():
            raise UsageError(f"{label} cannot be created: {existing} is a {_kind(existing)}, not a folder; give a "
                             "folder path")
        if not _writable(existing):
            raise UsageError(f"{label} cannot be created: the folder {existing} is not writable; give a folder you "
                             "can write to")
        return folder
    if not _writable(folder):
        raise UsageError(f"{label} is not writable; give a folder you can write to")
    files = report_file_names(names)
    for name in files:
        path = folder / name
        if os.path.lexists(path) and not path.is_file():
            raise UsageError(f"{label}: {path} is a {_kind(path)}, where the report writes a file; move it away or "
                             "choose another -o folder")
    foreign = foreign_report_files(folder, files)
    if foreign:
        listed = ", ".join(str(p) for p in foreign)
        raise UsageError(f"{label} holds {len(foreign)} file(s) that dfit_nb did not write (no dfit_nb mark in "
                         f"them) where the report writes its own: {listed}; choose another -o folder, or move or "
                         "delete them and run again")
    return folder


def check_save_path(save: str | os.PathLike[str], out_dir: Path | None) -> Path:
    """Refuse a ``--save-trace`` path the trace could not be saved to, before any work: a missing or unwritable
    directory (named), or something there that dfit_nb did not write. ``out_dir``: the ``-o`` folder when a report
    will be written, which is created before the save (so ``-o out --save-trace out/trace.nc`` works)."""
    label = f"--save-trace {str(save)!r}"
    try:  # a URL: Path would make 's3://b/t.nc' the local 's3:/b/t.nc' and name its folder 's3:'
        path = local_path(save, saving=True)
    except SaveRefusedError as err:
        raise UsageError(f"{label}: {err}") from None
    parent = path.parent
    created = (out_dir is not None and not os.path.lexists(out_dir)
               and parent.resolve() == out_dir.resolve())
    if out_dir is not None and (path.resolve() == out_dir.resolve() or path.resolve() in out_dir.resolve().parents):
        raise UsageError(f"{label} is the -o folder {str(out_dir)!r} or a folder above it; save the trace to a "
                         f"file, e.g. {out_dir / 'trace.nc'}")
    if created:
        return path
    try:
        check_target(path, zarr=path.suffix == ".zarr")
    except SaveError as err:  # names the missing directory (not a temporary inside it), or what it will not replace
        raise UsageError(f"{label}: {err}") from None
    if not _writable(parent):
        raise UsageError(f"{label}: cannot save to {path}: the folder {parent} is not writable; give a path in a "
                         "folder you can write to")
    return path


# ------------------------------------------------------------------------------------------------ main


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (2 for bad input, with a one-line message naming it).

    Once the arguments parse, it calls :func:`dfit_nb.setup` (the process-wide settings for speed).

    User errors (a :class:`~dfit_nb.errors.DfitError`, a bad argument, an ``OSError`` on a path) are reported as
    ``dfit-nb: error: ...`` on stderr, never as a traceback; anything else is a dfit_nb bug and keeps its
    traceback, as does a bundled example that fails to capture.
    """
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:  # argparse: --help (0) or a usage error (2, message already printed)
        return int(exit_.code or 0)
    setup()  # JAX's compilation cache and CPU dispatch for this process, before anything computes (dfit_nb.setup)
    try:
        return _report(args)
    except (DfitError, OSError, MissingExtraError) as err:  # MissingExtraError: the report without dfit_nb[ui]
        return _fail(err)
    except KeyboardInterrupt:
        print("dfit-nb: interrupted", file=sys.stderr)
        return 130


def run() -> None:
    """The ``dfit-nb`` command (and ``python -m dfit_nb``): :func:`main`, then the process ends without tearing
    the interpreter down.

    Python's finalization after a report (freeing every module, JAX's compiled programs and the result
    Datasets one by one) took 1.3 s of a 10.5 s warm ``dfit-nb report`` on 2 cores; the operating system frees
    all of it at once. The output is flushed and the ``atexit`` handlers run first, as at a normal exit. A
    traceback (an error that is a dfit_nb bug) exits the normal way.
    """
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()  # what a normal exit runs before finalizing (logging, JAX, tqdm)
    os._exit(code)


def _fail(message: object) -> int:
    """Print ``message`` (an error or a text) as one ``dfit-nb: error:`` line on stderr; returns 2, the exit status
    for bad input."""
    text = " ".join(str(message).split()) or type(message).__name__
    print(f"dfit-nb: error: {text}", file=sys.stderr)
    return 2


def _first_line(err: BaseException) -> str:
    """An error from the user's function (JAX, MLIR) on one line: its first line, and how many more it has."""
    lines = [line for line in str(err).splitlines() if line.strip()]
    if len(lines) <= 1:
        return f"{type(err).__name__}: {lines[0].strip() if lines else ''}"
    return (f"{type(err).__name__}: {lines[0].strip()} (and {len(lines) - 1} more lines: call the function in "
            "Python for the whole message)")


def _report(args: argparse.Namespace) -> int:
    """``dfit-nb report``: every input and path checked first, then capture, replay, policies and the report."""
    try:
        names = _presets(args.hw)
        # checked before the work, not after it: a bad -o or --save-trace must not cost a capture and replays
        out_dir = check_output_dir(args.output_dir, names) if names else None
        save = check_save_path(args.save_trace, out_dir) if args.save_trace else None
        fn, fn_args, label = _inputs(args)
    except (ValueError, TypeError) as err:  # UsageError (a ValueError) and argument-parsing errors
        return _fail(err)
    t_start = time.perf_counter()
    try:
        trace = capture(fn, *fn_args, mode=args.mode)
    except Exception as err:
        if args.module is None and args.build is None:
            raise  # a bundled example that does not capture is a dfit_nb bug: its traceback is the report
        # the user's function (or its --args, or what --build returned) did not trace: bad input, not a dfit_nb bug
        return _fail(f"capturing {label} failed: {_first_line(err.__cause__ or err)}")
    print(repr(trace))
    if trace.mode != "static":
        o = trace.overhead
        print(f"{trace.mode} mode: plain call {o.baseline_s * 1e3:.3f} ms, "
              f"instrumented {o.instrumented_s * 1e3:.3f} ms (medians of {o.n_calls} calls); overhead {o.describe()}")
    low = trace.lowering.attrs
    print(f"XLA cost analysis FLOPs: {low.get('xla_flops', float('nan')):.0f} ({low.get('xla_flops_note', '')}); "
          f"dfit_nb FLOPs (flops x count): {trace.total_flops()}")
    print(trace.region_table(max_depth=args.depth))
    if save is not None:
        if out_dir is not None and save.parent.resolve() == out_dir.resolve():
            out_dir.mkdir(parents=True, exist_ok=True)  # the trace goes into the -o folder: create it first
        try:
            saved = trace.save(save)
        except SaveError as err:  # changed since the check (a full disk, a file that appeared)
            return _fail(f"--save-trace: {err}")
        print(f"saved {saved}")
    if out_dir is None:
        print("no preset given (--hw with no names): nothing replayed, no report written")
        return 0
    print()
    from .report import write_report

    # The cost table's programs compile on a second thread while the replays' compile here: XLA releases the GIL
    # while it compiles, so on a cold cache the two overlap on two cores. cost() prints nothing (the tables print
    # after both), and a warning it gives while analyse() records warnings is passed on by analyse() as its own.
    # write_report writes each preset's files on a thread of its own as soon as the preset is replayed.
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="dfit-nb-cost") as pool:
        pending = pool.submit(lambda: {name: cost(trace, presets.get(name), list(DATAFLOWS), fusion="none")
                                             for name in names})
        # a SaveError or OSError here (a full disk, a file put in -o since the check) reaches main: one line, status 2
        report = write_report(trace, names, out_dir, dataflow=args.dataflow, objective=args.objective,
                              charts=args.charts, progress=not args.no_progress, fusion=args.fusion,
                              inferences=args.inferences)
        alone = pending.result()
    results = report.results
    print(cost_table(alone))
    print()
    print(replay_table(results, args.dataflow, args.inferences))
    print()
    print(reconcile_table(trace, results, alone))
    print()
    print(policy_table(results))
    print()
    print(files_table(report))
    print(f"done in {time.perf_counter() - t_start:.1f} s")
    return 0


def replay_table(results: Sequence[Any], dataflow: str, inferences: int = 1) -> str:
    """The program replayed on each preset: one inference's latency, energy, utilisation and bottleneck, and the
    throughput and steady-state utilisation of ``inferences`` streamed back to back (:meth:`Run.streamed`)."""
    fusion = next((str(r.run.attrs.get("fusion", "")) for r in results), "")
    lines = [f"the whole program replayed on each preset ({dataflow}; its ops grouped into the kernels a compiler "
             f"runs, fusion={fusion!r}; mapped, scheduled, ops overlapping where the machine allows); inf/s and "
             f"steady: {inferences} inferences streamed back to back:",
             f"{'preset':16s} {'execution':9s} {'kernels':>7s} {'latency us':>11s} {'mJ':>9s} {'util':>6s} "
             f"{'inf/s':>10s} {'steady':>6s} {'DRAM MB':>8s} {'events':>8s}  bottleneck"]
    for r in results:
        s = r.run.summary
        stream = r.run.streamed(inferences)
        spill = " (spills: data exceed on-chip SRAM)" if r.spills else ""
        kernels = len(set(r.run.ops["kernel"].values.tolist())) if "kernel" in r.run.ops else r.run.ops.sizes["op"]
        lines.append(f"{r.name:16s} {r.run.attrs['execution']:9s} {kernels:7d} {float(s['latency_s']) * 1e6:11.2f} "
                     f"{float(s['energy_j']) * 1e3:9.4f} {float(s['utilization']):6.1%} "
                     f"{float(stream['throughput_inferences_per_s']):10.0f} "
                     f"{float(stream['steady_state_utilization']):6.1%} {float(s['dram_bytes']) / 1e6:8.3f} "
                     f"{int(s['n_events']):8d}  {s['bottleneck'].item()}{spill}")
    return "\n".join(lines)


def reconcile_table(trace: Any, results: Sequence[Any], alone: dict[str, Any] | None = None) -> str:
    """Per preset: Σ energy of the ops costed alone vs the replay, and the difference named level by level.

    ``alone``: per preset name, ``cost(trace, hw, DATAFLOWS)`` already computed (the cost table's), read
    instead of costing the ops again."""
    lines = ["ops alone vs the replay (one machine model; energy is additive, so the difference is what the program "
             "context changes):",
             # reconcile's levels are the kinds a replay charges energy to
             f"{'preset':16s} {'alone mJ':>10s} {'replay mJ':>10s} " + " ".join(f"{'d ' + k:>10s}" for k in KINDS)
             + f" {'overlap us':>10s}"]
    for r in results:
        rc = reconcile(trace, presets.get(r.name), r.run, alone=(alone or {}).get(r.name))
        clock = float(r.run.attrs["clock_ghz"]) * 1e3
        lines.append(f"{r.name:16s} {float(rc['alone_energy_j']) * 1e3:10.4f} "
                     f"{float(rc['replayed_energy_j']) * 1e3:10.4f} "
                     + " ".join(f"{float(v) * 1e3:+10.4f}" for v in rc["difference_j"].values)
                     + f" {float(rc['overlap_cycles']) / clock:10.2f}")
    lines.append("  d dram: results kept on chip for their consumers (or inside their kernel); d noc: DRAM deliveries "
                 "over the mesh; d compute / d sram: the mapping in context and the kernels' free reshapes; d retile: "
                 "moves between layouts and dataflow switches")
    return "\n".join(lines)


def policy_table(results: Sequence[Any]) -> str:
    """Per preset: the hybrid policy, its switches, and what it saves against each single style (replayed)."""
    objective = next((r.policy.objective for r in results if r.policy is not None), "energy")
    lines = [f"hybrid dataflow policy per preset (objective {objective}; replayed; saving = baseline - hybrid, "
             "relative to the baseline):",
             f"{'preset':16s} {'policy':24s} {'switches':>8s} {'uses':12s} "
             + " ".join(f"{'vs ' + s + ' E':>9s} {'vs ' + s + ' t':>9s}" for s in DATAFLOWS)]
    for r in results:
        if r.policy is None:
            lines.append(f"{r.name:16s} {r.note}")
            continue
        b = r.policy.baselines
        uses = ",".join(sorted(set(r.policy.choices["dataflow"].values.tolist())))
        name = r.policy.name if len(r.policy.name) <= 24 else r.policy.name.split(" ")[0] + " (fallback)"
        gains = " ".join(f"{float(b['energy_gain'].sel(policy=s)):+9.1%} {float(b['latency_gain'].sel(policy=s)):+9.1%}"
                         for s in DATAFLOWS)
        lines.append(f"{r.name:16s} {name:24s} {r.policy.switches:8d} {uses:12s} {gains}")
    return "\n".join(lines)


def files_table(report: Any) -> str:
    """Where the files are."""
    d = report.directory
    lines = [f"report written to {d}/ ({report.charts} charts):",
             f"  {report.html}  ({report.html_bytes / 1e6:.2f} MB; open it in a browser, works offline)"]
    for name in report.runs:
        extra = [p.name for p in (report.playbooks.get(name), report.playbooks_html.get(name)) if p is not None]
        row = f"  {name:16s} {report.runs[name].name}  {report.perfetto[name].name}  {'  '.join(extra)}"
        lines.append(row.rstrip())
    lines.append("  (<preset>.nc: dfit_nb.load_run; <preset>.perfetto.json: Perfetto UI / chrome://tracing; "
                 "playbook_<preset>.md: the policy's playbook)")
    return "\n".join(str(x) for x in lines)


def cost_table(alone: dict[str, Any]) -> str:
    """Σ over ops of (per-op cost x count) for each preset and dataflow, from ``alone``: per preset name,
    ``cost(trace, hw, DATAFLOWS)`` (ops costed one at a time)."""
    lines = ["ops costed alone on each preset (each as a one-op program: operands from DRAM, no overlap):",
             f"{'preset':16s} {'dataflow':8s} {'cycles':>14s} {'ms':>10s} {'mJ':>10s} {'util':>6s}"]
    for name, ds in alone.items():
        hw = presets.get(name)
        for df in DATAFLOWS:
            tot = ds.sel(dataflow=df)
            cycles, macs = float(tot["total_cycles"]), float(tot["total_macs"])
            util = float(utilization(macs, cycles, hw, np))
            lines.append(f"{name:16s} {df:8s} {cycles:14,.0f} {cycles / (hw.clock_ghz * 1e6):10.3f} "
                         f"{float(tot['total_energy_j']) * 1e3:10.4f} {util:6.1%}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
