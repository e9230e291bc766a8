"""Which leaders get re-measured, on step times recorded by the DeepSpeed sweep."""

from pathlib import Path

import optuna
import pandas as pd

from autotune.study.confirm import contenders
from autotune.study.noise import noise

SWEEP = Path(__file__).resolve().parents[2] / "results/benchmarks/sweep_deepspeed.csv"
TOKENS_PER_STEP = 16 * 64  # the tiny workload


def study_of(rows: pd.DataFrame) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    for row in rows.to_dict("records"):
        trial = study.ask()
        trial.set_user_attr("source", "measured")
        trial.set_user_attr("step_time_s", row["step_time_s"])
        trial.set_user_attr("step_time_stdev_s", row["step_time_stdev_s"])
        study.tell(trial, TOKENS_PER_STEP / row["step_time_s"])
    return study


def recorded() -> pd.DataFrame:
    table = pd.read_csv(SWEEP)
    return table[table.status == "ok"].sort_values("step_time_s").reset_index(drop=True)


def trials(*rows: tuple[float, float]) -> optuna.Study:
    """A study of measured trials given as (step time s, its stdev s)."""
    frame = pd.DataFrame(rows, columns=["step_time_s", "step_time_stdev_s"])
    return study_of(frame)


def test_leaders_within_their_noise_are_re_measured() -> None:
    # 1% behind the best, each step time within 0.5%: within the 2% floor of noise.
    assert [t.number for t in contenders(trials((1.00, 0.005), (1.01, 0.005)))] == [0, 1]
    # 5% behind, but its steps spread 3% (a 6% band): it may be as fast.
    assert [t.number for t in contenders(trials((1.00, 0.005), (1.05, 0.0315)))] == [0, 1]
    # 5% behind with steady steps: not a contender.
    assert contenders(trials((1.00, 0.005), (1.05, 0.005))) == []


def test_the_recorded_sweeps_leaders_are_close_enough_to_re_measure() -> None:
    leaders = contenders(study_of(recorded()))
    assert leaders and leaders[0].number == 0


def test_a_clear_winner_is_not_re_measured() -> None:
    rows = recorded()
    clear = rows.iloc[[0, len(rows) - 1]]  # the fastest and the slowest config
    assert contenders(study_of(clear)) == []


def test_noise_has_a_floor() -> None:
    study = study_of(recorded().iloc[[0]])
    trial = study.trials[0]
    assert noise(trial) >= 0.02


def measured(study: optuna.Study, tokens: float, confirms: int | None = None) -> int:
    attrs: dict[str, object] = {"source": "measured", "step_time_s": 1.0}
    attrs["step_time_stdev_s"] = 0.001
    if confirms is not None:
        attrs["confirms"] = confirms
    study.add_trial(optuna.trial.create_trial(value=tokens, user_attrs=attrs))
    return study.trials[-1].number


def test_a_trial_after_a_confirmation_can_still_win_and_is_confirmed_in_turn() -> None:
    from autotune.report.table import best_trial

    study = optuna.create_study(direction="maximize")
    a, b = measured(study, 100.0), measured(study, 99.5)
    measured(study, 95.0, confirms=a)
    b_long = measured(study, 97.0, confirms=b)
    assert best_trial(study).number == b_long  # type: ignore[union-attr]
    assert contenders(study) == []  # both leaders measured longer already
    later = measured(study, 97.5)  # e.g. a resumed study with a larger --trials
    assert best_trial(study).number == later  # type: ignore[union-attr]
    assert [t.number for t in contenders(study)] == [later]  # close to b's 97: confirm it
    measured(study, 90.0, confirms=later)  # its longer trial says it was lucky
    assert best_trial(study).number == b_long  # type: ignore[union-attr]
    clear = measured(study, 130.0)
    assert best_trial(study).number == clear and contenders(study) == []  # type: ignore[union-attr]


def test_a_config_whose_longer_trial_failed_does_not_win() -> None:
    from autotune.report.table import best_trial

    study = optuna.create_study(direction="maximize")
    a, b = measured(study, 100.0), measured(study, 99.5)
    failed = study.ask()
    failed.set_user_attr("confirms", a)
    failed.set_user_attr("kind", "oom")
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    assert best_trial(study).number == b  # type: ignore[union-attr]


def test_a_queued_confirmation_another_worker_skipped_does_not_block_one() -> None:
    study = optuna.create_study(direction="maximize")
    a, b = measured(study, 100.0), measured(study, 99.5)
    skipped = study.ask()  # another worker's loop took the queued trial and pruned it
    skipped.set_user_attr("confirms", a)
    study.tell(skipped, state=optuna.trial.TrialState.PRUNED)
    assert [t.number for t in contenders(study)] == [a, b]
