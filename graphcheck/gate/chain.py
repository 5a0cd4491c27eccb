"""The stage-process chain: every stage of a plan in its own fresh process
(:mod:`graphcheck.gate.runner`), chained by the bf16 bytes a rank sends the next.

A forward pass runs stage 0 to the last, each receiving only the previous stage's
output as bf16 bytes, of the shape the proof's wire has at that cut (``[1, T, H]``, the
flat ``[T, H]`` or a declared boundary state: another shape stops the run there); with
``train`` the backward pass runs from the last stage back to stage 0, each recomputing
its forward and handing the wire's gradient back as bf16 bytes, then a second forward
runs from the stepped parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from graphcheck import phases as progress
from graphcheck.errors import GateError, GraphcheckError
from graphcheck.gate.batch import PackedBatch
from graphcheck.gate.checks import train_check
from graphcheck.gate.messages import one_line
from graphcheck.gate.runner import Recipe, pack, run_stage, unpack
from graphcheck.gate.weights import model_logits
from graphcheck.model.boundary import WireShape
from graphcheck.planning.plan import StagePlan
from graphcheck.results.gate import Blocked, Handover, TrainCheck, TrainStatus
from graphcheck.stages.fresh import run_fresh

__all__ = ["StageChain", "StagePass", "in_fresh_process"]


@dataclass
class StagePass:
    """One pass through the stage processes: the logits or why not, and each result."""

    logits: torch.Tensor | None = None
    blocked: Blocked | None = None
    handovers: list[Handover] = field(default_factory=list)
    wires: list[torch.Tensor | None] = field(default_factory=list)
    results: dict[int, dict] = field(default_factory=dict)


class StageChain:
    """The stages of a plan, each run in its own fresh process, chained by bf16 bytes."""

    def __init__(
        self,
        recipe: Recipe,
        plan: StagePlan,
        batch: PackedBatch,
        workdir: str,
        wires: dict[int, WireShape] | None = None,
    ):
        """``wires``: cut -> the wire the proof says crosses it (unchecked where absent)."""
        self.recipe, self.plan, self.batch, self.workdir = recipe, plan, batch, workdir
        self.bounds = (0, *plan.cuts, plan.num_layers)
        self.last = plan.num_stages - 1
        self.wires = wires or {}

    def _job(self, index: int, checkpoint: str, wire, grad) -> dict:
        lo, hi = self.bounds[index], self.bounds[index + 1]
        return {
            "index": index,
            "layers": list(range(lo, hi)),
            "num_stages": self.plan.num_stages,
            "checkpoint": checkpoint,
            "wire": wire,
            "grad": grad,
        }

    def forward(self, checkpoints: list[str], train: bool = False) -> StagePass:
        """Stage 0 to the last, each receiving only the previous stage's bf16 output;
        with ``train`` the last stage also takes its backward and SGD step."""
        run = StagePass(wires=[None])
        with progress.phase(progress.Phase.STAGES, self.last + 1) as tick:
            return self._forward(run, checkpoints, train, tick)

    def _forward(self, run: StagePass, checkpoints: list[str], train: bool, tick) -> StagePass:
        for index in range(self.last + 1):
            grad = "loss" if train and index == self.last else None
            job = self._job(index, checkpoints[index], run.wires[-1], grad)
            result = in_fresh_process(run_stage, self.recipe, self.batch, job)
            tick(index + 1)
            if "raised" in result:
                run.blocked = Blocked(index, "", "", None, result["raised"])
                return run
            run.results[index] = result
            if index == self.last:
                run.logits = result["out"]
                return run
            wire, handover = _stage_handover(result["out"], self.bounds[index + 1])
            if (why := self._off_wire(index, wire)) is not None:
                run.blocked = Blocked(index, "", "", None, why)
                return run
            run.wires.append(wire)
            run.handovers.append(handover)
        return run

    def _off_wire(self, index: int, wire: torch.Tensor) -> str | None:
        """Why stage ``index``'s output is not the wire the proof has at its cut."""
        cut = self.bounds[index + 1]
        expected = self.wires.get(cut)
        sizes = expected.sizes(self.batch.tokens) if expected is not None else None
        if sizes is None or tuple(wire.shape) == sizes:
            return None
        return (
            f"stage {index} hands over {list(wire.shape)} at cut {cut}, but the wire the "
            f"proof has there is bf16 {expected.text} ({list(sizes)} on this batch); the "
            "next stage would run on another input than the one proven: return the "
            "residual as the uncut model lays it out"
        )

    def backward(self, first: StagePass, checkpoint: str) -> str | None:
        """From the last stage back to stage 0: each recomputes its forward on the wire
        it received, back-propagates the wire's bf16 gradient and steps; ``None`` or why
        a stage could not."""
        grad = first.results[self.last].get("grad")
        for index in reversed(range(self.last)):
            if grad is None:
                return f"stage {index + 1} returned no gradient for its input wire"
            job = self._job(index, checkpoint, first.wires[index], grad)
            result = in_fresh_process(run_stage, self.recipe, self.batch, job)
            if "raised" in result:
                return result["raised"]
            first.results[index] = result
            grad = result.get("grad")
        return None

    def train_check(self, first: StagePass, uncut: dict) -> TrainCheck:
        """One step on the staged pipeline against the uncut model's step."""
        if first.blocked is not None:
            return TrainCheck(TrainStatus.BLOCKED, message=first.blocked.message)
        why = self.backward(first, uncut["checkpoint"])
        if why is not None:
            return TrainCheck(TrainStatus.BLOCKED, message=why)
        after = self.forward(self._stepped(first, uncut["checkpoint"]))
        if after.blocked is not None:
            return TrainCheck(TrainStatus.BLOCKED, message=after.blocked.message)
        return train_check(uncut, first.results, after.logits)

    def _stepped(self, first: StagePass, checkpoint: str) -> list[str]:
        """Per stage: the uncut checkpoint with that stage's stepped parameters."""
        base = torch.load(checkpoint, weights_only=True)
        paths = []
        for index in range(self.last + 1):
            path = str(Path(self.workdir) / f"stepped-{index}.pt")
            torch.save(base | first.results[index]["params"], path)
            paths.append(path)
        return paths


def in_fresh_process(fn, *args) -> dict:
    """``fn(*args)`` in a fresh process; an ``error`` it reports is a :class:`GateError`."""
    try:
        result = unpack(run_fresh(fn, pack(args)))
    except GraphcheckError as err:
        raise GateError(str(err)) from None
    except Exception as err:  # pickling a model, builder or result
        raise GateError(f"cannot run in a fresh process: {type(err).__name__}: "
                        f"{one_line(err)}; pass the model and the stage builder as "
                        "file.py:function specs") from None  # fmt: skip
    if "error" in result:
        raise GateError(result["error"])
    return result


def _stage_handover(out, cut: int) -> tuple[torch.Tensor, Handover]:
    """A stage's output as the bf16 bytes of its wire, and what crossed the cut."""
    value = model_logits(out)
    dtype = str(value.dtype).removeprefix("torch.")
    shape = [str(d) for d in value.shape]
    wire = value.detach().to(torch.bfloat16, copy=True).contiguous()
    return wire, Handover(cut, "stage output", dtype, shape, dtype != "bfloat16")
