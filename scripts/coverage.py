"""The README's coverage table: every text causal-LM family of the pinned transformers.

A family is a key of transformers' ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` (encoders that
transformers also runs as decoders, such as ``bert``, included). Each one is judged by
``graphcheck map hf:<type> --format json`` in a subprocess of its own (under ``nice``, with
a timeout) and sorted into one outcome:

* ``all cuts proven`` - exit 0: every boundary 0..L carries one bf16 residual;
* ``true finding`` - exit 1: the family's graph has the property the listed rules name
  (tied embeddings are GC205 at every cut);
* ``unsupported`` - exit 2, a timeout or a crash: graphcheck could not build, export or
  judge it; the reason is the first line of the error (and the model line it names). Also
  exit 1 when every finding fails closed on an op graphcheck's op table lacks: not proven,
  and not shown wrong either.

Execution evidence (``--evidence``): a family proven, or with a finding of a document rule
(GC401 documents mixed, GC402 positions made up), also runs ``graphcheck gate hf:<type>
--cuts K --format json`` (K the middle boundary; each stage in a process of its own, under
``nice``, with the timeout): the exact tests say whether the documents stay isolated, and the
row keeps the gate's statuses, first crossing and own static verdict. Its evidence:

* ``isolated`` - proven, bytes equal, perturb and shift bitwise: the proof stands;
* ``WRONG PASS`` - proven, yet a document's outputs moved or the staged bytes differ;
* ``stage programs differ`` - every cut proven, documents isolated, the staged bytes differ,
  and the gate's own proof (which, unlike the map, proves the stage programs its builder
  makes) fails on them alone (GC301/GC303) and so agrees with the bytes;
* ``leak shown`` - a document finding the gate shows: the ``true finding`` stands;
* ``false alarm`` - a document finding, yet every document is bitwise isolated and the bytes
  equal (``bytes differ`` when they are not): the table says ``false alarm``, not
  ``true finding``;
* ``not about documents`` - the findings name no document rule (GC205 tied embeddings, GC501
  fp32 parameters, GC206, GC403...): no isolation test speaks to them, the finding stands;
* ``not executed: <reason>`` - the gate could not compare (exit 2, a timeout, a stage that
  could not run) or has not run (``not run``); such a finding reads ``finding not checked``.

A train program with dropout has no bytes to compare (the gate refuses it): the gate then runs
``--mode eval``, and the evidence says ``eval``.

``exported`` says whether the export went through, else which step failed. ``attention``
says which attention the proof ran through: ``varlen`` (graphcheck_varlen, a varlen kernel
fed the document boundaries; N calls), ``sdpa`` or ``eager`` (the family's own attention),
``refused`` (graphcheck_varlen would drop what the family passes: a bias, appended keys, a
mask its own code reads; the details name it), or ``-`` (not exported).

    .venv/bin/python scripts/coverage.py --only llama gpt2        # print their rows
    .venv/bin/python scripts/coverage.py --write --json docs/coverage.json   # every family
    .venv/bin/python scripts/coverage.py --load docs/coverage.json --only gpt2 --write
    .venv/bin/python scripts/coverage.py --load docs/coverage.json --evidence --write \
        --json docs/coverage.json                      # evidence for the saved map rows

``--load FILE...`` starts from saved results (a later file's result of a family wins) and
re-runs only the ``--only`` families; a result saved before the attention column says ``not
re-run`` there. A map run drops the family's gate run; ``--evidence`` gates the families of
the run (``--only``, else all) that need it and have none, so a cut-short sweep resumes from
its ``--json``; ``--gate TYPE...`` gates those again without their map. ``--write`` replaces
the table between ``<!-- coverage:begin -->`` and ``<!-- coverage:end -->`` in
docs/explanation/coverage.md and
needs a result for every family.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path

__all__ = [
    "BEGIN",
    "REFUSAL_KINDS",
    "END",
    "Exported",
    "Outcome",
    "Result",
    "classify",
    "families",
    "main",
    "markdown",
    "refusals",
    "rewrite",
]

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "docs" / "explanation" / "coverage.md"  # the page with the table
BEGIN = "<!-- coverage:begin -->"
END = "<!-- coverage:end -->"
TIMEOUT = 300.0
_ERROR = "graphcheck: error: "
# build_fake's wrapper around an error that already says what failed
_WRAPPER = re.compile(r"^factory \S+\(\) raised ModelLoadError: ")
_BUILD = re.compile(
    r"^factory \S+\(\) raised|invalid config|is invalid|unknown model type|no causal LM"
)
_LAYOUT = re.compile(r"found; pass --(layers|inputs|outputs)")
_REFUSED = "attention refused: "
_AT = re.compile(r"^\s+at (\S+?):(\d+)")
_UNKNOWN_OP = re.compile(r"`([^`]+)` is not in graphcheck's op table")


class Outcome(StrEnum):
    PROVEN = "all cuts proven"
    FINDING = "true finding"
    UNSUPPORTED = "unsupported"


class Evidence(StrEnum):
    """What the gate's exact tests say about a family's map outcome."""

    ISOLATED = "isolated"  # proven, and no bit of another document moved
    WRONG_PASS = "WRONG PASS"  # proven, yet the gate shows a leak or unequal bytes
    STAGES = "stage programs differ"  # cuts proven; the builder's stages fail their proof
    LEAK = "leak shown"  # a document finding, and the gate shows the leak
    FALSE_ALARM = "false alarm"  # a document finding, yet documents stay bitwise isolated
    BYTES = "bytes differ"  # a document finding, documents isolated, staged bytes differ
    OFF_TOPIC = "not about documents"  # the findings name no document rule
    NOT_EXECUTED = "not executed"  # the gate did not run (the reason follows)
    NONE = "-"  # unsupported: nothing to compare


class Exported(StrEnum):
    YES = "yes"
    BUILD = "no (build failed)"
    LAYOUT = "no (layout not found)"
    EXPORT = "no (export failed)"
    NO = "no"


@dataclass
class GateRun:
    """One ``graphcheck gate hf:<type> --cuts K --format json`` run: its exit, the exact
    tests' statuses, the first crossing, and the static verdict the gate compared."""

    cut: int
    exit: int | None
    bytes: str = "-"  # equal / differ / blocked
    first_diff: dict | None = None  # differ: where (token, document, position, column)
    max_abs_diff: float | None = None
    isolation: str = "-"  # bitwise / fail
    perturb: str = "-"
    shift: str = "-"
    crossing: dict | None = None  # test, document, token, layer, layer_fqn
    static: str = "-"  # the gate's own static verdict
    static_codes: list[str] = field(default_factory=list)
    agrees: bool | None = None
    reason: str = ""  # why it did not run (exit 2, a timeout, no report)
    seconds: float = 0.0
    date: str = ""
    mode: str = "train"  # the program run: eval where the train program draws random numbers


