"""How long a trial measures (autotune.trial.length, used by every worker's StepMeter): it
stops once its step time is precise or it surely cannot win, and never stops as slower a
trial that could still beat the best, on noisy replays of step times."""

import math
import random
import statistics

import torch

from autotune.rank.measure import StepMeter
from autotune.space import TrainConfig
from autotune.study.verdict.confirm import best_step_time
from autotune.study.verdict.noise import (
    UNKNOWN_BETWEEN,
    Spread,
    early_stop_margin,
    length_spread,
    trial_precision,
)
from autotune.trial.length import relative_halfwidth, stopped_for
from autotune.trial.spec import StepPlan
from tests.fakes import add_measured, new_study

PLAN = StepPlan()  # at least 3 measured steps, at most 8, 2% precision
BEST_S = 1.0
BAR = StepPlan(best_s=BEST_S, margin=0.10)  # the study's best so far, its 10% margin


def noisy_steps(rng: random.Random, true_s: float, n: int, spread: float = 0.05) -> list[float]:
    """Step times as this shared machine gives them: a few percent of jitter and now and
    then (one step in twenty) a step slowed by half by another process."""
    steps = []
    for _ in range(n):
        t = true_s * rng.lognormvariate(0.0, spread)
        steps.append(t * 1.5 if rng.random() < 0.05 else t)
    return steps


def measure(steps: list[float], plan: StepPlan) -> tuple[str | None, int]:
    """Replay steps one by one as the meter sees them: why and after how many it stops."""
    for n in range(1, len(steps) + 1):
        reason = stopped_for(steps[:n], plan)
        if reason is not None:
            return reason, n
    return None, len(steps)


def test_steady_steps_stop_as_soon_as_the_interval_is_tight() -> None:
    assert stopped_for([1.0, 1.0], PLAN) is None  # fewer than min_measured
    reason, n = measure([1.0, 1.01, 0.99, 1.0, 1.005, 1.0, 1.0, 1.0], PLAN)
    assert (reason, n) == ("precise", 4)


def test_noisy_steps_measure_up_to_the_cap() -> None:
    steps = [1.0, 1.3, 0.8, 1.2, 0.9, 1.25, 0.85, 1.1]
    assert measure(steps, PLAN) == ("cap", 8)
    assert relative_halfwidth(steps) > PLAN.precision


def test_precision_zero_measures_every_step() -> None:
    fixed = StepPlan(precision=0.0, measured_steps=5)
    assert measure([1.0] * 5, fixed) == ("cap", 5)


def test_one_slow_step_never_stops_a_trial_as_slower() -> None:
    steps = [0.9, 0.95, 5.0, 0.9, 0.92, 0.94, 0.9, 0.93]
    assert measure(steps, BAR)[0] != "slower"


def test_a_clearly_slower_trial_stops_at_the_fewest_steps() -> None:
    assert measure([1.5, 1.52, 1.49, 1.5, 1.51], BAR) == ("slower", 3)
    assert measure([1.3, 1.32, 1.25, 1.35, 1.28, 1.3], BAR)[1] <= 4  # slower, or ranked


def test_noisy_replays_never_stop_a_trial_that_could_still_win_as_slower() -> None:
    """10,000 replays of a config as fast as the best (it could win): none is cut short as
    slower; configs 30% slower end after about 5 steps instead of 8 (as slower, or ranked
    against the best by a looser interval)."""
    rng = random.Random(7)
    as_fast = [measure(noisy_steps(rng, BEST_S, 8), BAR) for _ in range(10_000)]
    assert not [r for r in as_fast if r[0] == "slower"]
    slow = [measure(noisy_steps(rng, BEST_S * 1.3, 8), BAR) for _ in range(1_000)]
    assert sum(n for _, n in slow) / len(slow) < 6


