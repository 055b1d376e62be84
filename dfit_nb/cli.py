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

What it captures (and the ``--args`` specs) is read by :mod:`dfit_nb._cli_inputs`, the tables it prints are
:mod:`dfit_nb._cli_tables`; their public names are importable from here too.
"""

from __future__ import annotations

import argparse
import atexit
import concurrent.futures
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from . import examples
from ._cli_inputs import DEFAULT_EXAMPLE as DEFAULT_EXAMPLE
from ._cli_inputs import DTYPES as DTYPES
from ._cli_inputs import MAX_ARG_BYTES as MAX_ARG_BYTES
from ._cli_inputs import SPEC_HELP as SPEC_HELP
from ._cli_inputs import UsageError as UsageError
from ._cli_inputs import build_inputs as build_inputs
from ._cli_inputs import concrete as concrete
from ._cli_inputs import first_line, inputs
from ._cli_inputs import load_function as load_function
from ._cli_inputs import parse_spec as parse_spec
from ._cli_tables import cost_table as cost_table
from ._cli_tables import files_table as files_table
from ._cli_tables import policy_table as policy_table
from ._cli_tables import reconcile_table as reconcile_table
from ._cli_tables import replay_table as replay_table
from ._extras import MissingExtraError
from ._files import check_target, local_path, refuse_shared_folder
from ._setup import setup
from .capture import MODES, capture
from .errors import DfitError, SaveError, SaveRefusedError
from .sim import DATAFLOWS, REPLAY_DATAFLOWS, cost, presets
from .sim.kernels import DEFAULT_FUSION, FUSION_MODES
from .sim.policy import OBJECTIVES
from .sim.streaming import REPORTED_STREAM


def _positive_int(text: str) -> int:
    """``--inferences``: a whole number >= 1, or argparse's one-line error naming the value."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1 or not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1 in digits, got {text!r}")
    return value


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


def _presets(names: Sequence[str] | None) -> list[str]:
    valid = presets.names()
    names = list(valid) if names is None else list(names)
    for n in names:
        if n not in valid:
            raise UsageError(f"unknown preset {n!r}; valid: {', '.join(valid)}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # the report holds one replay per preset: said before the capture, not after it
        raise UsageError(f"--hw names {', '.join(map(repr, twice))} more than once; name each preset once")
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
    if not str(save).strip():
        raise UsageError("--save-trace: the path is empty; give a file to save the trace to, e.g. trace.nc")
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


def _report(args: argparse.Namespace) -> int:
    """``dfit-nb report``: every input and path checked first, then capture, replay, policies and the report."""
    try:
        names = _presets(args.hw)
        if args.depth is not None and args.depth < 0:
            raise UsageError(f"--depth {args.depth}: the deepest region level to print is 0 (the program) or more")
        # checked before the work, not after it: a bad -o or --save-trace must not cost a capture and replays
        out_dir = check_output_dir(args.output_dir, names) if names else None
        save = check_save_path(args.save_trace, out_dir) if args.save_trace is not None else None
        fn, fn_args, label = inputs(args)
    except (ValueError, TypeError) as err:  # UsageError (a ValueError) and argument-parsing errors
        return _fail(err)
    except SystemExit as exit_:  # the user's module (or its build()) called sys.exit as it was imported or built
        return _fail(f"{args.module or args.build} called sys.exit({exit_.code!r}) while it was loaded: nothing was "
                     "captured; guard the module's script code with if __name__ == '__main__'")
    t_start = time.perf_counter()
    try:
        trace = capture(fn, *fn_args, mode=args.mode)
    except SystemExit as exit_:  # the user's function called sys.exit
        return _fail(f"capturing {label} failed: it called sys.exit({exit_.code!r}); nothing was captured")
    except Exception as err:
        if args.module is None and args.build is None:
            raise  # a bundled example that does not capture is a dfit_nb bug: its traceback is the report
        # the user's function (or its --args, or what --build returned) did not trace: bad input, not a dfit_nb bug
        return _fail(f"capturing {label} failed: {first_line(err.__cause__ or err)}")
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


if __name__ == "__main__":
    sys.exit(main())