@dataclass
class Result:
    """One family's outcome, as the table and ``--json`` show it."""

    family: str
    outcome: Outcome
    exported: Exported
    exit: int | None
    cuts: str = "-"
    codes: dict[str, int] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)
    reason: str = ""
    detail: list[str] = field(default_factory=list)
    seconds: float = 0.0
    export_seconds: float | None = None
    nodes: int | None = None
    attention: str = "-"
    date: str = ""  # of the map run (UTC)
    gate: GateRun | None = None


def families() -> list[str]:
    """Every text causal-LM ``model_type`` of the installed transformers, in its order."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return list(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


# --- classification ------------------------------------------------------------------------


def classify(
    family: str, code: int | None, stdout: str, stderr: str, seconds: float = 0.0
) -> Result:
    """The outcome of one ``graphcheck map --format json`` run (``code`` None: timed out).

    >>> classify("llama", 0, '{"cuts": [{"verdict": "pass"}], "diagnostics": []}', "").outcome
    <Outcome.PROVEN: 'all cuts proven'>
    >>> classify("x", None, "", "", 300.0).reason
    'timed out after 300 s'
    """
    if code in (0, 1):
        try:
            report = json.loads(stdout)
        except ValueError:  # a crash (a traceback is exit 1 too), or a report cut short
            reason, detail = _error(stderr, code)
            return _unsupported(family, code, reason, detail, seconds)
        return _judged(family, code, report, seconds)
    if code is None:
        return _unsupported(family, None, f"timed out after {seconds:.0f} s", [], seconds)
    reason, detail = _error(stderr, code)
    return _unsupported(family, code, reason, detail, seconds)


def _judged(family: str, code: int, report: dict, seconds: float) -> Result:
    cuts = report.get("cuts") or []
    proven = sum(cut.get("verdict") == "pass" for cut in cuts)
    diagnostics = report.get("diagnostics") or []
    errors = [d for d in diagnostics if d.get("severity", "error") == "error"] or diagnostics
    closed = [d for d in errors if _unknown_ops([d])]  # fail closed: the op table lacks an op
    real = [d for d in errors if not _unknown_ops([d])]
    examples: dict[str, str] = {}
    for d in diagnostics:  # the first message of each code, for whoever reads the JSON
        examples.setdefault(d["code"], f"{d.get('module')}: {d.get('message', '')}")
    result = Result(
        family,
        Outcome.PROVEN if code == 0 else Outcome.FINDING,
        Exported.YES,
        code,
        cuts=f"{proven}/{len(cuts)}",
        names={d["code"]: d.get("name", "") for d in diagnostics},
        examples=dict(sorted(examples.items())),
        seconds=round(seconds, 1),
        export_seconds=report.get("export_seconds"),
        nodes=report.get("nodes"),
        attention=_attention(report.get("attention")),
    )
    if code == 1:
        result.codes = _counts(real or closed)
    if code == 1 and closed and not real:
        # fail closed on ops graphcheck does not know: not proven, and not shown to be wrong
        result.outcome = Outcome.UNSUPPORTED
        result.reason = f"fail closed on ops graphcheck's table lacks: {_ops(closed)}"
    elif code == 1 and closed:
        shown = ", ".join(f"{c} ×{n}" for c, n in _counts(closed).items())
        result.reason = f"also fail closed on {_ops(closed)} ({shown})"
    return result


def _attention(record: dict | None) -> str:
    """``varlen ×8``: the attention kind and its calls in the export (``-``: none said).

    >>> _attention({"kind": "varlen", "implementation": "graphcheck_varlen", "calls": 8})
    'varlen ×8'
    """
    if not record:
        return "-"
    calls = record.get("calls")
    return record["kind"] + (f" ×{calls}" if calls is not None else "")


def _counts(diagnostics: Sequence[dict]) -> dict[str, int]:
    return dict(sorted(Counter(d["code"] for d in diagnostics).items()))


def _ops(diagnostics: Sequence[dict]) -> str:
    return ", ".join(_unknown_ops(diagnostics))


def _unknown_ops(diagnostics: Sequence[dict]) -> list[str]:
    """The ops a diagnostic fails closed on because graphcheck's op table lacks them."""
    found = (_UNKNOWN_OP.search(d.get("message", "")) for d in diagnostics)
    return sorted({match.group(1) for match in found if match})