def test_a_settled_warm_up_window_counts_as_measured() -> None:
    meter = StepMeter(PLAN, torch.device("cpu"), None, collective=False)
    for seconds in (2.0, 1.0, 1.0):  # the first step is slow; the next two agree
        meter.record(seconds)
    assert meter.warmed_up and meter.warmup == [2.0] and meter.measured == [1.0, 1.0]
    assert meter.tally_next  # model states are tallied on the first step timed after it
    # The trial's time split shows the two carried steps as time measuring, not warming up.
    assert meter.warmup_ended_at(100.0) == 98.0
    meter.record(1.0)
    assert meter.done and meter.stopped_for == "precise" and len(meter.measured) == 3


def test_warm_up_keeps_a_falling_transient_out_and_ends_at_the_first_steady_step() -> None:
    """Steps falling 4x, 2x, then steady: the falling ones are warm-up, and warm-up ends at
    the first step that is not faster (a noisy one 9% faster included), instead of waiting
    for two noisy steps to agree within 10%."""
    meter = StepMeter(PLAN, torch.device("cpu"), None, collective=False)
    for seconds in (4.0, 2.0, 1.1, 1.0):
        assert not meter.warmed_up
        meter.record(seconds)
    assert meter.warmup == [4.0, 2.0] and meter.measured == [1.1, 1.0]


def test_a_step_slower_than_the_one_before_ends_warm_up_and_alone_counts() -> None:
    """A rise is not warm-up any more, but the step before it may have been: only the slower
    step is measured."""
    meter = StepMeter(PLAN, torch.device("cpu"), None, collective=False)
    for seconds in (1.0, 2.0):
        meter.record(seconds)
    assert meter.warmed_up and meter.warmup == [1.0] and meter.measured == [2.0]


def test_a_transient_that_outlasts_warm_up_is_not_measured() -> None:
    """Step times of a forked trial of a user's script (DeepSpeed, 1 s steps): two slow steps
    agree, which ends warm-up, then steps drop by a third. The slow ones are warm-up: the
    trial stops precise at the steady level instead of reading 10% slow and measuring to its
    cap of 8 steps."""
    meter = StepMeter(PLAN, torch.device("cpu"), None, collective=False)
    steps = iter((1.70, 1.53, 1.60, 1.09, 1.13, 1.07, 1.08, 1.10, 1.09, 1.08, 1.07))
    while not meter.done:
        meter.record(next(steps))
    assert meter.stopped_for == "precise" and len(meter.measured) < PLAN.measured_steps
    assert max(meter.measured) < 1.2 and meter.warmup[:3] == [1.70, 1.53, 1.60]
    assert meter.warmup_ended_at(100.0) <= 100.0


def test_one_slow_step_amid_steady_ones_stays_measured() -> None:
    meter = StepMeter(PLAN, torch.device("cpu"), None, collective=False)
    for seconds in (2.0, 1.0, 1.05, 1.6, 0.95, 1.0):
        meter.record(seconds)
    assert meter.measured == [1.0, 1.05, 1.6, 0.95, 1.0]


def test_warm_up_ends_at_its_time_cap_when_steps_never_settle() -> None:
    plan = StepPlan(max_warmup_s=3.0, max_warmup=12)
    meter = StepMeter(plan, torch.device("cpu"), None, collective=False)
    for seconds in (2.0, 1.0):  # 3 s of still-falling warm-up: the cap
        assert not meter.warmed_up
        meter.record(seconds)
    assert meter.warmed_up and len(meter.warmup) == 2
    for _ in range(3):
        meter.record(1.0)
    assert meter.done and meter.stopped_for == "precise"


def test_a_trial_far_from_the_best_is_ranked_by_a_looser_interval() -> None:
    """3% jitter: a config 10% slower than the best is ranked after 4 steps; one as fast as
    the best, or much faster (the new leader), measures on to the full precision."""
    jitter = [1.0, 1.03, 0.97, 1.02, 0.98, 1.01, 0.99, 1.0]
    near = StepPlan(best_s=1.0)
    assert measure(jitter, near)[1] >= 7
    assert measure([t * 1.1 for t in jitter], near) == ("precise", 4)
    assert measure([t * 0.7 for t in jitter], near)[1] >= 7


