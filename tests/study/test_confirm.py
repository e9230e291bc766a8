"""Which leaders get repeated, when the repeats stop, and which config stands: on step times
recorded by the DeepSpeed sweep and on small studies whose values are known."""

import dataclasses
import random
from itertools import count

import optuna
import pandas as pd

from autotune.space import TrainConfig, config_key
from autotune.study.record.trial_attrs import USERS_CONFIG, TrialAttrs
from autotune.study.verdict.confirm import confirm, contenders, standings
from autotune.study.verdict.effort import STANDARD, THOROUGH, Effort
from autotune.study.verdict.noise import study_spread
from autotune.study.verdict.winner import decide
from tests.fakes import add_measured, measured_attrs, new_study
from tests.paths import TESTS

SWEEP = TESTS / "data" / "sweep_deepspeed.csv"
"""A frozen copy of the DeepSpeed sweep (tests/data/README.md)."""
TOKENS_PER_STEP = 16 * 64  # the tiny workload
MBS = count(1)
LABELLED = {"stdev_s": 0.001, "label": True}
"""What these tests' trials record besides their throughput, as the study loop does."""


def study_of(rows: pd.DataFrame, between: float | None = None) -> optuna.Study:
    """The rows as measured trials; `between`: the cluster's between-trial spread, known from
    earlier studies (none: the study has not measured one yet)."""
    study = new_study(between)
    for row in rows.to_dict("records"):
        step, stdev = row["step_time_s"], row["step_time_stdev_s"]
        config = TrainConfig(mbs=next(MBS))
        add_measured(
            study, TOKENS_PER_STEP / step, config, step_time_s=step, stdev_s=stdev, label=True
        )
    return study


def recorded() -> pd.DataFrame:
    table = pd.read_csv(SWEEP)
    return table[table.status == "ok"].sort_values("step_time_s").reset_index(drop=True)


def trials(*rows: tuple[float, float], between: float | None = 0.05) -> optuna.Study:
    """A study of measured trials given as (step time s, its stdev s)."""
    return study_of(pd.DataFrame(rows, columns=["step_time_s", "step_time_stdev_s"]), between)


def firsts(study: optuna.Study) -> list[int]:
    return [s.first for s in contenders(study)]


def test_leaders_within_their_noise_are_repeated() -> None:
    # 1% behind the best, each step time within 0.5%: within the 2% floor of noise.
    assert firsts(trials((1.00, 0.005), (1.01, 0.005))) == [0, 1]
    # 5% behind, but its steps spread 3% (a 6% band): it may be as fast.
    assert firsts(trials((1.00, 0.005), (1.05, 0.0315))) == [0, 1]
    # 5% behind with steady steps: a second launch may land 5% away, so it is repeated too.
    assert firsts(trials((1.00, 0.005), (1.05, 0.005))) == [0, 1]
    # 20% behind on a cluster whose launches differ by 5%: surely slower, before any repeat.
    assert contenders(trials((1.00, 0.005), (1.25, 0.005))) == []


def test_before_the_spread_between_launches_is_known_the_best_two_are_repeated() -> None:
    """A 20% lead may be one lucky launch on a cluster that has not shown its noise: the
    first round repeats the best and the runner-up, which measures it."""
    assert firsts(trials((1.00, 0.005), (1.25, 0.005), between=None)) == [0, 1]


def test_your_own_config_is_repeated_with_the_leaders_even_when_far_behind() -> None:
    """A study of the user's command: their config is the baseline every figure compares
    with, so it launches twice even where the best is surely faster (and once it has, the
    clear winner is left alone)."""
    study = trials((1.00, 0.005), (1.25, 0.005))
    yours = study.trials[1]
    study.set_user_attr(USERS_CONFIG, config_key(TrialAttrs.of(yours).config))
    assert firsts(study) == [0, 1]
    add_measured(study, yours.value, TrialAttrs.of(yours).config, confirms=1, **LABELLED)
    assert contenders(study) == []


def test_the_recorded_sweeps_leaders_are_close_enough_to_repeat() -> None:
    leaders = contenders(study_of(recorded()))
    assert leaders and leaders[0].first == 0


def test_a_clear_winner_is_not_repeated() -> None:
    rows = recorded()
    clear = rows.iloc[[0, len(rows) - 1]]  # the fastest and the slowest config
    assert contenders(study_of(clear, between=0.05)) == []


def measured(study: optuna.Study, tokens: float, of: int | None = None) -> int:
    """A measured trial of a new config, or a repeat of trial `of`'s config."""
    config = (
        TrainConfig(**study.trials[of].user_attrs["config"])
        if of is not None
        else TrainConfig(mbs=next(MBS))
    )
    return add_measured(study, tokens, config, **LABELLED, confirms=of)


