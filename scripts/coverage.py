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

``exported`` says whether the export went through, else which step failed. ``attention``
says which attention the proof ran through: ``varlen`` (graphcheck_varlen, a varlen kernel
fed the document boundaries; N calls), ``sdpa`` or ``eager`` (the family's own attention),
``refused`` (graphcheck_varlen would drop what the family passes: a bias, appended keys, a
mask its own code reads; the details name it), or ``-`` (not exported).

    .venv/bin/python scripts/coverage.py --only llama gpt2        # print their rows
    .venv/bin/python scripts/coverage.py --write --json docs/coverage.json   # every family
    .venv/bin/python scripts/coverage.py --load docs/coverage.json --only gpt2 --write

``--load FILE...`` starts from saved results (a later file's result of a family wins) and
re-runs only the ``--only`` families; a result saved before the attention column says ``not
re-run`` there. ``--write`` replaces the table between ``<!-- coverage:begin -->`` and
``<!-- coverage:end -->`` in README.md and needs a result for every family.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
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
README = ROOT / "README.md"
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


class Exported(StrEnum):
    YES = "yes"
    BUILD = "no (build failed)"
    LAYOUT = "no (layout not found)"
    EXPORT = "no (export failed)"
    NO = "no"


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


# --- the table -----------------------------------------------------------------------------


def summary(results: Iterable[Result]) -> str:
    """``196 families: 120 all cuts proven, 40 true finding, 36 unsupported; attention: 150
    varlen, 6 refused, 40 -``."""
    results = list(results)
    counts = Counter(r.outcome for r in results)
    parts = ", ".join(f"{counts[o]} {o}" for o in Outcome)
    kinds = Counter(r.attention.split(" ×")[0] for r in results)
    attention = ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())
    return f"{len(results)} families: {parts}; attention: {attention}"


def markdown(results: Sequence[Result], version: str) -> str:
    """The table: one row per family, with a summary line above it."""
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
        *refusals(results),
        "| family | exported | attention | cuts proven | outcome | details |",
        "|---|---|---|---|---|---|",
    ]
    rows += [_row(r) for r in results]
    return "\n".join(rows) + "\n"


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
    cells = (f"`{r.family}`", exported, r.attention, r.cuts, r.outcome.value, _details(r))
    return "| " + " | ".join(cells) + " |"


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
    nice = [shutil.which("nice"), "-n", "10"] if shutil.which("nice") else []
    argv = [*nice, sys.executable, "-m", "graphcheck", "map", f"hf:{family}", "--format", "json"]
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error"}
    start = time.perf_counter()
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env
        )
    except subprocess.TimeoutExpired:
        return classify(family, None, "", "", timeout)
    return classify(family, done.returncode, done.stdout, done.stderr, time.perf_counter() - start)


def run_all(
    names: Sequence[str], jobs: int, timeout: float, done: Callable[[Result], None] | None = None
) -> dict[str, Result]:
    """Every family of ``names``, ``jobs`` at a time; progress on stderr, and each result
    to ``done`` as it comes in."""
    results: dict[str, Result] = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(run, name, timeout): name for name in names}
        for future in as_completed(futures):
            result = future.result()
            results[result.family] = result
            if done is not None:
                done(result)
            print(f"[{len(results)}/{len(names)}] {_progress(result)}", file=sys.stderr, flush=True)
    return results


def _progress(r: Result) -> str:
    what = _details(r) if r.outcome is not Outcome.PROVEN else r.cuts
    return f"{r.family}: {r.outcome.value} ({_short(what, 120)}) {r.seconds:.1f} s"


NOT_RERUN = "not re-run"  # a result saved before the attention column: its run predates it


def load(path: Path) -> dict[str, Result]:
    """Results saved with ``--json``; one saved before the attention column says
    :data:`NOT_RERUN` there."""
    data = json.loads(path.read_text(encoding="utf-8"))
    results = {}
    for item in data["results"]:
        item.setdefault("attention", NOT_RERUN)
        item["outcome"], item["exported"] = Outcome(item["outcome"]), Exported(item["exported"])
        results[item["family"]] = Result(**item)
    return results


def save(path: Path, results: Sequence[Result], version: str) -> None:
    data = {"transformers": version, "results": [asdict(r) for r in results]}
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
    parser.add_argument("--json", type=Path, metavar="FILE", help="save the results")
    parser.add_argument("--write", action="store_true", help="rewrite README.md's table")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    import transformers

    known = families()
    unknown = sorted(set(args.only or ()) - set(known))
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
    results.update(run_all(names, args.jobs, args.timeout, keep))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
