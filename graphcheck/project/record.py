"""What one check of the configuration gives, in plain data: the same from a fresh run
and from the cache.

A check's :class:`~graphcheck.report.Report`\\ s hold the live FX nodes of their
crossing sets and do not outlive the process, so a check keeps, per plan, what
``check`` and ``lock`` print of it (:class:`PlanResult`: the verdict, the counts and
codes the summary lines and tables show, and the report rendered in each format
``check`` composes: text, Markdown, SARIF, JSON) and, when the lock is involved, the
model's lock entry with each op's source line
(:class:`~graphcheck.project.lockfile.ModelState`). Each format's reporter
(:func:`graphcheck.report.render`) composes a check from these alone, so a check
served from the cache (:mod:`graphcheck.cache.records`) prints the bytes its fresh run
printed.

:func:`record_plain` and :func:`record_of` convert a check's plain data to and from the
JSON the cache stores; :func:`record_of` raises :class:`ValueError` on anything
malformed (the cache then runs the check afresh). Nothing here imports torch.

>>> plan = PlanResult("pass", 0, 1, 1, (), (), "t", "m", "{}", "{}", "", "2 stage programs")
>>> plan.summary
'1/1 cuts proven; 2 stage programs'
>>> record_of(record_plain({"cuts 1": plan}, None), ["cuts 1"]) == ({"cuts 1": plan}, None)
True
>>> record_of(record_plain({"cuts 1": plan}, None), ["cuts 2"])
Traceback (most recent call last):
ValueError: the record holds plans ['cuts 1'], not ['cuts 2']
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from graphcheck.diagnostics import Verdict
from graphcheck.project.lockfile import ModelState, entry_problem

__all__ = ["PlanResult", "record_of", "record_plain"]

_VERDICTS = {"pass": 0, "fail": 1}  # a plan's verdict and its exit status


@dataclass(frozen=True)
class PlanResult:
    """One plan's verify report, as every output of ``check`` and the lock use it."""

    verdict: str  # "pass" or "fail"
    exit_code: int
    proven: int  # cuts proven
    cuts: int  # cuts in the plan
    errors: tuple[str, ...]  # codes of the errors, sorted, each once
    codes: tuple[str, ...]  # codes of every diagnostic (warnings too), sorted, each once
    text: str  # the report rendered by each reporter
    markdown: str
    sarif: str
    json: str
    ignored: str = ""  # the line saying what was ignored and by what ("": nothing)
    stages: str = ""  # the verdict line's words on the stage programs: proven, or why not

    @property
    def summary(self) -> str:
        """``1/1 cuts proven; 2 stage programs, 0 differences``: the verify verdict's words."""
        return "; ".join(p for p in (f"{self.proven}/{self.cuts} cuts proven", self.stages) if p)

    @classmethod
    def of(cls, report) -> PlanResult:
        """The plain form of a verify :class:`~graphcheck.report.Report`."""
        from graphcheck.report import render

        return cls(
            report.verdict,
            report.exit_code,
            sum(c.verdict == Verdict.PASS for c in report.cuts),
            len(report.cuts),
            tuple(sorted({d.code for d in report.errors})),
            tuple(sorted(report.codes)),
            *(render(report, fmt) for fmt in ("text", "markdown", "sarif", "json")),
            report.ignored_summary() or "",
            report.stage_summary() or "",
        )

    def as_plain(self) -> dict:
        """The result as JSON-ready data (lists for the codes)."""
        return {**asdict(self), "errors": list(self.errors), "codes": list(self.codes)}

    @classmethod
    def from_plain(cls, data: object) -> PlanResult:
        """The result stored as ``data`` (:meth:`as_plain`), checked."""
        if not isinstance(data, dict) or set(data) != {f.name for f in fields(cls)}:
            raise ValueError("a plan is not the fields of a plan result")
        lists = [data["errors"], data["codes"]]
        if not all(isinstance(v, list) and _strings(v) for v in lists):
            raise ValueError("a plan's codes are malformed")
        counts = [data[k] for k in ("exit_code", "proven", "cuts")]
        if not all(type(v) is int and v >= 0 for v in counts):
            raise ValueError("a plan's counts are malformed")
        verdict = data["verdict"]
        if not isinstance(verdict, str) or _VERDICTS.get(verdict) != data["exit_code"]:
            raise ValueError("a plan's verdict is malformed")
        texts = ("text", "markdown", "sarif", "json", "ignored", "stages")
        if not _strings([data[k] for k in texts]):
            raise ValueError("a plan's rendered reports are malformed")
        return cls(**{**data, "errors": tuple(data["errors"]), "codes": tuple(data["codes"])})


def _strings(values: list) -> bool:
    return all(isinstance(v, str) for v in values)


def _interned(lists: list[list[str | None]]) -> tuple[list[list[str | None]], list[int]]:
    """Each distinct list once, and the index of each list in them (layers share lines)."""
    table: list[list[str | None]] = []
    index: dict[tuple, int] = {}
    refs = []
    for each in lists:
        if tuple(each) not in index:
            index[tuple(each)] = len(table)
            table.append(list(each))
        refs.append(index[tuple(each)])
    return table, refs


def _state_plain(state: ModelState) -> dict:
    """A model state as JSON-ready data: its entry, each distinct list of source lines
    once, and ``[layer index or edge name, list index]`` per part."""
    keys = list(state.lines)
    table, refs = _interned([state.lines[k] for k in keys])
    parts = [[k, r] for k, r in zip(keys, refs, strict=True)]
    return {"entry": state.entry, "lines": table, "parts": parts}


def _state_of(data: object) -> ModelState:
    if not isinstance(data, dict) or entry_problem(data.get("entry")) is not None:
        raise ValueError("the lock entry is malformed")
    table, parts = data.get("lines"), data.get("parts")
    if not isinstance(table, list) or not isinstance(parts, list):
        raise ValueError("the source lines are malformed")
    lines: dict[int | str, list[str | None]] = {}
    for part in parts:
        if not (isinstance(part, list) and len(part) == 2 and isinstance(part[0], int | str)):
            raise ValueError("a part's source lines are malformed")
        key, ref = part
        if type(ref) is not int or not 0 <= ref < len(table) or not isinstance(table[ref], list):
            raise ValueError("a part's source lines are malformed")
        if not all(line is None or isinstance(line, str) for line in table[ref]):
            raise ValueError("a source line is malformed")
        lines[key] = list(table[ref])
    return ModelState(data["entry"], lines)


def record_plain(plans: dict[str, PlanResult], state: ModelState | None) -> dict:
    """A check's plan results and lock state as JSON-ready data."""
    return {
        "plans": [[name, result.as_plain()] for name, result in plans.items()],
        "state": _state_plain(state) if state is not None else None,
    }


def record_of(
    data: object, plan_names: list[str]
) -> tuple[dict[str, PlanResult], ModelState | None]:
    """The plan results (in ``plan_names``' order) and lock state of a stored record; a
    :class:`ValueError` when it is malformed or holds other plans."""
    if not isinstance(data, dict) or not isinstance(data.get("plans"), list):
        raise ValueError("the record has no list of plans")
    pairs = data["plans"]
    if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
        raise ValueError("a plan of the record is not [name, result]")
    names = [name for name, _ in pairs]
    if names != plan_names:
        raise ValueError(f"the record holds plans {names}, not {plan_names}")
    plans = {name: PlanResult.from_plain(result) for name, result in pairs}
    state = data.get("state")
    return plans, (_state_of(state) if state is not None else None)
