"""The guided search on in-memory studies against the simulate launcher (model = truth)."""

import dataclasses
import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import optuna
import pytest

from autotune.engines import get_engine
from autotune.estimate.calibration import DEFAULT_CALIBRATION, Calibration
from autotune.estimate.predict import Predictor, estimate
from autotune.estimate.ranking import memory_verdicts
from autotune.launchers.simulate import SimulateLauncher
from autotune.problem import Problem, load_problem
from autotune.space import TrainConfig, config_key, nccl_default
from autotune.space.table import BUCKET_KNOBS, ConfigTable
from autotune.study.loop import run_study
from autotune.study.record.storage import StudyRef
from autotune.study.search.guided.search import TIE, GuidedSearch
from autotune.study.search.samplers import make_sampler
from autotune.study.settings import Budget, SearchSettings
from autotune.study.verdict.effort import THOROUGH
from autotune.study.verdict.noise import NOISE_FLOOR
from tests.fakes import Quiet

optuna.logging.set_verbosity(optuna.logging.ERROR)
CAL = DEFAULT_CALIBRATION["hopper"]


def search(  # type: ignore[no-untyped-def]
    tmp_path: Path,
    strategy: str = "guided",
    seed: int = 0,
    trials: int = 20,
    model: str = "llama3-70b",
    cluster: str = "dgx-h100:32",
):
    problem = load_problem("torch", model, cluster)
    study = optuna.create_study(direction="maximize", sampler=make_sampler(strategy, seed))
    outcome = run_study(
        problem,
        study,
        ref=StudyRef("t", "memory", tmp_path),
        launcher=SimulateLauncher(CAL, problem.engine.traits),
        progress=Quiet(),
        settings=SearchSettings(
            budget=Budget(trials=trials), seed=seed, calibration=CAL, strategy=strategy
        ),
    )
    ran = [t for t in study.get_trials() if t.state != optuna.trial.TrialState.WAITING]
    return problem, outcome, sorted(ran, key=lambda t: t.number)


def test_first_proposal_is_among_the_plans_best_and_none_repeats(tmp_path: Path) -> None:
    problem, outcome, ran = search(tmp_path)
    ranked = memory_verdicts(
        problem.workload, problem.cluster, problem.engine.traits, problem.enumerate().valid, CAL
    )
    # The plan's best or one of its equals (scored within the search's tie).
    first = next(e for e in ranked if config_key(e.config) == ran[0].user_attrs["config_key"])
    assert first.tokens_per_s >= ranked[0].tokens_per_s * math.exp(-TIE)
    keys = [t.user_attrs["config_key"] for t in ran]
    assert len(keys) == len(set(keys))
    fitting = {config_key(e.config) for e in ranked}
    assert set(keys) <= fitting


def test_converges_when_the_model_is_the_truth(tmp_path: Path) -> None:
    _, outcome, ran = search(tmp_path, trials=200)
    assert outcome.stop_reason.startswith("search converged:")
    assert "none predicted to beat the best by more than 2%" in outcome.stop_reason
    assert len(ran) < 40
    best = max(ran, key=lambda t: t.value or 0)
    # The model was right from the start: the first trial, or one of its equals.
    assert best.value <= ran[0].value * math.exp(TIE)


def test_same_seed_same_proposals(tmp_path: Path) -> None:
    for strategy in ("guided", "tpe", "random"):
        first = [t.params for t in search(tmp_path / f"{strategy}a", strategy, 7, 8)[2]]
        second = [t.params for t in search(tmp_path / f"{strategy}b", strategy, 7, 8)[2]]
        assert first == second, strategy


def test_out_of_memory_tightens_the_memory_model() -> None:
    problem = load_problem("torch", "llama3-70b", "dgx-h100:32")
    ranked = memory_verdicts(
        problem.workload, problem.cluster, problem.engine.traits, problem.enumerate().valid, CAL
    )
    guide = GuidedSearch(problem, ranked.configs, CAL, seed=0)
    big = max(ranked, key=lambda e: e.memory.total)
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    trial.set_user_attr("config", big.config.as_dict())
    trial.set_user_attr("kind", "oom")
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    guide.learn(study.get_trials())
    still_open = {guide.candidates[r] for r in guide.ranked(set()).rows}
    assert still_open and all(
        e.memory.total < big.memory.total for e in ranked if e.config in still_open
    )


