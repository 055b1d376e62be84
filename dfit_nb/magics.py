"""IPython magics: ``%load_ext dfit_nb``, then ``%dfit``, ``%%dfit``, ``%dfit_presets`` and ``%dfit_compare``.

The top floor: it composes capture, replay, the charts and the Explorer for a notebook, and nothing imports it
(``import dfit_nb`` stays light; ``%load_ext dfit_nb`` imports this module). Loading the extension also makes
offline chart rendering the default (:func:`dfit_nb.widgets.enable_offline`: Altair's default renderer needs a
CDN) unless the user already chose an Altair renderer.

``%dfit [options] f(args...)``
    Capture the call, replay it on a machine, show the summary and an Explorer.
``%%dfit [options]``
    The same for the call on the cell's last line, after running the cell's other lines.
``%dfit_presets``
    The machines: tiles, PE array, SRAM, clock, peak TOPS, execution style.
``%dfit_compare A B``
    A/B of two stored runs: :func:`dfit_nb.sim.compare` and its chart.

The call is evaluated like ``%timeit`` does: in the user's namespace, and only the callee and the argument
expressions are evaluated (see :func:`evaluate_call`). Bad input raises :class:`~IPython.core.error.UsageError`
naming the bad token, before anything in the namespace changes.

Examples
--------
>>> from IPython.core.interactiveshell import InteractiveShell
>>> from IPython.utils.capture import capture_output
>>> import jax.numpy as jnp
>>> shell = InteractiveShell.instance()
>>> shell.run_line_magic("load_ext", "dfit_nb")
>>> shell.user_ns.update(f=lambda a, b: jnp.tanh(a @ b), a=jnp.ones((8, 16)), b=jnp.ones((16, 4)))
>>> with capture_output() as shown:
...     shell.run_line_magic("dfit", "--hw npu_like --no-explorer -o r f(a, b)")
>>> int(shell.user_ns["r"].summary["macs"]), type(shell.user_ns["r_trace"]).__name__
(512, 'Trace')
>>> "latency" in shown.outputs[0].data["text/html"]
True
"""

from __future__ import annotations

from ._extras import require

require("ui", "dfit_nb.magics (%load_ext dfit_nb)")

import argparse
import ast
import builtins
import contextlib
import inspect
import keyword
import re
import sys
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pandas as pd
from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from .capture import capture
from .capture.api import MODES
from .errors import DfitWarning
from .sim import REPLAY_DATAFLOWS, CompareError, presets, replay
from .sim import compare as compare_runs
from .sim.hardware import Hardware, check_hardware
from .sim.kernels import FUSION_MODES
from .sim.machine import peak_flops_per_s
from .sim.policy import OBJECTIVES, select_dataflows
from .sim.run import Run
from .views import compare as compare_chart
from .widgets import Explorer, enable_offline

__all__ = ["DfitMagics", "evaluate_call", "load_ipython_extension", "parse_call", "presets_table",
           "unload_ipython_extension"]

# defined once, where they live: the replay's dataflows (sim), objectives (sim.policy), modes (capture)
DEFAULT_HW = "npu_like"
#: the named parameters of :func:`dfit_nb.capture` itself (``fn``, ``mode``, ...): a call cannot pass these to the
#: captured function. Read from its signature, so an option added to capture is covered here too.
_CAPTURE_OPTIONS = tuple(p.name for p in inspect.signature(capture).parameters.values()
                         if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))


