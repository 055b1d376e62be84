"""XLA's HLO module text (``compiled.as_text()``) parsed into computations and instructions, and the byte size of
an HLO shape: what :mod:`dfit_nb.capture.lowering` maps jaxpr ops onto. Importable from there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Attribute keys whose values name computations.
_CALL_KEYS = (
    "calls",
    "to_apply",
    "body",
    "condition",
    "branch_computations",
    "true_computation",
    "false_computation",
    "called_computations",
    "select",
    "scatter",
)

_OP_NAME_RE = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_TARGET_RE = re.compile(r'custom_call_target="((?:[^"\\]|\\.)*)"')
_QUOTED_RE = re.compile(r'"(?:[^"\\]|\\.)*"')
# key=value at the top level of an attribute list, once string literals are blanked: a value is a
# brace group without nested braces ({%a, %b}, {op_name="" ...}) or a bare token; a brace group
# with nested braces (backend_config JSON) matches nothing and is skipped.
_ATTR_RE = re.compile(r'(?:^|[\s,])([A-Za-z_][\w.\-]*)=(\{[^{}]*\}|[^,\s{}]+)')
_ARRAY_RE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")
_COMP_HEADER_RE = re.compile(r"^(ENTRY\s+)?%?([^\s(]+)\s*(?:\(.*\))?\s*(?:->.*)?\{\s*$")
_INSTR_HEAD_RE = re.compile(r"^(ROOT\s+)?%?([^\s=]+)\s*=\s*")
_OPCODE_RE = re.compile(r"\s*([A-Za-z][\w\-]*)\(")
_NAME_RE = re.compile(r"%([^\s,(){}]+)")
_COMMENT_RE = re.compile(r"/\*.*?\*/")


@dataclass(frozen=True)
class HloInstruction:
    """One HLO instruction as printed in the module text."""

    name: str
    opcode: str
    shape: str
    operands: tuple[str, ...]
    op_name: str
    calls: tuple[str, ...]
    fusion_kind: str
    computation: str
    is_root: bool
    custom_call_target: str = ""
    call_edges: tuple[tuple[str, str], ...] = ()  # (attribute key, computation)
    parameter_number: int = -1  # N of ``parameter(N)``, -1 for other opcodes


@dataclass(frozen=True)
class HloComputation:
    """A named HLO computation and its instructions in printed order."""

    name: str
    is_entry: bool
    instructions: tuple[HloInstruction, ...]


def hlo_module_name(text: str) -> str:
    """Return the module name from the ``HloModule <name>, ...`` header.

    Examples
    --------
    >>> hlo_module_name("HloModule jit_f, is_scheduled=true\\n")
    'jit_f'
    """
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("HloModule"):
            return line[len("HloModule") :].strip().split(",")[0].split()[0]
        if line:
            break
    raise ValueError("no 'HloModule <name>' header found")


def _skip_quoted(text: str, i: int) -> int:
    """Index just past the string literal that starts at ``text[i] == '"'``."""
    i += 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i + 1
        i += 1
    return i


def _closing(text: str, i: int) -> int:
    """Index of the bracket closing the one at ``text[i]`` (quotes respected)."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c == '"':
            i = _skip_quoted(text, i)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError(f"unbalanced brackets in: {text[:200]!r}")