def test_early_stopping_never_prunes_a_config_racing_itself_on_a_noisy_cluster() -> None:
    """A config measured again against the best of four earlier launches of itself, on a
    cluster whose launches differ by 10%: it is no slower, and with the study's margin
    (`noise.early_stop_margin`) at most 5% of 2,000 such trials stop as slower; a fixed 10%
    margin, blind to that noise, cuts short one in seven."""
    study = new_study(between=0.10)
    margin = early_stop_margin(0.10, study)
    rng = random.Random(11)
    noise_aware, fixed = 0, 0
    for _ in range(2_000):
        best_s = min(rng.lognormvariate(0.0, 0.10) for _ in range(4))
        steps = noisy_steps(rng, rng.lognormvariate(0.0, 0.10), 8, spread=0.02)
        noise_aware += measure(steps, StepPlan(best_s=best_s, margin=margin))[0] == "slower"
        fixed += measure(steps, StepPlan(best_s=best_s, margin=0.10))[0] == "slower"
    assert noise_aware <= 100, noise_aware
    assert fixed >= 200, fixed


def test_a_config_as_fast_as_a_best_launched_eight_times_is_hardly_ever_stopped() -> None:
    """The best config launched eight times on a cluster whose launches differ by 10%: a
    trial of a config as fast is measured against the best's mean (the study's
    `best_step_time`), not its luckiest launch, and stops as slower in at most 2% of 500."""
    rng = random.Random(5)
    stopped = 0
    for _ in range(500):
        study = new_study(between=0.10)
        first = add_measured(study, 1000 / rng.lognormvariate(0.0, 0.10), TrainConfig(mbs=1))
        for _ in range(7):
            launch = rng.lognormvariate(0.0, 0.10)
            add_measured(
                study, 1000 / launch, TrainConfig(mbs=1), step_time_s=launch, confirms=first
            )
        best = best_step_time(study)
        assert best is not None and best[1] == 8
        plan = StepPlan(best_s=best[0], margin=early_stop_margin(0.10, study, best[1]))
        steps = noisy_steps(rng, rng.lognormvariate(0.0, 0.10), 8, spread=0.02)
        stopped += measure(steps, plan)[0] == "slower"
    assert stopped <= 10, stopped


def test_trials_measure_no_tighter_than_launches_differ() -> None:
    """Where launches differ by 10%, a trial held to the 2% precision runs to the cap on 5%
    jitter; held to the study's (`noise.trial_precision`) it stops after about half the
    steps, and its config's trial means, what every verdict stands on, spread hardly more."""
    loose = StepPlan(precision=trial_precision(0.02, length_spread(Spread(0.10, 20), True)))
    rng = random.Random(5)
    means: dict[str, list[float]] = {"tight": [], "loose": []}
    steps = {"tight": 0, "loose": 0}
    for _ in range(2_000):
        draw = noisy_steps(rng, rng.lognormvariate(0.0, 0.10), 8)
        for name, plan in (("tight", PLAN), ("loose", loose)):
            n = measure(draw, plan)[1]
            means[name].append(statistics.median(draw[:n]))
            steps[name] += n
    assert steps["loose"] <= 0.65 * steps["tight"], steps
    spread = {k: statistics.stdev(math.log(m) for m in v) for k, v in means.items()}
    assert spread["loose"] <= 1.05 * spread["tight"], spread


def test_a_spread_from_a_repeat_or_two_does_not_tighten_trials() -> None:
    """One repeat that happened to agree says little: trials keep a shared machine's 5% until
    the spread rests on four degrees of freedom; the model's trials, never measured, and a
    plan that measures every step keep the plan's precision."""
    assert length_spread(Spread(0.01, 1), measured=True) == UNKNOWN_BETWEEN
    assert length_spread(Spread(0.01, 20), measured=True) == 0.01
    assert length_spread(None, measured=True) == UNKNOWN_BETWEEN
    assert length_spread(None, measured=False) == 0.0
    assert trial_precision(0.02, 0.0) == 0.02
    assert trial_precision(0.0, 0.10) == 0.0
