"""Ask a config, run it for real, tell the result: until the budget or the space runs out.

Optuna in ask-and-tell form (trials run out of process). A proposal that breaks a rule or repeats
a config with a verdict is pruned with its reason at no budget; one that runs, told as it went."""

from __future__ import annotations

import dataclasses
import random
import time
import warnings

import optuna

from autotune import runner as trials
from autotune.errors import InputError
from autotune.estimate.calibration import Calibration, default_calibration
from autotune.estimate.predict import estimate
from autotune.estimate.ranking import memory_reason, memory_verdicts
from autotune.launchers import Launcher
from autotune.problem import Problem
from autotune.space import TrainConfig, config_key, first_violation
from autotune.space.table import ConfigTable
from autotune.study.choices import StudySpace
from autotune.study.leaders import confirm_leaders
from autotune.study.parity_runs import ParityRuns, users_config
from autotune.study.record.storage import (
    StudyRef,
    ask_held,
    fail_abandoned_trials,
    held_until_told,
)
from autotune.study.record.trial_attrs import ONE_KNOB, PREDICTED, SEEDED_BY, Prediction, Pruned
from autotune.study.record.verdicts import (
    AWAIT_S,
    best_value,
    budget_taken,
    claim,
    in_flight,
    skip,
    verdicts,
)
from autotune.study.search.guided.search import GuidedSearch
from autotune.study.search.proposals import Proposer
from autotune.study.search.samplers import ENQUEUEING
from autotune.study.settings import SearchSettings, StudyOutcome
from autotune.study.slice.confirm import (
    confirm_full,
    learn_scale,
    repeat_full_winner,
    slice_run,
    was_probed,
)
from autotune.study.trial_run import Progress, StudyRun, run_one, stop_after
from autotune.study.verdict import reference
from autotune.study.verdict.confirm import best_step_time
from autotune.study.verdict.noise import (
    early_stop_margin,
    length_spread,
    study_spread,
    trial_precision,
)
from autotune.study.verdict.parity_cause import Causes, allowed_rows, read_causes
from autotune.trial.spec import ParityPlan, StepPlan
from autotune.units import human_duration, knob_text

SEEDS = 3
"""Top predicted configs a new study runs first."""
MAX_MISSES = 25
"""Proposals in a row that cannot run before the loop picks an unmeasured config itself."""


def run_study(
    problem: Problem,
    study: optuna.Study,
    *,
    ref: StudyRef,
    launcher: Launcher,
    progress: Progress,
    settings: SearchSettings,
    measured: tuple[TrainConfig, trials.TrialRecord] | None = None,
) -> StudyOutcome:
    """Search until the budget, the space or (guided) the stop rule says so; then, if asked,
    re-measure the leaders that are within noise of each other. `measured`: a config already
    run in full (the run that read the user's model), taken as its trial when proposed."""
    search = _Search(problem, study, ref, launcher, progress, settings, measured)
    with held_until_told(study):
        reason = search.run()
        confirmations = confirm_leaders(search)
        if search.parity is not None and search.study_run.slice is None:
            confirmations += search.parity.check_winner(search.time_left)
        if settings.slice is not None:
            run, space, left = search.study_run, search.space, search.time_left
            confirmations += confirm_full(run, space, settings, left)
            confirmations += repeat_full_winner(run, space, settings, left)
    return StudyOutcome(
        ran=search.ran,
        finished_total=len(search.seen),
        stop_reason=reason,
        resumed_failed=search.resumed_failed,
        confirmations=confirmations,
    )