def _unsupported(
    family: str, code: int | None, reason: str, detail: list[str], seconds: float
) -> Result:
    if "torch.export failed" in reason:
        exported = Exported.EXPORT
    elif _BUILD.search(reason):
        exported = Exported.BUILD
    elif _LAYOUT.search(reason):
        exported = Exported.LAYOUT
    else:
        exported = Exported.NO
    reason = _WRAPPER.sub("", reason)
    attention = "refused" if reason.startswith(_REFUSED) else "-"
    return Result(family, Outcome.UNSUPPORTED, exported, code, reason=reason, detail=detail,
                  seconds=round(seconds, 1), attention=attention)  # fmt: skip


def _error(stderr: str, code: int) -> tuple[str, list[str]]:
    """graphcheck's error line and the indented lines below it; for a crash, the last line."""
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(_ERROR):
            detail = []
            for more in lines[i + 1 :]:
                if not more.startswith("  "):
                    break
                detail.append(more.rstrip())
            return line.removeprefix(_ERROR).strip(), detail
    last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "no message")
    return f"crashed (exit {code}): {last}", []


# --- execution evidence --------------------------------------------------------------------

# The rules a gate's exact tests can confirm or refute: documents mixed (GC401), positions
# made up from the packed offset (GC402). Other findings (tied embeddings, fp32 parameters,
# a boundary of another shape) are not about documents: no isolation test speaks to them.
DOCUMENT_CODES = frozenset({"GC401", "GC402"})


def needs_gate(r: Result) -> bool:
    """Proven, or a finding of a document rule: the gate's exact tests can say which."""
    documents = DOCUMENT_CODES & set(r.codes)
    return r.outcome is Outcome.PROVEN or (r.outcome is Outcome.FINDING and bool(documents))


