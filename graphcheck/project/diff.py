"""A run compared with ``graphcheck.lock``, in words.

Per model: the layers whose program changed (the op-level difference of the locked op
list and the current one, by :class:`difflib.SequenceMatcher`, with the model source
line of the changed op; consecutive layers with the same change grouped), the
boundaries whose verdict changed (both ways), the wire every cut hands over when its
shape changed (``[1, T, H]`` to the flat ``[T, H]``), the plans whose verdict changed; a
change of library versions or of source files alone is said as such.

A :class:`Change` that ``fails`` makes ``check --locked`` exit 1: a layer program
changed (or the program of the input modules, the output modules or the model-level code
between them), a boundary or a plan that was proven no longer is, the wire changed shape
(every stage's receive buffer with it), a model or plan the lock does not hold (the lock
is stale). The rest informs (exit 0).

>>> describe_ops([["aten.add.Tensor", "bf16[T]"]], [["aten.add.Tensor", "bf16[T]", "alpha=2"]])
('aten.add.Tensor alpha absent → 2', 0)
>>> describe_ops([["aten.mm", "bf16[T]"]], [["aten.mm", "bf16[T]"], ["aten.add.Tensor", "bf16[T]"]])
('new aten.add.Tensor after aten.mm', 1)
>>> span([3, 4, 5]), span([5])
('layers 3-5', 'layer 5')
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from enum import StrEnum

from graphcheck.project.lockfile import ModelState

__all__ = ["Change", "ChangeKind", "LockDiff", "describe_ops", "diff_lock", "span"]


class ChangeKind(StrEnum):
    """What a change is about."""

    VERSIONS = "versions"
    SOURCES = "sources"
    LAYER = "layer"
    EDGE = "edge"  # the input modules, the model-level code, the output modules
    BOUNDARY = "boundary"
    FINDINGS = "findings"
    PLAN = "plan"
    MODEL = "model"


@dataclass(frozen=True)
class Change:
    """One difference between the lock and this run."""

    kind: ChangeKind
    model: str | None
    message: str
    fails: bool = False
    source: str | None = None  # the model's source line responsible, ``file.py:N: code``

    def as_dict(self) -> dict:
        return {
            "kind": str(self.kind),
            "model": self.model,
            "message": self.message,
            "fails": self.fails,
            "source": self.source,
        }


@dataclass
class LockDiff:
    """Every change found; exit status 1 when one of them fails."""

    changes: list[Change]
    kinds: tuple[ChangeKind, ...] = tuple(ChangeKind)  # every kind a change can be

    @property
    def exit_code(self) -> int:
        return 1 if any(c.fails for c in self.changes) else 0

    def as_dict(self) -> dict:
        return {
            "verdict": "changed" if self.exit_code else "unchanged",
            "changes": [c.as_dict() for c in self.changes],
        }


def span(layers: list[int]) -> str:
    """``layer 5`` or ``layers 12-47`` (consecutive indices)."""
    return f"layer {layers[0]}" if len(layers) == 1 else f"layers {layers[0]}-{layers[-1]}"


def _names(ops: list[list[str]]) -> str:
    """The op names of ``ops``, each once with its count: ``aten.to.dtype ×2, aten.add``."""
    counts: dict[str, int] = {}
    for op in ops:
        counts[op[0]] = counts.get(op[0], 0) + 1
    return ", ".join(f"{k} ×{n}" if n > 1 else k for k, n in counts.items())


def _args(op: list[str]) -> dict[str, str]:
    found = dict(part.split("=", 1) for part in op[2:])
    return {"result": op[1], **found}


def _replaced(old: list[str], new: list[str]) -> str:
    if old[0] != new[0]:
        return f"{old[0]} replaced by {new[0]}"
    a, b = _args(old), _args(new)
    keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
    return f"{old[0]} " + ", ".join(
        f"{k} {a.get(k, 'absent')} → {b.get(k, 'absent')}" for k in keys
    )


def describe_ops(old: list[list[str]], new: list[list[str]]) -> tuple[str, int | None]:
    """The difference of two op lists in words, and the index in ``new`` of the op that
    locates it (``None`` when nothing in ``new`` does)."""
    a, b = [tuple(op) for op in old], [tuple(op) for op in new]
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    words, where = [], None
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            words += [
                _replaced(old[i], new[j]) for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
            ]
        elif tag == "delete":
            words.append(f"{_names(old[i1:i2])} removed" + _near(b, j1))
        else:
            if tag == "replace":
                words.append(f"{_names(old[i1:i2])} removed")
            after = f" after {new[j1 - 1][0]}" if j1 else " at the start"
            words.append(f"new {_names(new[j1:j2])}{after}")
        if where is None:
            where = j1 if j1 < len(new) else (j1 - 1 if j1 else None)
    if not words:
        return "same ops, wired differently or reading other values", None
    shown = words[:3] + ([f"and {len(words) - 3} more"] if len(words) > 3 else [])
    return "; ".join(shown), where


def _near(new: list[tuple], j: int) -> str:
    return f" before {new[j][0]}" if j < len(new) else " at the end"


def _line(state: ModelState, part: int | str, at: int | None) -> str | None:
    """The model source line of op ``at`` of a layer or edge in this run, if known."""
    lines = state.lines.get(part, [])
    return lines[at] if at is not None and at < len(lines) else None


def _layer_changes(name: str, old: dict, state: ModelState) -> list[Change]:
    new = state.entry
    locked = {i: fp for i, fp, _ in old.get("layers", [])}
    found: list[tuple[int, str, str | None]] = []
    for i, fingerprint, _ in new["layers"]:
        if i not in locked:
            found.append((i, "new layer (the lock has none at this index)", None))
        elif locked[i] != fingerprint:
            before = old["programs"].get(locked[i], [])
            words, at = describe_ops(before, new["programs"][fingerprint])
            found.append((i, words, _line(state, i, at)))
    gone = sorted(set(locked) - {i for i, _, _ in new["layers"]})
    found += [(i, "layer removed (the lock has it, this run does not)", None) for i in gone]
    return [
        Change(ChangeKind.LAYER, name, f"{span(layers)}: {words}", True, where)
        for layers, words, where in _grouped(found)
    ]


_EDGE_NAMES = {"input": "input modules", "glue": "model-level code", "output": "output modules"}


def _edge_changes(name: str, old: dict, state: ModelState) -> list[Change]:
    """The input modules, the model-level code and the output modules, as layers are."""
    locked = dict(old.get("edges", []))
    changes = []
    for edge, fingerprint in state.entry["edges"]:
        if locked.get(edge) == fingerprint:
            continue
        before = old["programs"].get(locked.get(edge), [])
        words, at = describe_ops(before, state.entry["programs"][fingerprint])
        message = f"{_EDGE_NAMES.get(edge, edge)}: {words}"
        changes.append(Change(ChangeKind.EDGE, name, message, True, _line(state, edge, at)))
    return changes


def _grouped(found: list[tuple[int, str, str | None]]):
    """Consecutive layers with the same change and source line, as one group."""
    groups: list[tuple[list[int], str, str | None]] = []
    for i, words, where in sorted(found, key=lambda f: f[0]):
        last = groups[-1] if groups else None
        if last and last[0][-1] == i - 1 and (last[1], last[2]) == (words, where):
            last[0].append(i)
        else:
            groups.append(([i], words, where))
    return groups


def _verdict(verdict: str, codes: list[str], what: str) -> str:
    legal = {"boundary": ("legal", "illegal"), "plan": ("proven", "fails")}[what]
    word = legal[0] if verdict == "pass" else legal[1]
    return f"{word} ({', '.join(codes)})" if codes else word


def _boundary_changes(name: str, old: dict, new: dict) -> list[Change]:
    locked = {b[0]: b for b in old.get("boundaries", [])}
    changes = []
    for position, verdict, codes, crossing in new["boundaries"]:
        was = locked.get(position)
        if was is None or (was[1], was[2]) == (verdict, codes):
            continue
        before, after = _verdict(was[1], was[2], "boundary"), _verdict(verdict, codes, "boundary")
        fails = was[1] == "pass" and verdict == "fail"
        acts = [c.removeprefix("activation ") for c in crossing if c.startswith("activation ")]
        more = f"; activations crossing now: {', '.join(acts)}" if fails and acts else ""
        message = f"boundary {position}: {before} → {after}{more}"
        changes.append(Change(ChangeKind.BOUNDARY, name, message, fails))
    return changes


def _residual_changes(name: str, old: dict, new: dict) -> list[Change]:
    """The wire every cut hands over, when it changed (a lock that does not record it,
    written before it was recorded, says nothing)."""
    before, after = old.get("residual"), new.get("residual")
    if before is None or after is None or before == after:
        return []
    message = (
        f"the wire every cut hands over: {before} → {after}; every stage's receive "
        "buffer changes with it"
    )
    return [Change(ChangeKind.BOUNDARY, name, message, True)]


def _plan_changes(name: str, old: dict, new: dict) -> list[Change]:
    locked = {p[0]: p for p in old.get("plans", [])}
    dropped = sorted(set(locked) - {p[0] for p in new["plans"]})
    changes = [
        Change(ChangeKind.PLAN, name, f"plan {plan} is in the lock but no longer checked")
        for plan in dropped
    ]
    for plan, verdict, codes in new["plans"]:
        was = locked.get(plan)
        if was is None:
            message = f"plan {plan} is not in the lock: run graphcheck lock (or check --update)"
            changes.append(Change(ChangeKind.PLAN, name, message, True))
        elif (was[1], was[2]) != (verdict, codes):
            before, after = _verdict(was[1], was[2], "plan"), _verdict(verdict, codes, "plan")
            fails = verdict == "fail"
            changes.append(Change(ChangeKind.PLAN, name, f"plan {plan}: {before} → {after}", fails))
    return changes


def _findings_changes(name: str, old: dict, new: dict) -> list[Change]:
    before, after = old.get("findings", []), new["findings"]
    if before == after:
        return []
    added = sorted(set(after) - set(before))
    message = f"whole-program findings {', '.join(before) or 'none'} → {', '.join(after) or 'none'}"
    return [Change(ChangeKind.FINDINGS, name, message, bool(added))]


def _source_changes(name: str, old: dict, new: dict, programs_changed: bool) -> list[Change]:
    before, after = old.get("sources", {}), new["sources"]
    files = sorted(k for k in {*before, *after} if before.get(k) != after.get(k))
    if not files:
        return []
    what = "programs changed" if programs_changed else "programs unchanged"
    return [Change(ChangeKind.SOURCES, name, f"source changed ({', '.join(files)}), {what}")]


def _model_changes(name: str, old: dict, state: ModelState) -> list[Change]:
    new = state.entry
    changes = _layer_changes(name, old, state) + _edge_changes(name, old, state)
    changes += _residual_changes(name, old, new) + _boundary_changes(name, old, new)
    changes += _findings_changes(name, old, new)
    changes += _plan_changes(name, old, new)
    return _source_changes(name, old, new, bool(changes)) + changes


def _version_changes(old: dict, new: dict, others: list[Change]) -> list[Change]:
    moved = [f"{k} {old.get(k, '?')} → {v}" for k, v in sorted(new.items()) if old.get(k) != v]
    if not moved:
        return []
    alone = "; nothing else changed" if not others else ""
    message = f"library versions changed: {', '.join(moved)}{alone}"
    return [Change(ChangeKind.VERSIONS, None, message)]


def diff_lock(lock: dict, current: dict[str, str], states: dict[str, ModelState]) -> LockDiff:
    """``states`` (name -> this run's model state) compared with ``lock``; ``current`` the
    versions of this run. Models of the lock this run did not check are left alone."""
    changes: list[Change] = []
    for name, state in states.items():
        old = lock["models"].get(name)
        if old is None:
            message = "not in the lock: run graphcheck lock (or check --locked --update)"
            changes.append(Change(ChangeKind.MODEL, name, message, True))
            continue
        changes += _model_changes(name, old, state)
    return LockDiff(_version_changes(lock.get("versions", {}), current, changes) + changes)