class _Search:
    """One run of the loop: the plan, what the study has seen, and the steps of a pass."""

    def __init__(
        self,
        problem: Problem,
        study: optuna.Study,
        ref: StudyRef,
        launcher: Launcher,
        progress: Progress,
        settings: SearchSettings,
        measured: tuple[TrainConfig, trials.TrialRecord] | None = None,
    ) -> None:
        self.problem, self.study, self.launcher = problem, study, launcher
        self.measured = {config_key(measured[0]): measured[1]} if measured else {}
        """Configs run before the search began, each taken as its trial once."""
        self.progress, self.settings, self.budget = progress, settings, settings.budget
        sliced = slice_run(problem, study, settings.slice, self.calibration)
        self.study_run = StudyRun(
            problem, ref, study, launcher, progress, settings.budget.timeout_per_trial_s, sliced
        )
        valid = problem.enumerate().require_some().valid
        self.space = StudySpace.from_valid(valid)
        self.space.bind(study)
        self.valid = valid
        self.cal = settings.calibration or default_calibration(
            problem.cluster.device.generation, problem.engine.traits
        )
        self.ranked = memory_verdicts(
            problem.workload, problem.cluster, problem.engine.traits, valid, self.cal
        )
        if not self.ranked:
            raise InputError(
                f"none of the {len(valid)} valid configs is predicted to fit in "
                f"{problem.cluster.device.memory_bytes / 2**30:.1f} GiB per device"
            )
        self.guide = (
            GuidedSearch(
                problem,
                self.ranked.fastest_first,
                self.cal,
                settings.seed,
                stop_risk=settings.budget.effort.stop_risk,
            )
            if settings.strategy == "guided"
            else None
        )
        self.users = users_config(problem, study, valid)
        self.parity = self._parity_runs()
        self.proposer = Proposer(study, self.ranked, self.guide, cluster=problem.cluster)
        self._seed_from_plan()
        self.resumed_failed = fail_abandoned_trials(study)
        self.seen = verdicts(study)
        self.causes: Causes | None = None
        self._learn_causes()
        self.rng = random.Random(settings.seed)
        self.misses, self.ran, self.start, self._scaled = 0, 0, time.monotonic(), False

    def _parity_runs(self) -> ParityRuns | None:
        """The trials parity asks, where the study knows the user's config."""
        if (users := self.users) is None:
            return None
        p, steps, launch = self.problem.workload.precision, self.settings.steps, self._launch
        return ParityRuns(self.study, self.space, users, steps, p, launch, self.valid)

    def calibration(self) -> Calibration:
        """The study's current fit: the guided search's, or the plan's."""
        return self.guide.calibration if self.guide is not None else self.cal

    def _seed_from_plan(self) -> None:
        """A new study under an Optuna sampler starts, after the user's config (the
        reference's), where the model expects the best."""
        s = self.settings
        if s.strategy in ENQUEUEING or not s.seed_from_plan:
            return
        if not self.study.get_trials(deepcopy=False):
            for e in self.ranked[:SEEDS]:
                self.study.enqueue_trial(
                    self.space.params(e.config), user_attrs={SEEDED_BY: "plan"}
                )

    def run(self) -> str:
        """Passes until a budget, the space or the stop rule ends the search; why it ended.
        A resumed slice study whose probes ran searches under their miss from the start."""
        if was_probed(self.study) and self.guide is not None:
            self.guide.learn(self.study.get_trials(deepcopy=False))  # the study's fit first
            self._rescaled()
        reason = self.budget_reason()
        while reason is None:
            if self.parity is not None:
                acted, record = self.parity.reference()
                if acted:
                    self.ran += record is not None
                    fault = record and stop_after(self.study_run, record)
                    reason = fault or self.refreshed()
                    continue
                if one := self.parity.one_knob(self.causes, set(self.seen)):
                    knob, config = one
                    self.study.enqueue_trial(
                        self.space.params(config), user_attrs={ONE_KNOB: knob}
                    )
                    reason = self.one_pass()
                    continue
            if self.settings.strategy in ENQUEUEING:
                proposal, reason = self.proposer.next_config(self.seen)
                if proposal is None and reason and self._rescaled():
                    reason = None
                    continue
                if proposal is None:
                    reason = self._held_back(reason)
                    break
                attrs = self.proposer.chosen_for(proposal)
                self.study.enqueue_trial(self.space.params(proposal), user_attrs=attrs)
            elif self.misses >= MAX_MISSES:  # the sampler keeps proposing what cannot run
                untried = [
                    c
                    for c in self.ranked.configs
                    if config_key(c) not in self.seen
                    and (self.causes is None or self.causes.allows(c))
                ]
                if not untried:
                    reason = "search space exhausted: every config left changes the training"
                    break
                self.study.enqueue_trial(self.space.params(self.rng.choice(untried)))
                self.misses = 0
            reason = self.one_pass()
        return reason or ""

    def _held_back(self, reason: str | None) -> str | None:
        """Why the search ends when nothing is left to propose: every config left changes
        the training, where parity holds knobs back."""
        held = self.causes.held() if self.causes is not None else {}
        if not held or reason is None or not reason.startswith("search space exhausted"):
            return reason
        kept = ", ".join(f"{k}={knob_text(k, v)}" for k, v in held.items())
        return f"search space exhausted: every config left that keeps {kept} (yours) ran"

    def _learn_causes(self) -> None:
        """What breaks parity, as the trials tell it now; the search holds it."""
        self.causes = c = read_causes(self.study) if self.users is not None else None
        if c is not None:
            if self.guide is not None:
                table = ConfigTable.of(self.guide.candidates)  # the ranked table itself
                self.guide.restrict(allowed_rows(table, c))
            proposer = self.proposer
            self.proposer = dataclasses.replace(proposer, allows=c.allows, explore=c.wants_more)

    def _rescaled(self) -> bool:
        """Once, in a slice study about to stop: go on under its probes' scale miss."""
        if self._scaled or self.guide is None:
            return False
        self._scaled = True
        best = learn_scale(self.study_run, self.space, self.settings, self.guide, self.time_left)
        self.proposer = dataclasses.replace(self.proposer, best=best or self.proposer.best)
        return best is not None

    def one_pass(self) -> str | None:
        """Ask one config; skip it with its reason or run it. Every pass ends by re-reading
        every worker's verdicts, so a config another worker has just measured is known
        instead of proposed, refused as claimed, and proposed again."""
        with warnings.catch_warnings():  # heartbeats outside Study.optimize: ours, by design
            warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)
            trial = ask_held(self.study, self.space.distributions)
        config = self.space.config(trial.params, self.problem.cluster.world_size)
        key = config_key(config)
        why = self.rejection(config, key, one_knob=ONE_KNOB in trial.user_attrs)
        if why is not None:
            self.misses += 1
            skip(self.study, trial, Pruned.REJECTED, why)
            return self.refreshed()
        self.misses = 0
        owner = claim(self.study, trial, key)
        if owner is not None:  # another worker took the same config a moment earlier
            if self.settings.strategy in ENQUEUEING:
                self.proposer.gave_way.add(trial.number)
            skip(self.study, trial, Pruned.CLAIMED, f"config claimed by trial {owner}")
            return self.refreshed()
        if (n := self.budget.trials) is not None and budget_taken(self.study, n, trial.number):
            why = f"trial budget of {n} taken by other workers"
            skip(self.study, trial, Pruned.CLAIMED, why)
            return self.refreshed()
        record = self.measure(trial, config, key)
        return stop_after(self.study_run, record) or self.refreshed()

    def rejection(self, config: TrainConfig, key: str, one_knob: bool = False) -> str | None:
        """Why a proposal is not run: a broken rule, a move that changes the training (not
        for the one-knob trial that tells which move does), predicted not to fit, or
        measured."""
        p = self.problem
        broken = first_violation(config, p.workload, p.cluster, p.rules)
        if broken is not None:
            return f"rule {broken.name}: {broken.reason}"
        changes = self.causes.why_not(config) if self.causes is not None else None
        if changes is not None and not one_knob:
            return changes
        e = estimate(p.workload, config, p.cluster, p.engine.traits, self.cal)
        if not e.fits:
            return memory_reason(e, p.cluster.device)
        if key in self.seen:
            return f"config already measured in trial {self.seen[key]}"
        return None

    def measure(self, trial: optuna.Trial, config: TrainConfig, key: str) -> trials.TrialRecord:
        """Run the config as this trial, with the model's prediction beside it."""
        best = self.best_step_time()
        margin = self.budget.early_stop_margin
        steps = dataclasses.replace(
            self.settings.steps,
            precision=self.trial_precision(),
            best_s=best[0] if best else None,
            margin=(
                early_stop_margin(margin, self.study, best[1] if best else 1)
                if margin is not None
                else None
            ),
        )
        if ONE_KNOB in trial.user_attrs:  # it decides a cause: judged over the whole band
            steps = reference.reference_plan(steps)
        record = self._launch(trial, config, key, steps, self.parity_plan())
        self.ran += 1
        return record

    def _launch(
        self,
        trial: optuna.Trial,
        config: TrainConfig,
        key: str,
        steps: StepPlan,
        parity: ParityPlan,
    ) -> trials.TrialRecord:
        """Run the config as this trial for `steps`, with the model's prediction beside it;
        what it teaches of parity learnt at once."""
        p = self.problem
        cal = self.guide.calibration if self.guide is not None else self.cal
        predicted = estimate(p.workload, config, p.cluster, p.engine.traits, cal)
        prediction = Prediction(
            predicted.step.total_s, predicted.memory.total, predicted.step.as_dict()
        )
        trial.set_user_attr(PREDICTED, prediction.as_attr())
        measured = self.measured.pop(key, None)
        record = run_one(self.study_run, trial, config, key, steps, measured, parity)
        self.progress.finished(trial.number, config.label(), record, best_value(self.study))
        fail_abandoned_trials(self.study)  # other workers that died meanwhile
        self._learn_causes()
        return record

    def parity_plan(self) -> ParityPlan:
        """The user's curve and floors, for a trial to stop once its loss leaves them."""
        return self.parity.plan() if self.parity is not None else ParityPlan()

    def refreshed(self) -> str | None:
        """Every worker's verdicts read again, and whether the budget is spent."""
        self.seen = verdicts(self.study)
        return self.budget_reason()

    def budget_reason(self) -> str | None:
        b = self.budget
        if b.trials is not None and len(self._await_others(b.trials)) >= b.trials:
            return f"trial budget reached ({len(self.seen)} trials)"
        if b.max_time_s is not None and not self.time_left():
            return f"time budget reached ({human_duration(b.max_time_s)})"
        if len(self.seen) >= len(self.ranked):
            n = len(self.ranked)
            return f"search space exhausted: all {n} valid configs that fit were measured"
        return None

    def _await_others(self, budget: int) -> dict[str, int]:
        """The verdicts, once the budget is spent, or has room left beside the trials other
        workers run: while those would spend it, wait for them rather than stop (one whose
        worker dies leaves its trial to this one) or run one more."""
        limit = self.budget.max_time_s
        while 0 < budget - len(self.seen) <= in_flight(self.study, self.seen):
            if limit is not None and time.monotonic() - self.start >= limit:
                break
            time.sleep(AWAIT_S)
            fail_abandoned_trials(self.study)
            self.seen = verdicts(self.study)
        return self.seen

    def best_step_time(self, besides: int | None = None) -> tuple[float, int] | None:
        """`best_step_time`, but None in a slice study: its trials' step times are of
        slices, shallower proxies and full-size launches, not one job's."""
        if self.study_run.slice is not None:
            return None
        return best_step_time(self.study, besides)

    def trial_precision(self) -> float:
        """The step plan's precision, loosened to the study's between-trial spread."""
        between = length_spread(study_spread(self.study), self.launcher.source == "measured")
        return trial_precision(self.settings.steps.precision, between)

    def time_left(self) -> bool:
        """Whether `--max-time` leaves time for another trial (always, without one)."""
        limit = self.budget.max_time_s
        return limit is None or time.monotonic() - self.start < limit