def middle_cut(r: Result) -> int:
    """The boundary the gate cuts at: the middle of the L layers (``cuts`` ``a/L+1``), else 1.

    >>> middle_cut(Result("x", Outcome.PROVEN, Exported.YES, 0, cuts="9/9"))
    4
    """
    try:
        layers = int(r.cuts.split("/")[1]) - 1
    except (IndexError, ValueError):
        return 1
    return max(1, layers // 2)


def gate_record(
    cut: int, code: int | None, stdout: str, stderr: str, seconds: float = 0.0
) -> GateRun:
    """One ``graphcheck gate --format json`` run (``code`` None: timed out), recorded.

    >>> gate_record(4, None, "", "", 300.0).reason
    'timed out after 300 s'
    """
    run = GateRun(cut, code, seconds=round(seconds, 1))
    if code is None:
        run.reason = f"timed out after {seconds:.0f} s"
        return run
    try:
        report = json.loads(stdout) if code in (0, 1) else None
    except ValueError:
        report = None
    if not isinstance(report, dict):
        run.reason = _WRAPPER.sub("", _error(stderr, code)[0])
        return run
    isolation, checked = report.get("isolation") or {}, report.get("bytes") or {}
    tests = [isolation.get(name) or {} for name in ("perturb", "shift")]
    static = report.get("static") or {}
    run.bytes, run.isolation = checked.get("status", "-"), isolation.get("status", "-")
    run.first_diff, run.max_abs_diff = checked.get("first_diff"), checked.get("max_abs_diff")
    run.perturb, run.shift = (t.get("status", "-") for t in tests)
    crossing = next((t["crossing"] for t in tests if t.get("crossing")), None)
    run.crossing = {k: crossing.get(k) for k in _CROSSING} if crossing else None
    run.static, run.static_codes = static.get("verdict", "-"), list(static.get("codes") or [])
    run.agrees = report.get("agrees")
    if run.bytes == "blocked":
        run.reason = f"a stage could not run: {checked.get('message') or 'bytes blocked'}"
    elif run.isolation not in ("bitwise", "fail"):
        run.reason = f"no isolation status ({run.isolation})"
    return run


_CROSSING = ("test", "document", "token", "layer", "layer_fqn", "max_abs_diff")


def judge(r: Result) -> tuple[Evidence, str]:
    """What the gate says about ``r``'s outcome, and what shows it (the tests, the first
    crossing, or why the gate did not run)."""
    if r.outcome is Outcome.UNSUPPORTED:
        return Evidence.NONE, ""
    if not needs_gate(r):
        return Evidence.OFF_TOPIC, ""
    gate = r.gate
    if gate is None:
        return Evidence.NOT_EXECUTED, "not run"
    if gate.reason:  # in eval: the train program drew random numbers, no bytes to compare
        eval_ = "train has random ops; in eval, " if gate.mode == "eval" else ""
        return Evidence.NOT_EXECUTED, eval_ + gate.reason
    shown, leak, equal = _shown(gate), gate.isolation != "bitwise", gate.bytes == "equal"
    if r.outcome is Outcome.PROVEN and (leak or not equal):
        # the gate's own proof also judges the stage programs its builder makes (GC303)
        seen = f"; the gate's proof: {', '.join(gate.static_codes)}" if gate.static_codes else ""
        staged = set(gate.static_codes) and set(gate.static_codes) <= STAGE_CODES - {"GC302"}
        if staged and not leak and gate.agrees:  # the map proves cuts, not stage programs
            return Evidence.STAGES, shown + seen
        return Evidence.WRONG_PASS, shown + seen
    if r.outcome is Outcome.PROVEN:
        return Evidence.ISOLATED, shown
    if leak:
        return Evidence.LEAK, shown
    return (Evidence.FALSE_ALARM if equal else Evidence.BYTES), shown


def _shown(gate: GateRun) -> str:
    """``cut 4: bytes equal, perturb fail, shift bitwise; perturb: document 1 token 0 at
    layer 0 (model.layers.0)``."""
    text = f"cut {gate.cut}: bytes {gate.bytes}, perturb {gate.perturb}, shift {gate.shift}"
    text = f"{gate.mode}, {text}" if gate.mode != "train" else text
    c = gate.crossing
    if gate.first_diff:
        text += f"; first differing byte at {gate.first_diff}"
    if c:
        text += f"; {c.get('test')}: document {c.get('document')} token {c.get('token')}"
        if c.get("layer_fqn") is not None:
            text += f" at layer {c.get('layer')} ({c.get('layer_fqn')})"
    return text


def stale(r: Result) -> bool:
    """The gate's own static codes differ from the map row's (but for the stage-program
    rules, which only the gate's proof runs): the row predates the code."""
    if r.gate is None or r.gate.reason:
        return False
    drawn = {"GC304"} if r.gate.mode == "eval" else set()  # eval draws no random numbers
    return set(r.gate.static_codes) - STAGE_CODES != set(r.codes) - drawn


# Rules on the stage programs a builder makes: the gate's proof runs them, the map does not.
STAGE_CODES = frozenset({"GC301", "GC302", "GC303"})


def evidence_text(r: Result) -> str:
    """``not executed: timed out after 300 s``, ``false alarm``: the class and its reason
    for not running."""
    kind, shown = judge(r)
    return f"{kind}: {shown}" if kind is Evidence.NOT_EXECUTED else str(kind)


# --- the table -----------------------------------------------------------------------------


def label(r: Result) -> str:
    """The outcome the table shows: a finding of a document rule is a ``true finding``
    only where the gate shows the leak; ``false alarm`` where the documents stay bitwise
    isolated; ``finding not checked`` where the gate did not run."""
    kind, _ = judge(r)
    if r.outcome is not Outcome.FINDING or kind in (Evidence.LEAK, Evidence.OFF_TOPIC):
        return str(r.outcome)
    return FALSE_ALARM if kind in (Evidence.FALSE_ALARM, Evidence.BYTES) else UNCHECKED


FALSE_ALARM = "false alarm"
UNCHECKED = "finding not checked"
LABELS = (Outcome.PROVEN, Outcome.FINDING, FALSE_ALARM, UNCHECKED, Outcome.UNSUPPORTED)


def summary(results: Iterable[Result]) -> str:
    """``196 families: 120 all cuts proven, 38 true finding, 2 false alarm, 0 finding not
    checked, 36 unsupported; attention: 150 varlen, 6 refused, 40 -``."""
    results = list(results)
    counts = Counter(label(r) for r in results)
    parts = ", ".join(f"{counts[o]} {o}" for o in LABELS)
    kinds = Counter(r.attention.split(" ×")[0] for r in results)
    attention = ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())
    return f"{len(results)} families: {parts}; attention: {attention}"