def _split_top(text: str) -> list[str]:
    """Split on commas that are outside brackets and string literals."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c == '"':
            i = _skip_quoted(text, i)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _operand_names(opcode: str, text: str) -> tuple[str, ...]:
    text = _COMMENT_RE.sub("", text)
    if opcode in ("parameter", "constant", "iota"):
        return ()
    names = _NAME_RE.findall(text)
    if names or "%" in text:
        return tuple(names)
    # Printers that omit '%': each operand is "[shape ]name".
    return tuple(p.split()[-1] for p in _split_top(text))


def _parse_attributes(text: str) -> dict[str, str]:
    """Top-level ``key=value`` attributes (string literals blanked to ``""``).

    One regex pass in C instead of a character loop: parsing a 48-layer encoder's HLO went
    from 0.66 s to a fraction of that (``benchmarks/bench_static_capture.py``).
    """
    attrs: dict[str, str] = {}
    for m in _ATTR_RE.finditer(_QUOTED_RE.sub('""', text)):
        attrs.setdefault(m.group(1), m.group(2))
    return attrs


def _parse_instruction(line: str, computation: str) -> HloInstruction:
    head = _INSTR_HEAD_RE.match(line)
    if head is None:
        raise ValueError(f"not an HLO instruction: {line[:200]!r}")
    i = head.end()
    if line[i] == "(":  # tuple shape
        j = _closing(line, i) + 1
    else:
        j = line.find(" ", i)
        j = len(line) if j < 0 else j
    shape = line[i:j]
    op = _OPCODE_RE.match(line, j)
    if op is None:
        raise ValueError(f"no opcode in HLO instruction: {line[:200]!r}")
    opcode = op.group(1)
    open_paren = op.end() - 1
    close_paren = line.find(")", open_paren)
    if close_paren < 0 or any(c in line[open_paren + 1 : close_paren] for c in '("[{'):
        close_paren = _closing(line, open_paren)  # nested brackets or quotes: the careful scan
    rest = line[close_paren + 1 :]
    attrs = _parse_attributes(rest)
    edges = []
    for key in _CALL_KEYS:
        if key in attrs:
            value = attrs[key].strip("{} ")
            edges += [(key, n.strip().lstrip("%")) for n in value.split(",") if n.strip()]
    meta = _OP_NAME_RE.search(rest)
    target = _TARGET_RE.search(rest)
    number = line[open_paren + 1 : close_paren].strip() if opcode == "parameter" else ""
    return HloInstruction(
        name=head.group(2),
        opcode=opcode,
        shape=shape,
        operands=_operand_names(opcode, line[open_paren + 1 : close_paren]),
        op_name=meta.group(1).replace('\\"', '"') if meta else "",
        calls=tuple(dict.fromkeys(name for _, name in edges)),
        fusion_kind=attrs.get("kind", "") if opcode == "fusion" else "",
        computation=computation,
        is_root=head.group(1) is not None,
        custom_call_target=target.group(1) if target else "",
        call_edges=tuple(edges),
        parameter_number=int(number) if number.isdigit() else -1,
    )


def parse_hlo_module(text: str) -> dict[str, HloComputation]:
    """Parse HLO module text into computations keyed by name (text order).

    Header lines and the ``FileNames``/``FunctionNames``/``FileLocations``/
    ``StackFrames`` sections are skipped.  Each instruction must sit on one
    line, as ``compiled.as_text()`` prints them.

    Examples
    --------
    >>> comps = parse_hlo_module('''HloModule m
    ... ENTRY %main (p: f32[2]) -> f32[2] {
    ...   %p = f32[2]{0} parameter(0)
    ...   ROOT %n = f32[2]{0} negate(%p), metadata={op_name="jit(f)/dfit_op0/neg"}
    ... }''')
    >>> comps["main"].is_entry, comps["main"].instructions[1].opcode
    (True, 'negate')
    """
    comps: dict[str, HloComputation] = {}
    current: tuple[str, bool] | None = None
    body: list[HloInstruction] = []
    for raw in text.splitlines():
        line = raw.strip()
        if current is None:
            if raw[:1].isspace() or not line.endswith("{"):
                continue
            header = _COMP_HEADER_RE.match(line)
            if header and not line.startswith("HloModule"):
                current, body = (header.group(2), header.group(1) is not None), []
        elif line == "}":
            comps[current[0]] = HloComputation(current[0], current[1], tuple(body))
            current = None
        elif line:
            body.append(_parse_instruction(line, current[0]))
    if current is not None:
        raise ValueError(f"computation {current[0]!r} is not closed")
    return comps


_ZERO_SIZE_TYPES = {"token", "opaque"}


def _element_bytes(dtype: str) -> int:
    """Bytes per element; sub-byte types (s4, u4, f4e2m1fn, ...) count as 1."""
    if dtype in _ZERO_SIZE_TYPES:
        return 0
    if dtype == "pred":
        return 1
    bits = re.search(r"\d+", dtype)
    if bits is None:
        raise ValueError(f"unknown HLO element type {dtype!r}")
    return max(1, (int(bits.group()) + 7) // 8)


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO shape string; tuple shapes are summed over leaves.

    Dynamic dimensions (``<=8``) count at their bound, unknown ones (``?``) as
    zero; layouts are ignored.  Element sizes: pred/s8/u8/f8* 1, bf16/f16/s16/u16
    2, f32/s32/u32 4, f64/s64/u64/c64 8, c128 16; sub-byte types (s4, u4, s2,
    f4*) are counted as one byte each, i.e. unpacked.

    Examples
    --------
    >>> shape_bytes("(s32[], f32[64,128]{1,0})")
    32772
    """
    total = 0
    for dtype, dims in _ARRAY_RE.findall(shape):
        n = 1
        for d in dims.split(","):
            digits = re.sub(r"[^0-9]", "", d)
            if d.strip():
                n *= int(digits) if digits else 0
        total += n * _element_bytes(dtype)
    return total
