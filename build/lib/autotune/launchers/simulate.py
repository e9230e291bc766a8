"""The simulate launcher: no processes, the model's prediction written as the trial's result.

For planning a cluster one does not have. Everything it produces says `simulated`.
"""

from __future__ import annotations

import sys
import time

from autotune.errors import LaunchError
from autotune.estimate.calibration import Calibration
from autotune.estimate.predict import Estimate, estimate
from autotune.estimate.ranking import memory_reason
from autotune.estimate.traits import EngineTraits
from autotune.launchers.base import Launcher, LaunchOutcome, LaunchRequest, LaunchSettings
from autotune.problem import Problem
from autotune.trial.result import TrialResult
from autotune.trial.spec import TRIAL_FILE, TrialSpec


class SimulateLauncher(Launcher):
    name = "simulate"
    source = "simulated"

    def __init__(
        self, calibration: Calibration | None = None, traits: EngineTraits | None = None
    ) -> None:
        self.calibration = calibration
        self.traits = traits

    @classmethod
    def build(cls, settings: LaunchSettings) -> SimulateLauncher:
        return cls(settings.calibration, settings.traits)

    def narrow(self, problem: Problem) -> Problem:
        """The engine whose model predicts the trials, where the settings named none."""
        if self.traits is None:
            self.traits = problem.engine.traits
        return problem

    def command(self, request: LaunchRequest) -> list[str]:
        return [sys.executable, "-m", "autotune", "estimate", "--trial-file", TRIAL_FILE]

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        start = time.monotonic()
        spec = TrialSpec.from_json((request.folder / TRIAL_FILE).read_text())
        if self.traits is None:
            raise LaunchError("the simulate launcher was given no engine's traits to predict with")
        e = estimate(spec.workload, spec.config, spec.cluster, self.traits, self.calibration)
        if not e.fits:
            return LaunchOutcome(
                kind="oom",
                wall_s=time.monotonic() - start,
                error=f"simulated: {memory_reason(e, spec.cluster.device)}",
            )
        result = predicted_result(e)
        result.write(request.folder)
        return LaunchOutcome(kind="ok", error=None, wall_s=time.monotonic() - start, result=result)


def predicted_result(e: Estimate, world_size: int | None = None) -> TrialResult:
    """A trial's result as the model predicts it (`source: simulated`): what the simulate
    launcher reports, and what a slice study records for a config it ranks by the model."""
    return TrialResult(
        source="simulated",
        step_time_s=e.step.total_s,
        tokens_per_s=e.tokens_per_s,
        tflops_per_device=e.tflops_per_device,
        mfu=e.mfu,
        peak_memory_bytes=e.memory.total,
        model_state_bytes=e.memory.weights + e.memory.gradients + e.memory.optimizer,
        predicted=e.as_dict(),
        world_size=world_size,
    )