def evidence_summary(results: Iterable[Result]) -> str:
    """``gate evidence: 55 isolated, 0 WRONG PASS, 20 leak shown, ...`` (``-``: unsupported,
    not counted)."""
    counts = Counter(judge(r)[0] for r in results)
    return "gate evidence: " + ", ".join(
        f"{counts[e]} {e}" for e in Evidence if e is not Evidence.NONE
    )


def markdown(results: Sequence[Result], version: str) -> str:
    """The table: one row per family, with summary lines and the disagreements above it."""
    stale = sum(r.attention == NOT_RERUN for r in results)
    note = (
        f" {stale} rows say `{NOT_RERUN}`: they are from the sweep before the attention "
        "column and predate graphcheck_varlen's refusals; `make coverage` re-runs them."
        if stale
        else ""
    )
    rows = [
        f"transformers {version}, `graphcheck map hf:<type>` with default options "
        f"({summary(results)}).{note}",
        "",
        f"{evidence_summary(results)} (`graphcheck gate hf:<type> --cuts K`, K the middle "
        f"boundary). {dates(results, version)}",
        "",
        *disagreements(results),
        *refusals(results),
        "| family | exported | attention | cuts proven | outcome | evidence | details |",
        "|---|---|---|---|---|---|---|",
    ]
    rows += [_row(r) for r in results]
    return "\n".join(rows) + "\n"


def dates(results: Sequence[Result], version: str = "") -> str:
    """``Map rows (transformers 5.24.0): 150 from 2026-12-02, 46 re-run 2026-12-04 (`a`,
    `b`); gate runs 2026-12-04.``: when each row was judged, the newest run's named."""
    by_date: dict[str, list[str]] = {}
    for r in results:
        by_date.setdefault(r.date or "an earlier run", []).append(f"`{r.family}`")
    order = sorted(by_date, key=lambda d: (d[0].isdigit(), d))
    newest = order[-1] if len(order) > 1 else None
    parts = [
        f"{len(by_date[d])} re-run {d} ({', '.join(by_date[d])})"
        if d == newest
        else f"{len(by_date[d])} from {d}"
        for d in order
    ]
    gated = sorted({r.gate.date for r in results if r.gate is not None and r.gate.date})
    runs = f"; gate runs {', '.join(gated)}" if gated else ""
    pinned = f" (transformers {version})" if version else ""
    return f"Map rows{pinned}: {', '.join(parts)}{runs}."