def _a(noun: str) -> str:
    """``noun`` with its indefinite article: "an int", "a list"."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


# ---- the call: parsed with ast, evaluated piece by piece ----------------------------------------------------
def parse_call(expr: str, magic: str = "%dfit") -> ast.Call:
    """Parse ``expr`` as one call ``f(args...)``; anything else is a :class:`UsageError` quoting it.

    Examples
    --------
    >>> parse_call("encoder(params, x)").func.id
    'encoder'
    >>> parse_call("x + 1")
    Traceback (most recent call last):
    ...
    IPython.core.error.UsageError: %dfit needs one call f(args...), got 'x + 1' (a BinOp)
    """
    expr = expr.strip()
    if not expr:
        raise UsageError(f"{magic}: missing EXPR, the call to capture, e.g. {magic} f(x, y)")
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError) as err:  # ValueError: a null byte, on some Python versions
        raise UsageError(f"{magic}: {expr!r} is not a Python expression ({getattr(err, 'msg', err)}); expected "
                         "one call f(args...)") from None
    if not isinstance(tree.body, ast.Call):
        raise UsageError(f"{magic} needs one call f(args...), got {expr!r} ({_a(type(tree.body).__name__)})")
    return tree.body


def _compile(node: ast.expr, magic: str) -> Any:
    """``node`` compiled as an expression; a :class:`UsageError` naming it where Python refuses it outside a
    function (``yield``, ``await``: ``ast.parse`` accepts them, only ``compile`` refuses them)."""
    try:
        return compile(ast.fix_missing_locations(ast.Expression(body=node)), f"<{magic}>", "eval")
    except (SyntaxError, ValueError) as err:
        raise UsageError(f"{magic}: {ast.unparse(node)!r} cannot be evaluated here ({getattr(err, 'msg', err)}); "
                         "the call and its arguments must be plain expressions, without yield or await: assign "
                         "the value to a name first and pass the name") from None


def _eval(node: ast.expr, namespace: dict[str, Any], magic: str) -> Any:
    code = _compile(node, magic)
    try:
        return eval(code, namespace)
    except NameError as err:
        name = getattr(err, "name", None) or str(err)
        raise UsageError(f"{magic}: name {name!r} is not defined in the user namespace") from None


def evaluate_call(call: str | ast.Call, namespace: dict[str, Any],
                  magic: str = "%dfit") -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """The callee, positional and keyword arguments of a call, each evaluated in ``namespace`` (its globals).

    Only the callee and the argument expressions (``*xs`` and ``**kw`` included) are evaluated, not the call
    itself, as ``%timeit`` evaluates its statement in the user's namespace.

    Parameters
    ----------
    call : str or ast.Call
        ``"f(a, b, key=c)"`` (parsed by :func:`parse_call`) or a parsed call.
    namespace : dict
        The user namespace (``shell.user_ns``), used as the globals of every evaluation.
    magic : str
        The magic named in error messages.

    Returns
    -------
    tuple
        ``(fn, args, kwargs)``.

    Raises
    ------
    UsageError
        ``call`` is not a single call, a name is not defined (the message names it), the callee is not
        callable, a ``*`` argument is not iterable, a ``**`` argument is not a mapping with string keys, or a
        keyword is given twice.

    Examples
    --------
    >>> ns = {"a": 1, "b": [2, 3], "k": abs}
    >>> fn, args, kwargs = evaluate_call("max(a, *b, key=k)", ns)
    >>> fn is max, args, kwargs == {"key": abs}
    (True, (1, 2, 3), True)
    >>> evaluate_call("max(a, nope)", ns)
    Traceback (most recent call last):
    ...
    IPython.core.error.UsageError: %dfit: name 'nope' is not defined in the user namespace
    """
    node = parse_call(call, magic) if isinstance(call, str) else call
    text = ast.unparse(node)
    _compile(node, magic)  # the whole call first: an argument is refused before any other is evaluated
    fn = _eval(node.func, namespace, magic)
    if not callable(fn):
        raise UsageError(f"{magic}: {ast.unparse(node.func)!r} is {_a(type(fn).__name__)}, not a function")
    args: list[Any] = []
    for a in node.args:
        if isinstance(a, ast.Starred):
            value = _eval(a.value, namespace, magic)
            try:
                items = iter(value)
            except TypeError:  # Python's own message would name neither the argument nor the call
                raise UsageError(f"{magic}: *{ast.unparse(a.value)} in {text!r} is {_a(type(value).__name__)}, not "
                                 "an iterable; *args takes a sequence such as a list or tuple") from None
            args.extend(items)  # an error raised while iterating is the user's code's own: it propagates as is
        else:
            args.append(_eval(a, namespace, magic))
    kwargs: dict[str, Any] = {}
    for kw in node.keywords:
        value = _eval(kw.value, namespace, magic)
        if kw.arg is None:
            where = f"**{ast.unparse(kw.value)} in {text!r}"
            if not isinstance(value, Mapping):
                raise UsageError(f"{magic}: {where} is {_a(type(value).__name__)}, not a mapping; **kwargs takes a "
                                 "dict of keyword names to values")
            items = dict(value)
            for key in items:
                if not isinstance(key, str):
                    raise UsageError(f"{magic}: {where} has the key {key!r} ({_a(type(key).__name__)}); keyword "
                                     "names must be strings")
        else:
            items = {kw.arg: value}
        for key in items:  # Python refuses a keyword given twice; a silent override would capture another call
            if key in kwargs:
                raise UsageError(f"{magic}: {text!r} passes the keyword {key!r} twice")
        kwargs.update(items)
    return fn, tuple(args), kwargs


def _check_signature(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], text: str, magic: str) -> None:
    """Refuse a call whose arguments do not fit ``fn``'s signature, naming the call and the signature."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins and some C callables have none: tracing decides
        return
    try:
        sig.bind(*args, **kwargs)
    except TypeError as err:
        name = getattr(fn, "__name__", None) or type(fn).__name__
        raise UsageError(f"{magic}: {text!r} does not match {name}{sig}: {err}") from None