def test_unknown_sampler_is_refused() -> None:
    from autotune.errors import InputError

    with pytest.raises(InputError, match="unknown sampler 'bayes'"):
        make_sampler("bayes", 0)


def test_nccl_settings_only_refine_the_leading_layout(tmp_path: Path) -> None:
    _, _, ran = search(tmp_path, trials=15)
    configs = [TrainConfig(**t.user_attrs["config"]) for t in ran]
    assert nccl_default(configs[0]) == configs[0]  # NCCL's own choices first
    refined = 0
    for i, config in enumerate(configs):
        if config != nccl_default(config):
            refined += 1
            leader = max((t for t in ran[:i] if t.value is not None), key=lambda t: t.value)
            assert nccl_default(config) == nccl_default(TrainConfig(**leader.user_attrs["config"]))
    assert refined > 0


def test_compute_bound_leaders_get_no_nccl_trials(tmp_path: Path) -> None:
    # llama3-8b on 32 H100s: the leaders' exposed collectives are well under 1% of a step,
    # so no NCCL setting could beat NCCL's default by more than noise.
    _, _, ran = search(tmp_path, trials=15, model="llama3-8b", cluster="dgx-h100:4")
    configs = [TrainConfig(**t.user_attrs["config"]) for t in ran]
    assert configs and all(c == nccl_default(c) for c in configs)