def disagreements(results: Sequence[Result]) -> list[str]:
    """Where the gate and the map disagree or could not be compared: one bullet per kind
    (WRONG PASS always, first), then a blank line."""
    kinds = (Evidence.WRONG_PASS, Evidence.FALSE_ALARM, Evidence.BYTES, Evidence.NOT_EXECUTED)
    found: dict[Evidence, list[str]] = {kind: [] for kind in kinds}
    unrun = []
    for r in results:
        kind, shown = judge(r)
        if kind is Evidence.NOT_EXECUTED and shown == "not run":
            unrun.append(f"`{r.family}`")
        elif kind in found:
            codes = ", ".join(c for c in r.codes if c in DOCUMENT_CODES)
            shown = _short(shown, 160) if kind is Evidence.NOT_EXECUTED else shown
            found[kind].append(f"`{r.family}` ({codes + '; ' if codes else ''}{shown})")
    if unrun:
        found[Evidence.NOT_EXECUTED].append(f"not run yet: {', '.join(unrun)}")
    lines = ["Disagreements of the map with the gate's exact tests:"]
    lines += [
        f"* **{kind}**: {'; '.join(found[kind]) or 'none'}"
        for kind in kinds
        if found[kind] or kind is Evidence.WRONG_PASS
    ]
    drifted = [f"`{r.family}`" for r in results if stale(r)]
    if drifted:
        lines.append(f"* the gate's static codes differ from the map row: {', '.join(drifted)}")
    return [*lines, ""]


# What a refusal names (its reason's words) -> the kind of program graphcheck_varlen would
# have proven instead of the family's, in the order the list shows them.
REFUSAL_KINDS = (
    ("an attention_mask tensor", "a bias or mask added to the scores (an `attention_mask` tensor)"),
    ("appended keys", "keys beyond the T queries (memory, compressed or extra tokens)"),
    ("the model's own code", "its own code reads the mask `create_causal_mask` builds"),
    ("attention dropout", "attention dropout (drawn inside the softmax, in `model.train()`)"),
    ("a mask from transformers with", "a mask beyond causal documents (chunks, OR-ed masks)"),
    ("", "another keyword the kernel would drop (a window, `is_causal`, a tensor)"),
)


def refusals(results: Sequence[Result]) -> list[str]:
    """The families whose attention graphcheck_varlen refused, by what it would have
    dropped: one bullet per kind, then a blank line (nothing when none was refused)."""
    kinds: dict[str, list[str]] = {}
    for r in results:
        if r.attention != "refused":
            continue
        kind = next(label for words, label in REFUSAL_KINDS if words in r.reason)
        kinds.setdefault(kind, []).append(f"`{r.family}`")
    if not kinds:
        return []
    lines = ["Refused, so not proven on a substituted attention (what the family passes):"]
    lines += [
        f"* {label}: {', '.join(kinds[label])}" for _, label in REFUSAL_KINDS if label in kinds
    ]
    return [*lines, ""]


def _row(r: Result) -> str:
    exported = r.exported.value
    if r.exported is Exported.YES and r.export_seconds is not None:
        exported = f"yes ({r.export_seconds:.1f} s, {r.nodes} nodes)"
    cells = (f"`{r.family}`", exported, r.attention, r.cuts, label(r), _evidence(r), _details(r))
    return "| " + " | ".join(cells) + " |"


def _evidence(r: Result) -> str:
    """The evidence cell: the class, bold where the gate and the map disagree, and what
    shows it."""
    kind, shown = judge(r)
    if kind in (Evidence.NONE, Evidence.OFF_TOPIC):
        return str(kind)
    if kind is Evidence.NOT_EXECUTED:
        return _short(f"{kind}: {shown}", 160).replace("|", "\\|")
    loud = kind in (Evidence.WRONG_PASS, Evidence.FALSE_ALARM, Evidence.BYTES)
    if kind is Evidence.ISOLATED:
        shown = f"cut {r.gate.cut}"
    return (f"**{kind}**" if loud else str(kind)) + f" ({shown})"