def test_repeats_that_scatter_keep_leaders_apart_and_repeats_that_agree_separate_them() -> None:
    scattered = new_study()
    a, b = measured(scattered, 103.0), measured(scattered, 100.0)
    for value_a, value_b in ((93.0, 110.0), (112.0, 91.0)):
        measured(scattered, value_a, of=a)
        measured(scattered, value_b, of=b)
    spread = study_spread(scattered)
    assert spread is not None and spread.relative > 0.05
    assert {s.first for s in contenders(scattered)} == {a, b}  # 3% apart, 8% noise: unsure
    steady = new_study()
    a, b = measured(steady, 103.0), measured(steady, 100.0)
    for value_a, value_b in ((103.2, 100.1), (102.9, 99.8)):
        measured(steady, value_a, of=a)
        measured(steady, value_b, of=b)
    assert contenders(steady) == []  # 3% apart, 0.2% noise: a is surely faster


def confirmed(
    world: tuple[float, float],
    noise_level: float,
    seed: int,
    limit: int | None = None,
    effort: Effort = STANDARD,
) -> tuple[int, float]:
    """Repeats spent on two configs whose true throughputs are `world`, and the true
    throughput of the one the study then names."""
    study = new_study()
    rng = random.Random(seed)
    truth = {measured(study, world[0]): world[0], measured(study, world[1]): world[1]}

    def run(trial: optuna.Trial, config: TrainConfig) -> None:
        for key, value in measured_attrs(config, **LABELLED).items():  # as the loop's run does
            trial.set_user_attr(key, value)
        value = truth[trial.user_attrs["confirms"]] * (1 + rng.gauss(0, noise_level))
        study.tell(trial, value)

    repeats = len(confirm(study, lambda _: {}, {}, run, limit=limit, effort=effort))
    return repeats, truth[standings(study)[0].first]


def test_repeats_stop_once_the_best_is_surely_faster_and_at_the_cap_when_never() -> None:
    def repeats_in(
        world: tuple[float, float], noise_level: float, seed: int, limit: int | None = None
    ) -> int:
        return confirmed(world, noise_level, seed, limit)[0]

    assert repeats_in((100.0, 99.0), 0.001, seed=1) == 2  # 1% apart, 0.1% noise: one round
    # Equal configs in 5% noise: the default stops once the runner-up surely is not 5%
    # faster (a gap that would change what to run); --thorough, which parts them to 2%,
    # repeats in 10% noise to its cap.
    assert 2 < repeats_in((100.0, 100.0), 0.05, seed=2) < 2 * STANDARD.repeats
    assert confirmed((100.0, 100.0), 0.10, 2, effort=THOROUGH)[0] == 2 * THOROUGH.repeats
    assert repeats_in((100.0, 99.5), 0.05, seed=2, limit=3) == 3  # no more than the repeat limit


def test_thorough_effort_parts_leaders_5_percent_apart_in_10_percent_noise() -> None:
    """Two configs 5% apart in 10% noise: where the default's six repeats each run out
    before they are told apart, `--thorough`'s forty go on, and it names the faster one in
    every seed; the default names the slower one in some."""
    standard = [confirmed((100.0, 95.0), 0.10, seed) for seed in range(10)]
    thorough = [confirmed((100.0, 95.0), 0.10, seed, effort=THOROUGH) for seed in range(10)]
    assert 95.0 in [named for _, named in standard]
    assert all(named == 100.0 for _, named in thorough)
    for (repeats, _), (more, _) in zip(standard, thorough, strict=True):
        assert more > repeats or repeats < 2 * STANDARD.repeats  # at the cap, more


def test_a_trial_after_a_confirmation_can_still_win_and_is_repeated_in_turn() -> None:
    study = new_study()
    a, b = measured(study, 100.0), measured(study, 99.5)
    measured(study, 95.0, of=a)
    b_repeat = measured(study, 97.0, of=b)
    assert decide(study).winner.trial.number == b_repeat  # type: ignore[union-attr]
    later = measured(study, 105.0)  # e.g. a resumed study with a larger --trials
    assert decide(study).winner.trial.number == later  # type: ignore[union-attr]
    # A 7% lead in about 3% noise between trials: --thorough repeats it; the default does not
    # (the runner-up surely is not 5% faster, so no repeat would change what to run).
    assert later in [s.first for s in contenders(study, THOROUGH)]
    assert later not in firsts(study)
    measured(study, 90.0, of=later)  # its repeat says it was lucky
    assert standings(study)[0].first == b
    clear = measured(study, 200.0)
    assert decide(study).winner.trial.number == clear and contenders(study) == []  # type: ignore[union-attr]


