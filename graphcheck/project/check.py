"""``graphcheck check`` and ``graphcheck lock``: every check of the configuration.

Each check builds and exports its model once (an :class:`graphcheck.api.Explorer`) and
proves each of its plans on that export: a :class:`CheckResult` holds one
:class:`~graphcheck.project.record.PlanResult` per (model, plan), each verify report in
plain data. With the lock (``check --locked``, ``lock``, ``--update``) the same export
also gives the boundaries (the map's sweep) and the layer programs the lock records
(:mod:`graphcheck.project.lock`), compared with the lock in words
(:mod:`graphcheck.project.diff`).

With a cache folder each check is looked up first (:mod:`graphcheck.cache.records`,
keyed by :func:`cache_options`: the check's own resolved table, not the whole
configuration) and only the checks missing from it are built and exported; the
comparison with the lock always runs. This module imports the API (so torch) only for
a check it runs: a warm ``check --locked`` loads neither.

Exit status: the worst of the checks (0 every plan proven, 1 a finding, 2 a check that
could not run) and, with ``--locked`` but not ``--update``, 1 when the diff fails.
``lock`` exits 0 when it wrote the lock (failing verdicts are recorded, not failed on) and
2 when a check could not run (the lock is then left as it was).
Everything the configuration and the lock can get wrong is a usage error before any
model is built; a model that cannot be built or exported is exit 2 for its check, the
others still run.
"""

from __future__ import annotations

import contextlib
import json
import linecache
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from graphcheck.cache.records import check_entry
from graphcheck.errors import GraphcheckError, UsageError
from graphcheck.project.config import Check, Plan, PlanKind, load_config
from graphcheck.project.diff import LockDiff, diff_lock
from graphcheck.project.lockfile import ModelState, read_lock, versions, write_lock
from graphcheck.project.record import PlanResult, record_of, record_plain
from graphcheck.results.values import ResultKind

__all__ = ["CheckResult", "CheckRun", "cache_options", "run_check", "run_project"]

Fresh = Callable[[], AbstractContextManager]  # what a fresh run of a check runs inside


@dataclass
class CheckRun:
    """One check: its plan results by plan name, or the error that stopped it."""

    check: Check
    reports: dict[str, PlanResult] = field(default_factory=dict)
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
            "plans": [{"plan": k, "report": json.loads(r.json)} for k, r in self.reports.items()],
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
    kind: ResultKind = ResultKind.CHECK

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
    def reports(self) -> list[tuple[CheckRun, str, PlanResult]]:
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


def _prove(explorer, plan: Plan, check: Check):
    """The verify report of ``plan`` on ``explorer``'s export (an :class:`api.Explorer`)."""
    args = plan.arguments()
    cuts = explorer.written_cuts(args["cuts"], args["stages"], args["pipeline_layout"])
    if plan.kind is PlanKind.DECLARED and explorer.session.layout.layer_ranges is None:
        raise UsageError(
            f"check {check.name!r} gives no plan and the model declares no "
            "pipeline_layer_ranges: add cuts, stages or layout to it in the configuration"
        )
    return explorer.verify(
        cuts, args["stages"], stage_builder=check.stage_builder,
        require_stage_programs=check.require_stage_programs,
    )  # fmt: skip


def run_check(check: Check, folder: Path, with_state: bool) -> CheckRun:
    """Build and export ``check``'s model once, prove each plan; with ``with_state`` also
    the lock entry (boundaries, layer programs)."""
    from graphcheck import api

    run = CheckRun(check)
    linecache.checkcache()  # stack traces quote the model's lines as they are now
    options = dict(check.options)
    allow = options.pop("allow_fp32", ())
    codes = {k: list(v) for k, v in (("select", check.select), ("ignore", check.ignore)) if v}
    codes |= {"selectors_from": check.selectors_from} if codes else {}
    try:
        explorer = api.Explorer(check.model, allow_fp32=allow, **codes, **options)
        for plan in check.plans:
            run.reports[plan.name] = PlanResult.of(_prove(explorer, plan, check))
        if with_state:
            from graphcheck.project.lock import model_state

            run.state = model_state(explorer, check.model, check.options, run.reports, folder)
    except GraphcheckError as err:
        run.error = " / ".join([str(err), *err.detail])
    return run


def cache_options(check: Check, folder: Path) -> dict:
    """The options keying ``check``'s cache entry: its own table as resolved (file paths
    relative to the working directory or absolute, so the key hashes their content; the
    top-level ``select`` and ``ignore`` merged in, and the table they are read from: the
    reports name it) and the lock's ``folder`` (the lock's
    paths are relative to it). Not its name (a renamed check keeps its entry), nor the
    rest of the configuration (editing one check keeps the others' entries)."""
    return {
        "command": "check",
        "model": check.model,
        **check.options,
        "stage_builder": check.stage_builder,
        "require_stage_programs": check.require_stage_programs,
        "plans": [plan.name for plan in check.plans],
        "select": list(check.select),
        "ignore": list(check.ignore),
        "selectors_from": {"table": check.selectors_from},  # a mapping: never a file to hash
        "folder": str(folder),
    }


def _cached_check(
    check: Check, folder: Path, with_state: bool, cache: Path | None, fresh: Fresh
) -> CheckRun:
    """``check``'s run from the cache folder ``cache`` (``None``: no cache) when its entry
    holds what this run needs, else run inside ``fresh()`` and stored (not an error)."""
    entry = check_entry(cache, cache_options(check, folder)) if cache is not None else None
    names = [plan.name for plan in check.plans]

    def usable(data: object) -> CheckRun | None:
        plans, state = record_of(data, names)
        if with_state and state is None:
            return None  # stored by a check without the lock: run afresh for its entry
        return CheckRun(check, plans, state=state if with_state else None)

    hit = entry.load(usable, f"check {check.name!r}") if entry is not None else None
    if hit is not None:
        return hit
    with fresh():
        run = run_check(check, folder, with_state)
        if entry is not None:
            entry.depend()  # before the next check imports its own files
    if entry is not None and run.error is None:  # notes outside fresh(): they are seen
        entry.save(record_plain(run.reports, run.state), run.exit_code)
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
    cache: Path | None = None,
    fresh: Fresh = contextlib.nullcontext,
) -> CheckResult:
    """Run the checks of the configuration at ``config`` (found from the working
    directory when ``None``) that ``pattern`` selects. ``locked`` compares with the lock
    (a missing lock is a usage error, before any export, unless ``update``); ``update``
    or ``lock`` writes it: with ``pattern``, the checks not selected keep their entries;
    without, the lock holds exactly the configuration's checks. ``cache``: the cache
    folder (``None``: every check runs); ``fresh``: the context a check that runs afresh
    runs in (the command line's progress display and quiet torch)."""
    project = load_config(config)
    checks = project.selected(pattern)
    path = project.lock_path
    previous = read_lock(path) if locked and not (update and not path.exists()) else None
    if lock and path.exists():
        previous = _readable(path)
    with_state = locked or update or lock
    runs = [_cached_check(c, project.path.parent, with_state, cache, fresh) for c in checks]
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