def _details(r: Result) -> str:
    findings = ", ".join(
        f"{code} {r.names.get(code, '')} ×{n}".replace("  ", " ") for code, n in r.codes.items()
    )
    if r.outcome is Outcome.FINDING:
        text = f"{findings}; {r.reason}" if r.reason else findings
    elif r.outcome is Outcome.UNSUPPORTED:
        text = _short(r.reason, 200) + _location(r.detail)
        text += f" ({findings})" if findings else ""
    else:
        text = "-"
    return text.replace("|", "\\|").replace("\n", " ")


def _location(detail: Sequence[str]) -> str:
    """`` (at modeling_x.py:123)``: the model line an export error names."""
    for line in detail:
        match = _AT.match(line)
        if match:
            return f" (at {Path(match.group(1)).name}:{match.group(2)})"
    return ""


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bounds(text: str) -> tuple[int, int]:
    begin, end = text.find(BEGIN + "\n"), text.find("\n" + END)
    if begin < 0 or end < begin:
        raise SystemExit(f"coverage: no {BEGIN} ... {END} region in {README.name}")
    return begin + len(BEGIN) + 1, end + 1


def rewrite(text: str, table: str) -> str:
    """``text`` with the region between the coverage markers replaced by ``table``."""
    start, stop = _bounds(text)
    return text[:start] + f"\n{table}\n" + text[stop:]


# --- running -------------------------------------------------------------------------------


def run(family: str, timeout: float) -> Result:
    """``graphcheck map hf:<family> --format json`` in a subprocess, classified."""
    code, stdout, stderr, seconds = _graphcheck(["map", f"hf:{family}"], timeout)
    result = classify(family, code, stdout, stderr, seconds)
    result.date = _today()
    return result


def run_gate(result: Result, timeout: float) -> Result:
    """``result`` with the gate's evidence: ``graphcheck gate hf:<family> --cuts K``."""
    cut = middle_cut(result)
    argv = ["gate", f"hf:{result.family}", "--cuts", str(cut)]
    gate = gate_record(cut, *_graphcheck(argv, timeout))
    if gate.reason.startswith(RANDOM):  # no bytes to compare in train: the eval program's
        gate = replace(gate_record(cut, *_graphcheck([*argv, "--mode", "eval"], timeout)),
                       mode="eval")  # fmt: skip
    gate.date = _today()
    return replace(result, gate=gate)


RANDOM = "the train program has random ops"  # the gate's refusal: dropout in model.train()


def _graphcheck(argv: list[str], timeout: float) -> tuple[int | None, str, str, float]:
    """``python -m graphcheck ARGV --format json`` under ``nice``: exit (None: timed
    out), stdout, stderr, seconds. In a session of its own: a timeout ends the gate's stage
    processes too, not only graphcheck."""
    nice = [shutil.which("nice"), "-n", "10"] if shutil.which("nice") else []
    command = [*nice, sys.executable, "-m", "graphcheck", *argv, "--format", "json"]
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error"}
    start = time.perf_counter()
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
        start_new_session=True,
    ) as child:  # fmt: skip
        try:
            stdout, stderr = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            return None, "", "", timeout
    return child.returncode, stdout, stderr, time.perf_counter() - start


def _today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


def run_all(
    names: Sequence[str],
    jobs: int,
    timeout: float,
    done: Callable[[Result], None] | None = None,
    work: Callable[[str], Result] | None = None,
) -> dict[str, Result]:
    """``work`` (default: :func:`run`) for every family of ``names``, ``jobs`` at a time;
    progress on stderr, and each result to ``done`` as it comes in."""
    work = work or (lambda name: run(name, timeout))
    results: dict[str, Result] = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(work, name): name for name in names}
        for future in as_completed(futures):
            result = future.result()
            results[result.family] = result
            if done is not None:
                done(result)
            print(f"[{len(results)}/{len(names)}] {_progress(result)}", file=sys.stderr, flush=True)
    return results