def test_a_config_whose_latest_repeat_failed_does_not_win() -> None:
    study = new_study()
    a, b = measured(study, 100.0), measured(study, 99.5)
    failed = study.ask()
    failed.set_user_attr("confirms", a)
    failed.set_user_attr("kind", "oom")
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    assert decide(study).winner.trial.number == b  # type: ignore[union-attr]


def test_a_queued_repeat_another_worker_skipped_does_not_block_one() -> None:
    study = new_study()
    a, b = measured(study, 100.0), measured(study, 99.5)
    skipped = study.ask()  # another worker's loop took the queued trial and pruned it
    skipped.set_user_attr("confirms", a)
    study.tell(skipped, state=optuna.trial.TrialState.PRUNED)
    assert firsts(study) == [a, b]


def test_a_config_that_takes_the_lead_after_the_first_rounds_is_repeated_too() -> None:
    """Four close configs on a cluster whose launches differ by 5%: the leader and the two
    runners-up closest to it hold up for two rounds of repeats and fall back on the third,
    leaving the fourth, measured once, in front; it is repeated before it is named (with the
    strict rule: the default's 5% indifference would name the first leader after one round)."""
    strict = dataclasses.replace(STANDARD, indifference=None)
    study = new_study(between=0.05)
    a, b, c, d = (measured(study, v) for v in (104.0, 101.0, 100.5, 99.0))
    fallen = [95.0] * (STANDARD.repeats - 3)  # what the first three read once they fell back
    repeats = {a: [103.0, 103.0, 80.0, *fallen], b: [100.0, 100.0, 92.0, *fallen]}
    repeats[c] = [100.0, 100.0, 92.0, *fallen]
    repeats[d] = [99.0] * STANDARD.repeats

    def run(trial: optuna.Trial, config: TrainConfig) -> None:
        for key, value in measured_attrs(config, **LABELLED).items():
            trial.set_user_attr(key, value)
        study.tell(trial, repeats[trial.user_attrs["confirms"]].pop(0))

    confirm(study, lambda _: {}, {}, run, effort=strict)
    winner = standings(study)[0]
    assert winner.first == d
    assert winner.repeats >= 1


def test_seeds_still_queued_when_the_search_ends_neither_swallow_nor_lose_repeats() -> None:
    """An Optuna-sampler study whose trial budget ran out before its queued seeds: the
    leaders are still repeated, and the seeds stay queued for a resumed search."""
    study = new_study()
    a, b = measured(study, 100.0), measured(study, 99.5)
    for mbs in (61, 62):
        study.enqueue_trial({}, user_attrs={"seeded_by": "plan", "label": f"mbs={mbs}"})

    def run(trial: optuna.Trial, config: TrainConfig) -> None:
        for key, value in measured_attrs(config, **LABELLED).items():
            trial.set_user_attr(key, value)
        study.tell(trial, 100.0 if trial.user_attrs["confirms"] == a else 99.0)

    repeats = confirm(study, lambda _: {}, {}, run, limit=2)
    assert sorted(study.trials[n].user_attrs["confirms"] for n in repeats) == [a, b]
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert [t.user_attrs["seeded_by"] for t in waiting] == ["plan", "plan"]


def test_a_config_stopped_as_slower_than_a_lucky_best_is_measured_again() -> None:
    """Early stopping judged b against a's first launch; a's repeats show that launch lucky,
    and b, cut short 8% behind it, is now within noise of a: it is repeated, not left out."""
    study = new_study(between=0.05)
    a = measured(study, 108.0)
    b = add_measured(study, 100.0, TrainConfig(mbs=next(MBS)), **LABELLED, stopped_for="slower")
    measured(study, 97.0, of=a)
    measured(study, 98.0, of=a)
    assert b in firsts(study)


def test_a_round_the_repeat_limit_cuts_short_still_repeats_the_best() -> None:
    """A user's command allows as many repeats as the search ran trials (4 here): three close
    contenders take three in the first round, and the last one goes to the best, not to the
    runner-up the rotation would have put first."""
    study = new_study(between=0.05)
    a, b, c = (measured(study, v) for v in (100.0, 99.0, 98.5))
    repeats = {a: [101.0, 99.0], b: [98.0, 100.0], c: [100.0, 97.0]}

    def run(trial: optuna.Trial, config: TrainConfig) -> None:
        for key, value in measured_attrs(config, **LABELLED).items():
            trial.set_user_attr(key, value)
        study.tell(trial, repeats[trial.user_attrs["confirms"]].pop(0))

    confirm(study, lambda _: {}, {}, run, limit=4)
    by_first = {s.first: s.repeats for s in standings(study)}
    assert by_first[a] == 2 and by_first[b] + by_first[c] == 2