def _split_options(parser: argparse.ArgumentParser, line: str, magic: str) -> tuple[str, str]:
    """``line`` -> (options, EXPR): the leading ``-x``/``--xx`` tokens (and their values), then the rest verbatim.

    EXPR is kept as typed (quotes and spaces included); only the options go through ``magic_arguments``.
    """
    tokens = list(re.finditer(r"\S+", line))
    i = 0
    while i < len(tokens):
        tok = tokens[i].group()
        if tok == "--":
            rest = line[tokens[i].end():]
            return line[:tokens[i].start()], rest
        if not tok.startswith("-") or len(tok) == 1:
            break
        name = tok.split("=", 1)[0] if tok.startswith("--") else tok[:2]
        action = parser._option_string_actions.get(name)  # argparse's option table (stable since Python 2.7)
        if action is None:
            valid = ", ".join(sorted(s for s in parser._option_string_actions if s.startswith("--")))
            raise UsageError(f"{magic}: unknown option {tok!r}; options: {valid}")
        attached = "=" in tok if tok.startswith("--") else len(tok) > 2
        i += 1
        if action.nargs != 0 and not attached:
            i += 1  # its value
    start = tokens[i].start() if i < len(tokens) else len(line)
    return line[:start], line[start:]


def _parse(magic_func: Any, argstring: str, magic: str) -> argparse.Namespace:
    try:
        return parse_argstring(magic_func, argstring)
    except UsageError as err:  # argparse's message names the token (invalid choice, missing argument, ...)
        raise UsageError(f"{magic}: {err}") from None


#: the longest line a magic reads: a call names its arguments, it does not spell them out
MAX_LINE = 10_000


def _check_line(line: str, magic: str) -> None:
    """Refuse an over-long line at once, naming its length and start (a 150 kB line took IPython's variable
    expansion 181 s before dfit_nb saw it; the expansion is off now, and no call needs such a line)."""
    if len(line) > MAX_LINE:
        raise UsageError(f"{magic}: the line is {len(line):,} characters long, more than {MAX_LINE:,} (it starts "
                         f"{line[:60]!r}); assign the arguments to names first and pass the names, e.g. "
                         "x = ...; %dfit f(x)")


def _check_output_name(name: str | None, magic: str, hidden: Mapping[str, Any] | None = None) -> None:
    """Refuse an ``-o`` name the store would break: not an identifier, a keyword, a builtin (``-o __builtins__``
    replaced the user's builtins; ``-o print`` would shadow ``print``), a dunder, or a name IPython keeps in the
    namespace for itself (``hidden``: ``In``, ``Out``, ``get_ipython``, ``_``, ...)."""
    if name is None:
        return
    if not name.isidentifier() or keyword.iskeyword(name):
        raise UsageError(f"{magic}: -o {name!r} is not a valid Python name")
    if hasattr(builtins, name) or (name.startswith("__") and name.endswith("__")) or name in (hidden or {}):
        what = ("a Python builtin" if hasattr(builtins, name) else "a special (dunder) name"
                if name.startswith("__") and name.endswith("__") else "a name IPython uses")
        raise UsageError(f"{magic}: -o {name!r} is {what}: storing a result there would replace it; choose "
                         "another name, e.g. -o run")