def _progress(r: Result) -> str:
    what = _details(r) if r.outcome is not Outcome.PROVEN else r.cuts
    text = f"{r.family}: {r.outcome.value} ({_short(what, 120)}) {r.seconds:.1f} s"
    if r.gate is not None:
        kind, shown = judge(r)
        text += f"; gate: {kind} ({_short(shown, 160)}) {r.gate.seconds:.1f} s"
        text += f"; STALE, the gate's static codes: {r.gate.static_codes}" if stale(r) else ""
    return text


NOT_RERUN = "not re-run"  # a result saved before the attention column: its run predates it


def load(path: Path) -> dict[str, Result]:
    """Results saved with ``--json``; one saved before the attention column says
    :data:`NOT_RERUN` there."""
    data = json.loads(path.read_text(encoding="utf-8"))
    results = {}
    for item in data["results"]:
        item.setdefault("attention", NOT_RERUN)
        item["outcome"], item["exported"] = Outcome(item["outcome"]), Exported(item["exported"])
        item.pop("evidence", None)  # saved for readers; judged again from the gate run
        gate = item.get("gate")
        item["gate"] = GateRun(**gate) if gate else None
        results[item["family"]] = Result(**item)
    return results


def save(path: Path, results: Sequence[Result], version: str) -> None:
    rows = [{**asdict(r), "evidence": evidence_text(r)} for r in results]
    data = {"transformers": version, "results": rows}
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="TYPE", help="these families only")
    parser.add_argument("--jobs", type=int, default=1, help="families run at once (default 1)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds per family")
    parser.add_argument(
        "--load", type=Path, nargs="+", metavar="FILE",
        help="start from saved results (a later file's result of a family wins)",
    )  # fmt: skip
    parser.add_argument(
        "--evidence", action="store_true",
        help="gate the families that need it (proven, or a GC401/GC402 finding) and have "
        "no gate run yet: the --only ones, else every family",
    )  # fmt: skip
    parser.add_argument(
        "--gate", nargs="+", metavar="TYPE",
        help="gate these families (again), without re-running their map",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, metavar="FILE", help="save the results")
    parser.add_argument("--write", action="store_true", help="rewrite the coverage page's table")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    import transformers

    known = families()
    unknown = sorted(set(args.only or ()).union(args.gate or ()) - set(known))
    if unknown:
        print(f"coverage: not a causal-LM family: {', '.join(unknown)}", file=sys.stderr)
        return 2
    results = {}
    for path in args.load or ():
        results.update(load(path))

    def keep(result: Result) -> None:  # a sweep cut short keeps what it has judged
        results[result.family] = result
        if args.json:
            save(args.json, [results[n] for n in known if n in results], transformers.__version__)

    names = args.only or ([] if args.load else known)
    results.update(run_all(names, args.jobs, args.timeout, keep))  # a new map: no gate run
    gated = to_gate(results, args.only or known, args.evidence, args.gate or ())
    results.update(
        run_all(
            gated, args.jobs, args.timeout, keep, lambda name: run_gate(results[name], args.timeout)
        )
    )
    ordered = [results[name] for name in known if name in results]
    table = markdown(ordered, transformers.__version__)
    if args.json:
        save(args.json, ordered, transformers.__version__)
    if args.write:
        missing = [name for name in known if name not in results]
        if missing:
            print(f"coverage: --write needs every family; {len(missing)} missing "
                  f"({', '.join(missing[:5])}...): run without --only, or --load FILE",
                  file=sys.stderr)  # fmt: skip
            return 2
        text = README.read_text(encoding="utf-8")
        README.write_text(rewrite(text, table), encoding="utf-8")
    else:
        sys.stdout.write(table)
    print(summary(ordered))
    stale_rows = [r.family for r in ordered if stale(r)]
    if stale_rows:
        print(f"the gate's static codes differ from the map row (re-run with --only): "
              f"{' '.join(stale_rows)}")  # fmt: skip
    return 0


def to_gate(
    results: dict[str, Result], names: Sequence[str], evidence: bool, forced: Sequence[str]
) -> list[str]:
    """The families to gate: ``forced`` ones that need it; with ``evidence``, those of
    ``names`` that need it and have no gate run."""
    chosen = [n for n in forced if n in results and needs_gate(results[n])]
    if evidence:
        chosen += [
            n for n in names
            if n in results and needs_gate(results[n]) and results[n].gate is None
        ]  # fmt: skip
    return list(dict.fromkeys(chosen))


if __name__ == "__main__":
    sys.exit(main())