def test_the_search_looks_around_a_config_that_measured_better_than_predicted() -> None:
    """Two measured configs, one 20% faster than the model says, one as it says: the next
    proposal is a neighbour of the surprising one (one knob away), not of the other."""
    # A calibration of its own: which neighbour wins after the refit depends on how far apart
    # the model puts the leaders, which any refit of the defaults moves.
    cal = Calibration(compute_efficiency=0.47, gemm_half_size=236.0, bandwidth_scale=1.07)
    problem = load_problem("torch", "llama3-70b", "dgx-h100:32")
    ranked = memory_verdicts(
        problem.workload, problem.cluster, problem.engine.traits, problem.enumerate().valid, cal
    )
    guide = GuidedSearch(problem, ranked.configs, cal, seed=0)
    surprising, expected = ranked[0], ranked[len(ranked) // 2]
    study = optuna.create_study(direction="maximize")
    for e, speed_up in ((surprising, 1.2), (expected, 1.0)):
        trial = study.ask()
        trial.set_user_attr("config", e.config.as_dict())
        trial.set_user_attr("step_time_s", e.step.total_s / speed_up)
        study.tell(trial, e.tokens_per_s * speed_up)
    guide.learn(study.get_trials())
    proposal = guide.propose({config_key(surprising.config), config_key(expected.config)})
    assert proposal is not None
    a, b, p = (c.as_dict() for c in (surprising.config, expected.config, proposal))
    assert sum(p[k] != a[k] for k in p) < sum(p[k] != b[k] for k in p)


def test_a_zero_stage_never_measured_is_tried_when_the_model_ranks_it_close() -> None:
    """DeepSpeed on two CPU processes: the model puts ZeRO 0 about 1% below ZeRO 1 and 2,
    where the machine runs it faster (results/bench/default_run.md). A world that is the model
    except ZeRO 0 runs 20% faster: eight proposals, as the default study makes, measure it."""
    cal = DEFAULT_CALIBRATION["cpu"]
    problem = load_problem("deepspeed", "tiny", "local:2")
    ranked = memory_verdicts(
        problem.workload, problem.cluster, problem.engine.traits, problem.enumerate().valid, cal
    )
    assert ranked[0].config.zero != 0
    truth = {config_key(e.config): e for e in ranked}
    guide = GuidedSearch(problem, ranked.configs, cal, seed=0)
    study = optuna.create_study(direction="maximize")
    for _ in range(8):
        guide.learn(study.get_trials())
        proposal = guide.propose({t.user_attrs["config_key"] for t in study.get_trials()})
        assert proposal is not None
        e = truth[config_key(proposal)]
        speed_up = 1.2 if proposal.zero == 0 else 1.0
        trial = study.ask()
        trial.set_user_attr("config", proposal.as_dict())
        trial.set_user_attr("config_key", config_key(proposal))
        trial.set_user_attr("step_time_s", e.step.total_s / speed_up)
        study.tell(trial, e.tokens_per_s * speed_up)
    best = max(study.get_trials(), key=lambda t: t.value or 0.0)
    assert best.user_attrs["config"]["zero"] == 0


def test_a_class_far_off_the_model_keeps_its_error_to_itself() -> None:
    """DeepSpeed on two CPU processes as this machine runs it (results/bench/
    repeatability.md): ZeRO 3 at a third of its prediction, ZeRO 1 and 2 at 0.8 of it, ZeRO 0
    at 0.92, so ZeRO 0 wins where the model puts it behind. ZeRO 3's error is its own: the
    configs that share its other knob values are not expected slower for it, and every seed
    measures ZeRO 0 at micro-batch 8 within the default study's eight trials (some did not
    before)."""
    cal = DEFAULT_CALIBRATION["cpu"]
    problem = load_problem("deepspeed", "tiny", "local:2")
    ranked = memory_verdicts(
        problem.workload, problem.cluster, problem.engine.traits, problem.enumerate().valid, cal
    )
    by_stage = {0: 0.92, 1: 0.8, 2: 0.8, 3: 0.35}
    truth = model_times(problem, lambda c: 1 / by_stage[c.zero], cal)
    best = TrainConfig(dp=2, mbs=8)
    for seed in range(6):
        proposed = replay(problem, ranked.configs, truth, trials=8, seed=seed, cal=cal)
        assert any(c.zero == 3 for c in proposed)
        assert best in proposed, [c.label() for c in proposed]


def test_a_thorough_search_goes_on_where_each_config_alone_is_unlikely_to_win() -> None:
    """A world where each config strays from the model by its own 10% (seeded): the default
    stop rule ends the search once no one config could beat the best at 98%, but with a
    thousand left, one of them may. Given the same trials, a thorough guide (`stop_risk`)
    goes on until few are expected to, and measures a faster config."""
    problem = load_problem("torch", "llama3-8b", "dgx-h100:4")
    ranked = memory_verdicts(
        problem.workload, problem.cluster, problem.engine.traits, problem.enumerate().valid, CAL
    )
    rng = random.Random(0)
    truth = {config_key(e.config): e.tokens_per_s * math.exp(rng.gauss(0, 0.1)) for e in ranked}
    study = optuna.create_study(direction="maximize")

    def search_until_converged(guide: GuidedSearch) -> str:
        while True:
            guide.learn(study.get_trials())
            seen = {t.user_attrs["config_key"] for t in study.get_trials()}
            best = max((t.value for t in study.get_trials() if t.value), default=None)
            why = guide.converged(seen, best)
            if why:
                return why
            proposal = guide.propose(seen)
            assert proposal is not None
            key = config_key(proposal)
            trial = study.ask()
            trial.set_user_attr("config", proposal.as_dict())
            trial.set_user_attr("config_key", key)
            trial.set_user_attr("step_time_s", problem.workload.tokens_per_step / truth[key])
            study.tell(trial, truth[key])

    why = search_until_converged(GuidedSearch(problem, ranked.configs, CAL, seed=0))
    assert "none predicted to beat the best" in why
    standard_trials, standard_best = len(study.trials), study.best_value
    thorough = GuidedSearch(problem, ranked.configs, CAL, seed=0, stop_risk=THOROUGH.stop_risk)
    why = search_until_converged(thorough)
    assert "expected to beat the best" in why
    assert len(study.trials) > standard_trials and study.best_value > standard_best * 1.05


def test_an_moe_study_learns_its_host_time_from_none() -> None:
    """DeepSpeed on Hopper starts with no host time per expert; a world whose Qwen3-30B-A3B
    micro-batches wait 0.5 ms per local expert per layer on the host (16 experts a rank): the
    refit after twelve trials finds it within 20%."""
    problem = load_problem("deepspeed", "qwen3-30b-a3b", "dgx-h100:1")
    start = DEFAULT_CALIBRATION["hopper"]
    assert start.moe_expert_host_s == 0.0
    ranked = memory_verdicts(
        problem.workload,
        problem.cluster,
        problem.engine.traits,
        problem.enumerate().require_some().valid,
        start,
    )
    truth = dataclasses.replace(start, moe_expert_host_s=0.0005)
    study = optuna.create_study(direction="maximize")
    for config in ranked.configs[:12]:
        e = estimate(
            problem.workload, config, problem.cluster, get_engine("deepspeed").traits, truth
        )
        trial = study.ask()
        trial.set_user_attr("config", config.as_dict())
        trial.set_user_attr("config_key", config_key(config))
        trial.set_user_attr("step_time_s", e.step.total_s)
        study.tell(trial, e.tokens_per_s)
    guide = GuidedSearch(problem, ranked.configs, start, seed=0)
    guide.learn(study.get_trials())
    assert guide.calibration.moe_expert_host_s == pytest.approx(0.0005, rel=0.2)


def replay(
    problem: Problem,
    candidates: Sequence[TrainConfig],
    truth: Callable[[TrainConfig], float],
    trials: int,
    seed: int = 0,
    cal: Calibration = CAL,
) -> list[TrainConfig]:
    """The guided search's first `trials` proposals in a world whose tokens/s is `truth`."""
    guide = GuidedSearch(problem, candidates, cal, seed=seed)
    study = optuna.create_study(direction="maximize")
    proposed: list[TrainConfig] = []
    for _ in range(trials):
        guide.learn(study.get_trials())
        proposal = guide.propose({t.user_attrs["config_key"] for t in study.get_trials()})
        assert proposal is not None
        tokens_per_s = truth(proposal)
        trial = study.ask()
        trial.set_user_attr("config", proposal.as_dict())
        trial.set_user_attr("config_key", config_key(proposal))
        trial.set_user_attr("step_time_s", problem.workload.tokens_per_step / tokens_per_s)
        study.tell(trial, tokens_per_s)
        proposed.append(proposal)
    return proposed


def model_times(
    problem: Problem, slower: Callable[[TrainConfig], float], cal: Calibration = CAL
) -> Callable[[TrainConfig], float]:
    """A world that is the model, each config's throughput divided by `slower(config)`."""

    def truth(config: TrainConfig) -> float:
        e = estimate(problem.workload, config, problem.cluster, problem.engine.traits, cal)
        return e.tokens_per_s / slower(config)

    return truth


def tp_world() -> tuple[Problem, Calibration, ConfigTable, Callable[[TrainConfig], float]]:
    """Megatron, llama3-70b on 128 H100s (TP 2 and 4), under a calibration that puts the
    best TP 2 config 7% below the best TP 4 one; a world where all TP 4 configs run 12%
    slower than modelled, so that the best is a TP 2 config."""
    cal = dataclasses.replace(CAL, bandwidth_scale=0.5, compute_efficiency=0.6)
    problem = load_problem("megatron", "llama3-70b", "dgx-h100:16")
    ranked = memory_verdicts(
        problem.workload, problem.cluster, problem.engine.traits, problem.enumerate().valid, cal
    )
    table = ranked.fastest_first
    candidates = table.take(np.flatnonzero(np.isin(table.tp, (2, 4))))
    return (
        problem,
        cal,
        candidates,
        model_times(problem, lambda c: 1.12 if c.tp == 4 else 1.0, cal),
    )


def test_a_tp_degree_slower_than_modelled_sends_the_search_to_another() -> None:
    """In `tp_world` the search tries a TP 2 config within 8 trials: every TP 4 config
    measured slower says so of the class, and TP 2, never measured, keeps its error."""
    problem, cal, candidates, truth = tp_world()
    proposed = replay(problem, candidates, truth, trials=8, cal=cal)
    assert proposed[0].tp == 4
    assert any(c.tp == 2 for c in proposed)


def test_no_nccl_variant_of_a_layout_outside_the_leaders() -> None:
    """In `tp_world`, 30 trials try NCCL settings (some) only on a layout within noise of
    the world's best: not on the TP 4 leader the first trials measure, 5% slower than it."""
    problem, cal, candidates, truth = tp_world()
    model = Predictor.of(
        problem.workload, candidates, problem.cluster, problem.engine.traits, cal.collectives
    )
    best = float((model.at(cal).tokens_per_s / np.where(candidates.tp == 4, 1.12, 1.0)).max())
    proposed = replay(problem, candidates, truth, trials=30, cal=cal)
    variants = [c for c in proposed if c != nccl_default(c)]
    assert variants and all(truth(nccl_default(c)) >= best / (1 + NOISE_FLOOR) for c in variants)


def test_the_seed_chooses_among_equal_proposals() -> None:
    """llama3-70b on 256 H100s (torch): hybrid sharding's replicas change the model's step
    time by less than the search can tell apart; two seeds propose different configs."""
    problem = load_problem("torch", "llama3-70b", "dgx-h100:32")
    ranked = memory_verdicts(
        problem.workload, problem.cluster, problem.engine.traits, problem.enumerate().valid, CAL
    )
    truth = model_times(problem, lambda c: 1.0)
    runs = [replay(problem, ranked.fastest_first, truth, trials=4, seed=s) for s in (0, 1)]
    assert runs[0] != runs[1]


def plain(config: TrainConfig) -> TrainConfig:
    """The config's layout: NCCL's own choices and the default bucket sizes."""
    defaults = TrainConfig()
    return dataclasses.replace(
        nccl_default(config), **{k: getattr(defaults, k) for k in BUCKET_KNOBS}
    )


def test_bucket_sizes_only_refine_a_settled_leading_layout() -> None:
    """In `tp_world`, over two layouts and their NCCL and bucket variants: while the second
    layout is unmeasured no variant is open, and once both are measured the variants open
    are the leader's alone, its gradient buckets among them."""
    problem, cal, candidates, truth = tp_world()
    guide = GuidedSearch(problem, candidates, cal, seed=0)
    first = candidates.config(int(guide.ranked(set()).best(0)[0]))
    second = next(c for c in candidates.configs if c.tp != first.tp and c == plain(c))
    layouts = [plain(c) for c in candidates.configs]
    pair = candidates.take(np.flatnonzero([c in (first, second) for c in layouts]))
    assert len(set(pair.ddp_bucket_mb.tolist())) > 1
    guide = GuidedSearch(problem, pair, cal, seed=0)
    study = optuna.create_study(direction="maximize")
    for config in (first, second):
        open_ = [pair.config(int(i)) for i in guide.ranked(set(measured(study))).rows]
        assert all(c == plain(c) for c in open_)  # no refinement while a layout is open
        tell(study, problem, config, truth(config))
        guide.learn(study.get_trials())
    leader = TrainConfig(**study.best_trial.user_attrs["config"])
    open_ = [pair.config(int(i)) for i in guide.ranked(set(measured(study))).rows]
    assert open_ and all(plain(c) == leader for c in open_)
    assert any(c.ddp_bucket_mb != leader.ddp_bucket_mb for c in open_)


def measured(study: optuna.Study) -> list[str]:
    return [t.user_attrs["config_key"] for t in study.get_trials()]


def tell(study: optuna.Study, problem: Problem, config: TrainConfig, tokens_per_s: float) -> None:
    """A trial of `config` measured at `tokens_per_s`."""
    trial = study.ask()
    trial.set_user_attr("config", config.as_dict())
    trial.set_user_attr("config_key", config_key(config))
    trial.set_user_attr("step_time_s", problem.workload.tokens_per_step / tokens_per_s)
    study.tell(trial, tokens_per_s)