@contextlib.contextmanager
def _dfit_warnings_once() -> Iterator[None]:
    """Collect dfit_nb's warnings (e.g. ``SpillWarning``) and print each distinct one once, on stderr.

    Inside, every :class:`~dfit_nb.errors.DfitWarning` is caught (even where the filters say ``error``: a
    spilling machine is a result, not a failure); other warnings follow the user's filters. The filters and
    ``warnings.showwarning`` are restored on the way out, exceptions included.
    """
    seen: dict[tuple[type, str], None] = {}
    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
                 line: str | None = None) -> None:
            if issubclass(category, DfitWarning):
                seen.setdefault((category, str(message)), None)
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.simplefilter("always", DfitWarning)
        warnings.showwarning = show
        try:
            yield
        finally:
            for category, message in seen:
                print(f"{category.__name__}: {message}", file=sys.stderr)


# ---- the machines -----------------------------------------------------------------------------------------------
def _size(nbytes: float) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes:g} B"


def presets_table() -> pd.DataFrame:
    """One row per hardware preset: tiles, PE array, SRAM per tile, clock, peak TOPS, execution style.

    Peak TOPS counts a MAC as two operations: ``2 x tiles x R x C x clock``.

    Examples
    --------
    >>> from dfit_nb.sim import presets
    >>> table = presets_table()
    >>> tuple(table.index) == presets.names()
    True
    >>> row = table.loc["tpu_like"]
    >>> row["tiles"], row["PE array"], float(row["peak TOPS"])
    ('2x4 = 8', '128x128', 275.0)
    """
    rows = []
    for name in presets.names():
        hw, info = presets.get(name), presets.info(name)
        rows.append({
            "name": name,
            "tiles": f"{int(hw.tile_rows)}x{int(hw.tile_cols)} = {int(hw.tiles)}",
            "PE array": f"{int(hw.pe_rows)}x{int(hw.pe_cols)}",
            "SRAM per tile": _size(float(hw.sram_bytes)),
            "word bytes": int(hw.word_bytes),
            "clock GHz": float(hw.clock_ghz),
            "peak TOPS": float(f"{float(peak_flops_per_s(hw, np)) / 1e12:.3g}"),
            "execution": hw.execution,
            "approximates": info.approximates,
        })
    return pd.DataFrame(rows).set_index("name")


