"""``--format text``: the report a person reads in a terminal.

``verify`` shows each cut's crossing set and the diagnostics, ``map`` one line
per boundary and the first finding of each illegal one, ``gate`` the static verdict
next to the executed comparisons, ``check`` and ``lock`` each check under a heading (a
line per proven plan, the whole report of a failing one) and the lock's changes. The
header names the program proven (``train mode``: ``model.train()``, or ``eval mode``).

A finding that repeats (the same code, source line and message at every layer or
cut) is shown once with what it covers (:func:`graphcheck.diagnostics.group`):
``GC401 varlen-metadata-not-consumed · layers 0-7 · 8 findings``. Findings kept out
of the verdict (``--ignore``, ``--select``, ``# graphcheck: ignore``) are counted at
the end, with the ignore comments that matched nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from graphcheck._version import __version__
from graphcheck.diagnostics import Group, Verdict, counted, group, spans
from graphcheck.results.values import Role

if TYPE_CHECKING:
    from graphcheck.diagnostics import Diagnostic
    from graphcheck.planning.plan import Stage
    from graphcheck.project.check import CheckResult
    from graphcheck.project.diff import Change
    from graphcheck.project.record import PlanResult
    from graphcheck.report import PlanReport, Report
    from graphcheck.results.gate import (
        ByteCheck,
        GateReport,
        GradientCheck,
        IsolationCheck,
        TrainCheck,
    )
    from graphcheck.results.values import CrossingValue

__all__ = ["headline", "render"]


def headline(result: Report | PlanReport | GateReport | CheckResult) -> str:
    """The verdict in one line, as ``--output FILE`` prints it on stdout: the verdict
    line of a verify or gate report (the proof's, for a plan), a map's legal cuts.

    >>> from graphcheck.report import Report
    >>> headline(Report(model="m.py:f", num_layers=2, mode="verify"))
    'PASS (0/0 cuts proven)'
    """
    if result.kind == "map":
        legal = ", ".join(map(str, result.legal_cuts())) or "none"
        return f"{'PASS' if result.exit_code == 0 else 'FAIL'} — legal cuts: {legal}"
    if result.kind == "plan":
        return headline(result.proof) if result.plan is not None else "FAIL (no legal plan)"
    if result.kind == "verify":
        return f"{result.verdict.upper()} ({result.summary()})"
    if result.kind == "check":
        return _check_summary(result).removeprefix("verdict: ").rstrip("\n")
    return _summary(result).removeprefix("verdict: ")


def render(result: Report | PlanReport | GateReport | CheckResult) -> str:
    if result.kind == "check":
        return render_check(result)
    if result.kind == "map":
        return render_map(result)
    if result.kind == "plan":
        return render_plan(result)
    if result.kind == "verify":
        return render_text(result)
    return render_gate_text(result)


def _header(report: Report) -> list[str]:
    lines = [
        f"graphcheck {__version__} · {report.model} · {report.program_mode} mode · "
        f"{report.num_layers} layers · {report.nodes} nodes · "
        f"export {report.export_seconds:.1f} s · total {report.seconds:.1f} s"
    ]
    lines += [_tokens_line(report.tokens)] if report.tokens else []
    lines += (
        [_programs_line(report.tokens["programs"])] if (report.tokens or {}).get("programs") else []
    )
    lines += [attention_line(report.attention)] if report.attention else []
    lines += [kernel_line(k) for k in report.kernels]
    lines += [_stand_ins_line(report.stand_ins)] if report.stand_ins else []
    return lines + ([backward_line(report.backward)] if report.backward is not None else [])


def _stand_ins_line(names: list[str]) -> str:
    """The kernels the model called that were proven through their stand-ins.

    >>> print(_stand_ins_line(["mylib:fused_norm"]))
      stand-ins (proven in place of the model's kernels): mylib:fused_norm
    """
    return f"  stand-ins (proven in place of the model's kernels): {', '.join(names)}"


def backward_line(backward: dict) -> str:
    """Whether the training step's backward program was proven (train mode).

    >>> print(backward_line({"checked": False}))
      backward: not proven (--backward proves the training step's gradients too)
    >>> print(backward_line({"checked": True, "proven": True, "ops": 1995, "seconds": 6.4}))
      backward: proven (1995 ops, 6.4 s)
    """
    if not backward["checked"]:
        return "  backward: not proven (--backward proves the training step's gradients too)"
    why = backward.get("why") or "see GC401"
    said = "proven" if backward["proven"] else f"NOT proven ({why})"
    ops = f" ({backward['ops']} ops, {backward['seconds']} s)" if backward.get("ops") else ""
    ran = backward.get("validated") or []
    run = f"; its own backward run token-local: {', '.join(ran)}" if ran else ""
    return f"  backward: {said}{ops}{run}"


def kernel_line(check: dict) -> str:
    """A custom op held to its trust by executing it.

    >>> kernel_line({"op": "mylib::rms_norm", "claim": "token-local", "status": "validated",
    ...              "detail": "", "cached": True})
    '  custom op mylib::rms_norm (token-local): validated by execution (perturb, shift; cached)'
    >>> kernel_line({"op": "mylib::attn", "claim": "document-local",
    ...              "status": "trusted, not verified", "detail": "no CPU implementation"})
    '  custom op mylib::attn (document-local): trusted, NOT verified: no CPU implementation'
    """
    status, detail = check["status"], check.get("detail", "")
    if status == "validated":
        cached = "; cached" if check.get("cached") else ""
        said = f"validated by execution (perturb, shift{cached})"
    elif status == "leaks":
        said = f"leaks when executed: {detail}"
    else:
        said = f"trusted, NOT verified: {detail}"
    return f"  custom op {check['op']} ({check['claim']}): {said}"


def attention_line(attention: dict) -> str:
    """Which attention the proof ran through.

    >>> attention_line({"kind": "varlen", "implementation": "graphcheck_varlen", "calls": 8})
    '  attention: varlen (graphcheck_varlen, 8 calls)'
    """
    calls = attention.get("calls")
    counted = f", {calls} call{'s' if calls != 1 else ''}" if calls is not None else ""
    return f"  attention: {attention['kind']} ({attention['implementation']}{counted})"


def _programs_line(programs: list[dict]) -> str:
    """The programs a proof split into, one per branch the model's code takes on T
    (:mod:`graphcheck.analysis.lengths`).

    >>> _programs_line([{"min": 2, "max": 128, "example": [7, 12, 10]},
    ...                 {"min": 129, "max": None, "example": [42, 44, 45]}])[51:]
    ': T 2..128 (traced on 29), T ≥ 129 (traced on 131)'
    """
    spans = ", ".join(
        (f"T ≥ {p['min']}" if p["max"] is None else f"T {p['min']}..{p['max']}")
        + (f" (traced on {sum(p['example'])})" if p.get("example") else "")
        for p in programs
    )
    return f"  in {len(programs)} programs, one per branch the code takes on T: {spans}"


def _tokens_line(tokens: dict) -> str:
    """For which T the proof holds, and the example batch it was traced on."""
    least = f" ≥ {tokens['min']}" if tokens.get("min") is not None else ""
    multiple = tokens["multiple_of"]
    which = f" that is a multiple of {multiple}" if multiple > 1 else ""
    docs = tokens["example"]
    documents = f"{len(docs)} document{'s' if len(docs) > 1 else ''}"
    lengths = ", ".join(map(str, docs))
    return f"  for every T{least}{which} (traced on {sum(docs)} tokens in {documents}: {lengths})"


def _stage_line(stage: Stage) -> str:
    layers = f"layers {stage.layers[0]}-{stage.layers[1]}" if stage.layers else "no layers"
    mods = f" + {', '.join(stage.modules)}" if stage.modules else ""
    return f"  stage {stage.index}: {layers}{mods}"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "    " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip()
        for r in rows
    ]


def _crossing_rows(crossing: list[CrossingValue]) -> list[str]:
    rows = [["value", "role", "dtype", "shape", "producer", "consumers"]]
    for c in crossing:
        shape = "[" + ", ".join(c.shape) + "]" if c.shape is not None else "-"
        more = f" +{len(c.consumers) - 2}" if len(c.consumers) > 2 else ""
        consumers = ", ".join(c.consumers[:2]) + more
        rows.append([c.node, c.role, c.dtype or "-", shape, c.producer, consumers or "-"])
    return _table(rows)


def _group_lines(g: Group) -> list[str]:
    """A finding, or a repeated one once with the layers or cuts it covers."""
    d, count = g.first, len(g.members)
    lines = [f"{d.code} {g.summary()}", f"    {d.message}"]
    if d.node or d.module:
        first = f" (the first of {count})" if count > 1 else ""
        lines.append(f"    at {d.node or '-'} in {d.module or '-'}{first}")
    if d.source:
        lines.append(f"    {d.source}")
    return lines


def _diagnostic_lines(d: Diagnostic) -> list[str]:
    return _group_lines(Group((d,)))


def _diagnostics(report: Report) -> list[str]:
    groups = group(report.diagnostics)
    count = len(report.diagnostics)
    folded = f" in {len(groups)} groups" if len(groups) not in (1, count) else ""
    lines = ["", f"diagnostics ({count}{folded}):" if count else "diagnostics: none"]
    for g in groups:
        lines.extend("  " + line for line in _group_lines(g))
    return lines


def _ignored_lines(report: Report) -> list[str]:
    """What was kept out of the verdict, and the ignore comments that matched nothing."""
    summary = report.ignored_summary()
    lines = [summary] if summary else []
    lines += [f"note: {u.message}" for u in report.unused_ignores]
    return lines


def _carries(state: dict | None) -> str:
    """`` · carries the residual bf16 [1, T, 64]`` (a declared state by its name)."""
    if state is None:
        return ""
    what = f"{state['name']} (declared)" if state["declared"] else "the residual"
    return f" · carries {what} {state['dtype']} [{', '.join(state['shape'])}]"


def _stage_programs_line(report: Report) -> list[str]:
    """``stage programs: 2 built by keep-index (the default), exported in 0.9 s, ...``, or
    why they were not proven."""
    proof = report.stage_proof
    if proof is None:
        return []
    if not proof.proven:
        return [f"  stage programs: not proven ({proof.reason})"]
    programs = report.stage_programs
    seconds = sum(p["export_seconds"] for p in programs)
    by = f" by {proof.builder}{' (the default)' if proof.default else ''}" if proof.builder else ""
    return [
        f"  stage programs: {len(programs)} built{by}, exported in {seconds:.1f} s, "
        f"{sum(p['nodes'] for p in programs)} nodes, compared layer by layer"
    ]


def render_text(report: Report) -> str:
    lines = _header(report)
    lines += [_stage_line(s) for s in report.stages]
    lines += _stage_programs_line(report)
    for cut in report.cuts:
        codes = f" ({', '.join(sorted(set(cut.codes)))})" if cut.codes else ""
        lines += ["", f"cut {cut.position}: {cut.verdict.upper()}{codes}{_carries(cut.state)}"]
        lines += _crossing_rows(cut.crossing)
    lines += _diagnostics(report)
    lines += ["", f"verdict: {report.verdict.upper()} ({report.summary()})"]
    ignored = _ignored_lines(report)
    lines += ["", *ignored] if ignored else []
    return "\n".join(lines) + "\n"


def _first_findings(report: Report) -> list[str]:
    """Each illegal boundary's first finding, with its message (a finding repeated at
    consecutive boundaries once, for the boundaries it spoils)."""
    firsts = [
        next(d for d in report.errors if d.cut == cut.position)
        for cut in report.cuts
        if cut.verdict == Verdict.FAIL
    ]
    lines = []
    for g in group(firsts):
        where = f"cut{'s' if len(g.members) > 1 else ''} {spans(g.covers('cut'))}"
        lines.append(f"  {where}: {g.first.code} {g.first.message}")
        if g.first.source:
            lines.append(f"      {g.first.source}")
    return ["", "first finding at each illegal boundary:", *lines] if lines else []


def _map_codes(cut) -> str:
    """A boundary's codes; ``(GC205 ignored)`` when ignored findings alone are there."""
    codes = ",".join(sorted(set(cut.codes))) or "-"
    return f"({','.join(cut.ignored)} ignored)" if cut.ignored and not cut.codes else codes


def render_map(report: Report) -> str:
    """One line per boundary: verdict, codes and what crosses; then the first finding at
    each illegal boundary."""
    width = max([11, *(len(_map_codes(cut)) for cut in report.cuts)])
    lines = [*_header(report), "", f"  cut  verdict  {'codes':<{width}}  activations crossing"]
    for cut in report.cuts:
        acts = [c for c in cut.crossing if c.role == Role.ACTIVATION]
        wire = ", ".join(f"{c.node}:{c.dtype}" for c in acts) or "-"
        codes = _map_codes(cut)
        lines.append(f"  {cut.position:>3}  {cut.verdict.upper():<7}  {codes:<{width}}  {wire}")
    lines += _first_findings(report)
    whole = [d for d in report.diagnostics if d.cut is None]
    if whole:
        lines += [
            "",
            f"whole-program findings ({len(whole)}); no cut is legal until they are fixed:",
        ]
        for g in group(whole):
            lines.extend("  " + line for line in _group_lines(g))
    ignored = _ignored_lines(report)
    lines += ["", *ignored] if ignored else []
    legal = report.legal_cuts()
    lines += ["", f"legal cuts: {', '.join(map(str, legal)) if legal else 'none'}"]
    return "\n".join(lines) + "\n"


def _amount(value: float, metric: str) -> str:
    text = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"
    return text + (" FLOPs/token" if metric == "flops" else " bytes")


def _plan_header(report: PlanReport) -> list[str]:
    chunks = report.stages * report.virtual
    what = f"{report.stages} stage{'s' if report.stages > 1 else ''}"
    if report.virtual > 1:
        what += f" x {report.virtual} virtual ({chunks} chunks)"
    doc = report.costs.doc_length
    cost = (
        f"FLOPs per token (attention at documents of {doc} tokens)"
        if report.metric == "flops"
        else "parameter bytes"
    )
    blocked = ", ".join(f"{b['position']} ({','.join(b['codes'])})" for b in report.blocking)
    lines = [
        f"graphcheck {__version__} plan · {report.model} · {report.num_layers} layers · "
        f"{what} · cost: {cost}",
        f"  legal boundaries: {', '.join(map(str, report.legal)) or 'none'}",
    ]
    if blocked:
        lines.append(f"  illegal boundaries: {blocked}")
    lines += _legal_by_ignore(report)
    if report.whole_program:
        lines.append(f"  whole-program findings spoil every cut: {', '.join(report.whole_program)}")
    uncounted = [
        f"{c.name}: {', '.join(c.uncounted)}"
        for c in (report.costs.first, *report.costs.layers, report.costs.last)
        if c.uncounted
    ]
    if uncounted and report.metric == "flops":
        lines.append("  not counted (sizes not a multiple of T): " + "; ".join(uncounted))
    return lines


def _legal_by_ignore(report: PlanReport) -> list[str]:
    """``legal only because GC201 is ignored: 1, 2, 3``: boundaries the plan may use only
    because their findings are ignored."""
    by_codes: dict[tuple[str, ...], list[int]] = {}
    for b in report.legal_by_ignore:
        by_codes.setdefault(tuple(b["codes"]), []).append(b["position"])
    return [
        f"  legal only because {', '.join(codes)} {'is' if len(codes) == 1 else 'are'} "
        f"ignored: {', '.join(map(str, positions))}"
        for codes, positions in by_codes.items()
    ]


def _chunk_lines(report: PlanReport) -> list[str]:
    stages = report.proof.stages if report.proof is not None else []
    rows = []
    for stage, cost in zip(stages, report.plan.stage_costs, strict=False):
        name = (
            f"stage {stage.index}"
            if report.virtual == 1
            else f"chunk {stage.index} (rank {stage.index % report.stages})"
        )
        rows.append(
            [
                _stage_line(stage).replace(f"stage {stage.index}", name, 1).strip(),
                _amount(cost, report.metric),
            ]
        )
    lines = _table(rows) if rows else []
    if report.virtual > 1:
        ranks = report.plan.per_rank(report.stages)
        lines.append("    per rank: " + ", ".join(_amount(r, report.metric) for r in ranks))
    return lines


def _cuts_flag(found) -> str:
    return f"--cuts {','.join(map(str, found.cuts))}" if found.cuts else "no cuts"


def render_plan(report: PlanReport) -> str:
    """The plan, each stage's cost, the imbalance against the legality-blind optimum, and
    the proof of the plan (its ``verify`` report); or why no legal plan exists."""
    lines = _plan_header(report)
    blind = report.blind
    blind_text = (
        f"the best plan ignoring legality ({_cuts_flag(blind)}): imbalance {blind.imbalance:.2f}"
    )
    if report.plan is None:
        needed = report.stages * report.virtual - 1
        lines += [
            "",
            f"no legal plan: {needed} cut{'s' if needed != 1 else ''} needed, "
            f"{len(report.legal)} legal boundar{'ies' if len(report.legal) != 1 else 'y'}; "
            "fix the findings at the illegal boundaries above (graphcheck map shows them) "
            "or plan fewer stages",
            f"  {blind_text}",
            "",
            "verdict: FAIL (no legal plan)",
        ]
        return "\n".join(lines) + "\n"
    lines += [
        "",
        f"plan: {_cuts_flag(report.plan)} · imbalance {report.plan.imbalance:.2f} (max/mean)",
        f"  {blind_text}",
        *_chunk_lines(report),
        "",
        f"proof of the plan ({_cuts_flag(report.plan)}):",
        "",
        render_text(report.proof).rstrip("\n"),
    ]
    return "\n".join(lines) + "\n"


def _bytes_line(check: ByteCheck) -> str:
    if check.status == "equal":
        return "staged vs uncut: EQUAL (torch.equal on the logits)"
    if check.status == "blocked":
        return f"staged vs uncut: CANNOT RUN ({check.message})"
    first = check.first_diff or {}
    where = (
        f"first at token {first['token']} (document {first['document']}, position "
        f"{first['position']}), logit {first['column']}"
        if first
        else check.message
    )
    return f"staged vs uncut: DIFFER (max abs diff {check.max_abs_diff:.4g}; {where})"


def _isolation_line(check: IsolationCheck) -> str:
    n = check.documents
    if not check.forward_holds:
        return f"document isolation: FAIL ({_crossings(check.perturb, check.shift)}{_alone(check)})"
    if n < 2:
        return f"document isolation: BITWISE (shift, {n} document: nothing to perturb)"
    return f"document isolation: BITWISE (perturb and shift, {n} documents{_alone(check)})"


def _crossings(*checks) -> str:
    """``perturb: ...; max abs diff ...`` for every exact test that failed."""
    parts = []
    for check in checks:
        if check is not None and check.crossing is not None:
            crossing = check.crossing
            diff = f"; max abs diff {crossing.max_abs_diff:.2g}" if crossing.max_abs_diff else ""
            parts.append(f"{check.test}: {crossing.describe()}{diff}")
    return " | ".join(parts)


def _alone(check: IsolationCheck) -> str:
    """Each document alone against packed, when it is not bitwise (information only)."""
    alone = check.alone
    if alone is None or alone.status == "bitwise":
        return ""
    return (
        f"; alone vs packed differs by max rel {alone.max_rel_diff:.2g} at document "
        f"{alone.worst_document}, information only"
    )


def _gradient_line(check: GradientCheck) -> str:
    if check.message:
        return f"gradients: CANNOT RUN ({check.message})"
    if check.holds:
        return (
            "gradients: ISOLATED (each document's loss: input gradients under perturb and "
            f"shift, {check.parameters} parameter gradients under perturb)"
        )
    return f"gradients: FAIL ({_crossings(check.perturb, check.shift)})"


def _train_line(check: TrainCheck) -> str:
    if check.status == "equal":
        return (
            f"after one SGD step: EQUAL ({check.parameters} parameters and the logits of a "
            "second forward)"
        )
    if check.status == "blocked":
        return f"after one SGD step: CANNOT RUN ({check.message})"
    names = ", ".join(check.differing[:3]) + (", ..." if len(check.differing) > 3 else "")
    params = f"{len(check.differing)}/{check.parameters} parameters differ"
    detail = f"{params} (max abs diff {check.max_abs_diff:.4g}: {names})" if names else params
    return f"after one SGD step: DIFFER ({detail}; second forward {check.logits_after})"


def _handover_lines(report: GateReport) -> list[str]:
    lines = []
    for h in report.handovers:
        if h.node is None:
            lines.append(f"  cut {h.cut}: no activation may cross (the proof found no residual)")
            continue
        shape = "[" + ", ".join(h.shape) + "]" if h.shape else ""
        note = f" (rounded from {h.dtype})" if h.rounded else ""
        lines.append(f"  cut {h.cut}: hands over {h.node} {shape} as bf16 bytes{note}")
    return lines


_BYTES = {"equal": "bytes equal", "differ": "bytes differ", "blocked": "a stage cannot run"}
_TRAINED = {
    "equal": "equal after a step",
    "differ": "differ after a step",
    "blocked": "no training step",
}


def _summary(report: GateReport) -> str:
    isolation = report.isolation
    isolated = "documents isolated" if isolation.forward_holds else "documents not isolated"
    if isolation.gradients is not None:
        isolated += (
            ", gradients isolated" if isolation.gradients.holds else (", gradients not isolated")
        )
    static = report.static_verdict.upper()
    agree = "agrees with" if report.agrees else "CONTRADICTS"
    what = f"{_BYTES[report.bytes.status]}, {isolated}"
    if report.train is not None:
        what += ", " + _TRAINED[report.train.status]
    return f"verdict: {report.verdict.upper()} ({what}; {agree} the static proof: {static})"


def render_gate_text(report: GateReport) -> str:
    tokens = sum(report.docs)
    lines = [
        f"graphcheck {__version__} gate · {report.model} · {report.program_mode} mode · "
        f"{report.num_layers} layers · seed {report.seed} · "
        f"{len(report.docs)} documents, {tokens} tokens · "
        f"total {report.seconds.get('total', 0.0):.1f} s"
    ]
    lines += [_stage_line(s) for s in report.stages]
    codes = f" ({', '.join(report.static_codes)})" if report.static_codes else ""
    lines += ["", f"static proof: {report.static_verdict.upper()}{codes}"]
    if report.mode == "graph":
        lines.append("stages run: the exported uncut graph partitioned by the proof, in-process")
    elif report.stage_builder:
        lines.append(
            f"stages run: stage builder {report.stage_builder}, one fresh process per stage, "
            "weights from the uncut checkpoint"
        )
    shape = report.compared.get("shape")
    shape = f" [{', '.join(map(str, shape))}]" if shape else ""
    lines.append(f"compared: {report.compared['what']}{shape}")  # --head / --output-fqn
    lines += _handover_lines(report)
    if not report.export_faithful:
        lines.append("note: the exported uncut program itself differs from the model here")
    lines += ["", _bytes_line(report.bytes), _isolation_line(report.isolation)]
    if report.isolation.gradients is not None:
        lines.append(_gradient_line(report.isolation.gradients))
    if report.train is not None:
        lines.append(_train_line(report.train))
    lines += ["", _summary(report)]
    return "\n".join(lines) + "\n"


# --- graphcheck check and lock: each check's plans, the lock's changes ------------------


def _change_lines(change: Change) -> list[str]:
    mark = "✗" if change.fails else "·"
    model = f"{change.model}: " if change.model else ""
    lines = [f"  {mark} {model}{change.message}"]
    return lines + ([f"      at {change.source}"] if change.source else [])


def _check_summary(result: CheckResult) -> str:
    reports = result.reports
    proven = sum(r.verdict == Verdict.PASS for _, _, r in reports)
    errors = sum(run.error is not None for run in result.runs)
    parts = [counted(len(result.runs), "check"), f"{proven}/{len(reports)} plans proven"]
    parts += [f"{errors} could not run"] if errors else []
    if result.diff is not None:
        failing = sum(c.fails for c in result.diff.changes)
        parts.append(f"lock: {counted(len(result.diff.changes), 'change')}, {failing} failing")
    if result.wrote is not None:
        parts.append(f"wrote {result.wrote.name}")
    elif result.command == "lock":
        parts.append("graphcheck.lock left as it was: a check could not run")
    return f"verdict: {result.verdict.upper()} · " + " · ".join(parts) + "\n"


def _plan_line(plan: str, report: PlanResult) -> str:
    """A plan in one line (a proven one, or any under ``lock``): ``cuts 3: PASS (1/1 cuts
    proven; 2 stage programs, 0 differences)``, and what it ignored on the next; a failing
    plan under ``check`` gets its whole text report instead."""
    codes = ", ".join(report.errors)
    line = f"  {plan}: {report.verdict.upper()} ({report.summary})"
    ignored = f"      {report.ignored}\n" if report.ignored else ""
    return line + (f" {codes}\n" if codes else "\n") + ignored


def render_check(result: CheckResult) -> str:
    out = []
    for run in result.runs:
        out.append(f"== {run.check.name} ({run.check.model}) ==\n")
        if run.error is not None:
            out.append(f"error: {run.error}\n")
        for plan, report in run.reports.items():
            if result.command == "lock" or report.verdict == Verdict.PASS:
                out.append(_plan_line(plan, report))
            else:
                out.append(f"-- {plan} --\n{report.text}")
    if result.diff is not None:
        out.append(f"== lock: {counted(len(result.diff.changes), 'change')} ==\n")
        lines = [line for c in result.diff.changes for line in _change_lines(c)]
        out.append("\n".join(lines or ["  no change"]) + "\n")
    if result.update and result.diff is not None and result.diff.exit_code:
        out.append("(--update: the lock now records these changes)\n")
    return "".join(out) + _check_summary(result)
