"""``graphcheck check`` and ``graphcheck lock``: every check of the configuration.

Each check builds and exports its model once (an :class:`graphcheck.api.Explorer`) and
proves each of its plans on that export: a :class:`CheckResult` holds one
:class:`~graphcheck.report.Report` per (model, plan). With the lock (``check --locked``,
``lock``, ``--update``) the same export also gives the boundaries (the map's sweep) and
the layer programs the lock records (:mod:`graphcheck.project.lock`), compared with
the lock in words (:mod:`graphcheck.project.diff`).

Exit status: the worst of the checks (0 every plan proven, 1 a finding, 2 a check that
could not run) and, with ``--locked`` but not ``--update``, 1 when the diff fails.
``lock`` exits 0 when it wrote the lock (failing verdicts are recorded, not failed on) and
2 when a check could not run (the lock is then left as it was).
Everything the configuration and the lock can get wrong is a usage error before any
model is built; a model that cannot be built or exported is exit 2 for its check, the
others still run.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass, field
from pathlib import Path

from graphcheck import api
from graphcheck.errors import GraphcheckError, UsageError
from graphcheck.project.config import Check, Plan, PlanKind, load_config
from graphcheck.project.diff import LockDiff, diff_lock
from graphcheck.project.lock import ModelState, model_state, read_lock, versions, write_lock
from graphcheck.report import Report

__all__ = ["CheckResult", "CheckRun", "run_check", "run_project"]


@dataclass
class CheckRun:
    """One check: its reports by plan name, or the error that stopped it."""

    check: Check
    reports: dict[str, Report] = field(default_factory=dict)
    error: str | None = None
    state: ModelState | None = None

    @property
    def exit_code(self) -> int:
        if self.error is not None:
            return 2
        return max((r.exit_code for r in self.reports.values()), default=0)

    def as_dict(self) -> dict:
        return {
            "name": self.check.name,
            "model": self.check.model,
            "verdict": ("error" if self.error else "fail" if self.exit_code else "pass"),
            "error": self.error,
            "plans": [{"plan": k, "report": r.as_dict()} for k, r in self.reports.items()],
        }


@dataclass
class CheckResult:
    """Every check run, the diff with the lock (``--locked``) and the lock written."""

    config: Path
    runs: list[CheckRun]
    diff: LockDiff | None = None
    wrote: Path | None = None
    update: bool = False
    command: str = "check"  # or "lock": the text output then lists verdicts only
    kind: str = "check"

    @property
    def exit_code(self) -> int:
        if self.command == "lock":
            return 0 if self.wrote is not None else 2
        worst = max((run.exit_code for run in self.runs), default=0)
        locked = self.diff.exit_code if self.diff is not None and not self.update else 0
        return max(worst, locked)

    @property
    def verdict(self) -> str:
        return {0: "pass", 1: "fail"}.get(self.exit_code, "error")

    @property
    def reports(self) -> list[tuple[CheckRun, str, Report]]:
        return [(run, plan, r) for run in self.runs for plan, r in run.reports.items()]

    def as_dict(self) -> dict:
        from graphcheck._version import __version__

        return {
            "graphcheck": __version__,
            "mode": "check",
            "config": str(self.config),
            "verdict": self.verdict,
            "checks": [run.as_dict() for run in self.runs],
            "lock": self.diff.as_dict() if self.diff is not None else None,
            "wrote": str(self.wrote) if self.wrote is not None else None,
        }


def _prove(explorer: api.Explorer, plan: Plan, check: Check) -> Report:
    """The verify report of ``plan`` on ``explorer``'s export."""
    args = plan.arguments()
    cuts = explorer.written_cuts(args["cuts"], args["stages"], args["pipeline_layout"])
    if plan.kind is PlanKind.DECLARED and explorer.session.layout.layer_ranges is None:
        raise UsageError(
            f"check {check.name!r} gives no plan and the model declares no "
            "pipeline_layer_ranges: add cuts, stages or layout to it in the configuration"
        )
    return explorer.verify(cuts, args["stages"], stage_builder=check.stage_builder)


def run_check(check: Check, folder: Path, with_state: bool) -> CheckRun:
    """Build and export ``check``'s model once, prove each plan; with ``with_state`` also
    the lock entry (boundaries, layer programs)."""
    run = CheckRun(check)
    linecache.checkcache()  # stack traces quote the model's lines as they are now
    options = dict(check.options)
    allow = options.pop("allow_fp32", ())
    codes = {k: list(v) for k, v in (("select", check.select), ("ignore", check.ignore)) if v}
    try:
        explorer = api.Explorer(check.model, allow_fp32=allow, **codes, **options)
        for plan in check.plans:
            run.reports[plan.name] = _prove(explorer, plan, check)
        if with_state:
            run.state = model_state(explorer, check.model, check.options, run.reports, folder)
    except GraphcheckError as err:
        run.error = " / ".join([str(err), *err.detail])
    return run


def _readable(path: Path) -> dict | None:
    """The lock ``graphcheck lock`` rewrites: ``None`` when it is not one (written anew)."""
    try:
        return read_lock(path)
    except UsageError:
        return None


def run_project(
    config: str | Path | None = None,
    pattern: str | None = None,
    *,
    locked: bool = False,
    update: bool = False,
    lock: bool = False,
) -> CheckResult:
    """Run the checks of the configuration at ``config`` (found from the working
    directory when ``None``) that ``pattern`` selects. ``locked`` compares with the lock
    (a missing lock is a usage error, before any export, unless ``update``); ``update``
    or ``lock`` writes it: with ``pattern``, the checks not selected keep their entries;
    without, the lock holds exactly the configuration's checks."""
    project = load_config(config)
    checks = project.selected(pattern)
    path = project.lock_path
    previous = read_lock(path) if locked and not (update and not path.exists()) else None
    if lock and path.exists():
        previous = _readable(path)
    runs = [run_check(c, project.path.parent, locked or update or lock) for c in checks]
    states = {run.check.name: run.state for run in runs if run.state is not None}
    result = CheckResult(project.path, runs, update=update, command="lock" if lock else "check")
    if locked and previous is not None:
        result.diff = diff_lock(previous, versions(), states)
    if (update or lock) and all(run.error is None for run in runs):
        kept = previous is not None and pattern is not None  # -k: the others keep theirs
        models = dict(previous["models"]) if kept else {}
        models.update({name: state.entry for name, state in states.items()})
        write_lock(path, models)
        result.wrote = path
    return result