# ---- the magics -------------------------------------------------------------------------------------------------
@magics_class
class DfitMagics(Magics):
    """``%dfit``, ``%%dfit``, ``%dfit_presets`` and ``%dfit_compare`` (registered by ``%load_ext dfit_nb``)."""

    @magic_arguments()
    @argument("--hw", default=DEFAULT_HW, metavar="PRESET",
              help=f"The machine: a preset name (see %%dfit_presets; default {DEFAULT_HW}) or the name of a "
                   "dfit_nb.sim.Hardware in the namespace.")
    @argument("--dataflow", choices=REPLAY_DATAFLOWS, default=None,
              help="ws, os or is for every GEMM, or hybrid: the exact per-layer selection under --objective "
                   "(default ws; hybrid when only --objective is given).")
    @argument("--objective", choices=OBJECTIVES, default=None,
              help="What the hybrid selection minimises (default energy); only with --dataflow hybrid.")
    @argument("--fusion", choices=FUSION_MODES, default=None,
              help="Which ops run as one kernel: rules (the machine's fusion rules; default), compiler (the "
                   "capture's XLA fusions) or none (one kernel per primitive).")
    @argument("--mode", choices=MODES, default="static",
              help="Capture mode: static (nothing runs; default), profile or eager (measured times).")
    @argument("-o", "--output", metavar="NAME", default=None,
              help="Store the Run as NAME and the Trace as NAME_trace in the namespace.")
    @argument("--no-explorer", action="store_true", help="Show the summary only, not the Explorer widget.")
    @argument("expr", nargs="*", metavar="EXPR",
              help="%%dfit: the call to capture, e.g. encoder(params, x). %%%%dfit: none (the cell's last line).")
    @line_cell_magic
    @no_var_expand  # the line is code: IPython's {expr} and $name expansion would run it before dfit_nb parses it
    def dfit(self, line: str, cell: str | None = None) -> None:
        """Capture a JAX call, replay it on a dataflow accelerator, show the summary and the Explorer.

        Line magic: ``%dfit [options] EXPR``, where EXPR is one call ``f(args...)``.
        Cell magic: ``%%dfit [options]``; the cell's last line is the call, its other lines run first in the
        user namespace (as if the cell had no magic).

        Only the callee and each argument expression are evaluated, in the user namespace (as ``%timeit``
        does); then ``dfit_nb.capture(f, *args, mode=MODE, **kwargs)`` and ``dfit_nb.replay(trace, hw,
        dataflow)`` run. The Run's summary (its HTML repr) is displayed, then, unless --no-explorer,
        ``dfit_nb.widgets.Explorer(trace, hw, dataflow=...)``. dfit_nb's warnings (e.g. SpillWarning: data
        re-read through DRAM because they exceed the SRAM) are printed once each on stderr.

        Returns None (nothing is echoed as Out[]): with ``-o NAME`` the Run is stored as NAME and the Trace
        as NAME_trace. Bad input (an undefined name, not a call, ``*`` of a non-iterable, ``**`` of a
        non-mapping, a keyword given twice, arguments that do not fit the function's signature, an unknown
        preset, dataflow, objective or mode) raises UsageError naming it, and leaves the namespace as it was.

        Examples::

            %load_ext dfit_nb
            %dfit encoder(params, x)
            %dfit --hw cerebras_like --dataflow hybrid --objective edp -o run encoder(params, x)
            run.summary, run_trace.ops

            %%dfit --hw tpu_like --no-explorer -o run
            fn, (params, x) = dfit_nb.examples.get("encoder").build()
            fn(params, x)
        """
        magic = "%dfit" if cell is None else "%%dfit"
        _check_line(line, magic)
        options, expr = _split_options(self.dfit.parser, line, magic)
        args = _parse(self.dfit, options, magic)
        _check_output_name(args.output, magic, self.shell.user_ns_hidden)
        dataflow, objective = self._dataflow(args, magic)
        hw = self._hardware(args.hw, magic)
        if cell is None:
            node = parse_call(expr, magic)
            fn, fargs, fkwargs = evaluate_call(node, self.shell.user_ns, magic)
        else:
            if expr.strip():
                raise UsageError(f"%%dfit: unexpected {expr.strip()!r} on the magic's line: it takes options "
                                 "only; the call is the cell's last line")
            node, (fn, fargs, fkwargs) = self._run_cell_body(cell)
        clash = [k for k in fkwargs if k in _CAPTURE_OPTIONS]
        if clash:
            raise UsageError(f"{magic}: keyword {clash[0]!r} is a parameter of dfit_nb.capture; wrap the function "
                             "(e.g. functools.partial) to pass it")
        _check_signature(fn, fargs, fkwargs, ast.unparse(node), magic)
        with _dfit_warnings_once():
            trace = capture(fn, *fargs, mode=args.mode, **fkwargs)
            policy = None
            if dataflow == "hybrid":
                # the verified hybrid: replayed against every single style, falling back when it does not beat them
                policy = select_dataflows(trace, hw, objective, fusion=args.fusion)
                run = policy.runs["hybrid"]
            else:
                run = replay(trace, hw, dataflow, fusion=args.fusion)
            explorer = None
            if not args.no_explorer:
                explorer = Explorer(trace, hw, dataflow=dataflow, objective=objective)
        if args.output:
            self.shell.user_ns[args.output] = run
            self.shell.user_ns[f"{args.output}_trace"] = trace
        if policy is not None:
            display(policy)
        display(run)
        if explorer is not None:
            display(explorer)

    def _dataflow(self, args: argparse.Namespace, magic: str) -> tuple[str, str]:
        dataflow = args.dataflow or ("hybrid" if args.objective else "ws")
        if args.objective and dataflow != "hybrid":
            raise UsageError(f"{magic}: --objective {args.objective} applies to --dataflow hybrid only, not "
                             f"--dataflow {dataflow}")
        return dataflow, args.objective or "energy"

    def _hardware(self, name: str, magic: str) -> Hardware:
        if name in presets.names():
            return presets.get(name)
        value = self.shell.user_ns.get(name)
        if isinstance(value, Hardware):
            return check_hardware(value, magic, argument=f"--hw {name!r}", error=UsageError,
                                  batch_hint=": pass a preset or a single Hardware, not a stacked batch")
        # a name in the namespace that is something else: say what it is, not only that it is no preset
        found = (f" ({name!r} in the namespace is {_a(type(value).__name__)}, not a dfit_nb.sim.Hardware)"
                 if name in self.shell.user_ns else " (nor a Hardware in the namespace)")
        raise UsageError(f"{magic}: unknown preset {name!r}{found}; valid: {', '.join(presets.names())}")

    def _run_cell_body(self, cell: str) -> tuple[ast.Call, tuple[Any, tuple[Any, ...], dict[str, Any]]]:
        """Check the cell's last statement is a call, run the others in the user namespace, evaluate the call.

        Returns the call's node and ``(fn, args, kwargs)``.
        """
        source = self.shell.transform_cell(cell)
        try:
            module = ast.parse(source)
        except (SyntaxError, ValueError) as err:  # ValueError: a null byte, on some Python versions
            line = f" (line {err.lineno})" if getattr(err, "lineno", None) else ""
            raise UsageError(f"%%dfit: the cell is not valid Python: {getattr(err, 'msg', err)}{line}") from None
        if not module.body:
            raise UsageError("%%dfit: the cell is empty; its last line must be the call to capture, f(args...)")
        last = module.body[-1]
        if not (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)):
            kind = type(last.value if isinstance(last, ast.Expr) else last).__name__
            raise UsageError(f"%%dfit: the cell's last line must be one call f(args...), got "
                             f"{ast.get_source_segment(source, last)!r} ({_a(kind)})")
        _compile(last.value, "%%dfit")  # refused before the cell's other lines run
        if len(module.body) > 1:
            filename = self.shell.compile.cache(source)  # tracebacks show the cell's lines
            self.shell.ex(compile(ast.Module(body=module.body[:-1], type_ignores=[]), filename, "exec"))
        return last.value, evaluate_call(last.value, self.shell.user_ns, "%%dfit")

    @magic_arguments()
    @line_magic
    @no_var_expand  # it takes no arguments: expanding a long line first took minutes, as %dfit's did
    def dfit_presets(self, line: str) -> pd.DataFrame:
        """The hardware presets, one row each: tiles, PE array, SRAM per tile, word size, clock, peak TOPS
        (a MAC is two operations), execution style, and what the machine approximates.

        Returns the table (a pandas DataFrame indexed by name), so ``%dfit_presets`` shows it as the cell's
        output and ``table = %dfit_presets`` keeps it. ``dfit_nb.sim.presets.get(name).describe()`` lists
        every field of one machine.
        """
        _check_line(line, "%dfit_presets")
        _parse(self.dfit_presets, line, "%dfit_presets")
        return presets_table()

    @magic_arguments()
    @argument("-o", "--output", metavar="NAME", default=None,
              help="Store the comparison Dataset as NAME in the namespace.")
    @argument("--force", action="store_true", help="Compare runs of different programs anyway.")
    @argument("a", metavar="A", help="Name of run A in the namespace (e.g. from %%dfit -o A).")
    @argument("b", metavar="B", help="Name of run B.")
    @line_magic
    @no_var_expand  # names, not text to expand: {expr} would run code
    def dfit_compare(self, line: str) -> None:
        """A/B of two runs stored in the namespace: ``dfit_nb.sim.compare(A, B)`` and its chart.

        Displays the per-run figures side by side (a, b, b - a, b / a; a compact table) and
        ``dfit_nb.views.compare`` (region energy deltas, tile busy deltas). Returns None; ``-o NAME``
        stores the whole comparison Dataset (per run, per region and, on one grid, per tile). A name that is
        not defined or not a ``dfit_nb.Run``, or runs of different programs (without --force), raise
        UsageError naming it.

        Examples::

            %dfit --no-explorer --dataflow ws -o ws_run f(x)
            %dfit --no-explorer --dataflow os -o os_run f(x)
            %dfit_compare ws_run os_run
        """
        _check_line(line, "%dfit_compare")  # else argparse's error repeated the whole line (150 kB)
        args = _parse(self.dfit_compare, line, "%dfit_compare")
        _check_output_name(args.output, "%dfit_compare", self.shell.user_ns_hidden)
        run_a, run_b = (self._stored_run(name) for name in (args.a, args.b))
        try:
            ab = compare_runs(run_a, run_b, force=args.force)
        except CompareError as err:
            # compare() speaks of its keyword; the magic's option is --force
            message = str(err).replace("pass force=True", "pass --force")
            raise UsageError(f"%dfit_compare {args.a} {args.b}: {message}") from None
        chart = compare_chart(ab)
        if args.output:
            self.shell.user_ns[args.output] = ab
        display(compare_table(ab))
        display(chart)

    def _stored_run(self, name: str) -> Run:
        if not name.isidentifier():
            raise UsageError(f"%dfit_compare: {name!r} is not a name; pass the names of two stored runs")
        if name not in self.shell.user_ns:
            raise UsageError(f"%dfit_compare: name {name!r} is not defined in the user namespace")
        value = self.shell.user_ns[name]
        if not isinstance(value, Run):
            raise UsageError(f"%dfit_compare: {name!r} is {_a(type(value).__name__)}, not a dfit_nb.Run "
                             "(store one with %dfit -o NAME)")
        return value


def compare_table(ab: Any) -> pd.DataFrame:
    """The per-run figures of a :func:`dfit_nb.sim.compare` Dataset as a table: a, b, b - a, b / a.

    >>> import xarray as xr
    >>> ab = xr.Dataset({"latency_s": ("run", [2.0, 1.0]), "delta_latency_s": -1.0, "ratio_latency_s": 0.5},
    ...                 coords={"run": ["a", "b"]})
    >>> compare_table(ab).loc["latency_s"].tolist()
    [2.0, 1.0, -1.0, 0.5]
    """
    rows = {}
    for name, da in ab.data_vars.items():
        if da.dims == ("run",) and f"delta_{name}" in ab:
            rows[str(name)] = [float(da.sel(run="a")), float(da.sel(run="b")), float(ab[f"delta_{name}"]),
                               float(ab[f"ratio_{name}"]) if f"ratio_{name}" in ab else float("nan")]
    table = pd.DataFrame.from_dict(rows, orient="index", columns=["a", "b", "b - a", "b / a"])
    table.attrs = dict(ab.attrs)
    table.columns.name = f"a = {ab.attrs.get('a', 'a')}, b = {ab.attrs.get('b', 'b')}"
    return table


# ---- the extension --------------------------------------------------------------------------------------------
def load_ipython_extension(ipython: Any) -> None:
    """Register the magics on ``ipython`` and make offline chart rendering the default (``%load_ext dfit_nb``,
    which calls :func:`dfit_nb.setup` first; so does ``%load_ext dfit_nb.magics``)."""
    from ._setup import setup

    setup()
    enable_offline()
    ipython.register_magics(DfitMagics)


def unload_ipython_extension(ipython: Any) -> None:
    """Remove the magics (``%unload_ext dfit_nb``); the Altair renderer is left as it is."""
    manager = ipython.magics_manager
    for kind, names in DfitMagics.magics.items():
        for name in names:
            manager.magics[kind].pop(name, None)
    manager.registry.pop(DfitMagics.__name__, None)
