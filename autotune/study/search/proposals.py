"""What one worker proposes next (once the user's own config has run:
`study.verdict.reference`): the guided search's or the grid's choice, away from configs with
a verdict, running on another worker, collided on lately (left to the worker that retries
them), or that change the training (`parity_cause`)."""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import optuna

from autotune.estimate.ranking import Ranked
from autotune.space import TrainConfig, config_key
from autotune.specs import Cluster
from autotune.study.record.trial_attrs import CHOSEN_FOR, PROMISED
from autotune.study.record.verdicts import collisions, running_keys
from autotune.study.search._chosen_for import chosen_for
from autotune.study.search.economics import expected_share, stop_reason
from autotune.study.search.guided.search import GuidedSearch
from autotune.study.verdict.confirm import best_mean, best_step_time

RETRY_WINDOW_S = 60.0
"""How long after a collision the other workers leave its config to the one that retries it:
long enough for its next proposal, short enough that a retrier that stopped holds nothing."""
MAX_STALE_PROPOSALS = 3
"""Times a proposal is made again because another worker started it meanwhile."""


@dataclass(frozen=True)
class Proposer:
    """One worker's proposals over the configs predicted to fit (`ranked`)."""

    study: optuna.Study
    ranked: Ranked
    guide: GuidedSearch | None
    """The model-guided search; None: the grid, in the plan's order."""
    gave_way: set[int] = field(default_factory=set, hash=False)
    """This worker's trials that gave their config way to another worker's."""
    best: Callable[[optuna.Study], tuple[float | None, float]] = best_mean
    """The best config's mean throughput and its log's standard error, which the stop rule
    compares with (a slice study's, once probed, moved by the scale miss)."""
    allows: Callable[[TrainConfig], bool] = lambda _config: True
    """Whether a config keeps the training (`parity_cause.Causes.allows`): the grid skips
    the others (the guided search holds them itself)."""
    cluster: Cluster | None = None
    """The study's cluster, whose GPU-hours the economic stop rule counts (`economics`)."""
    promise: dict[str, float] = field(default_factory=dict, hash=False)
    """What the next proposal is expected to save (`economics.PROMISED`), kept on its trial."""
    explore: Callable[[], bool] = lambda: False
    """Whether to propose on past the stop rule (`Causes.wants_more`): a move that broke
    parity is held, and the knobs left have had too few trials to know they cannot win."""

    def next_config(self, seen: dict[str, int]) -> tuple[TrainConfig | None, str | None]:
        """The guided or grid proposal; (None, why) when there is none. `seen`: the configs
        with a verdict.

        A config that workers collided on is retried by the one whose trial that gave way
        has the lowest number; the others propose it only when nothing else is left, so the
        workers do not collide on it again in step. What other workers run is read after
        the refit and again after choosing: a refit takes long enough for another worker to
        start the very config chosen."""
        if self.guide is not None:
            self.guide.learn(self.study.get_trials(deepcopy=False))
        claimed = set(seen) | running_keys(self.study)
        recent = datetime.datetime.now() - datetime.timedelta(seconds=RETRY_WINDOW_S)
        deferred = {
            key
            for key, lowest in collisions(self.study, recent).items()
            if lowest not in self.gave_way
        }
        for _ in range(MAX_STALE_PROPOSALS):
            config, why = self._proposal(claimed, claimed | deferred)
            running = running_keys(self.study)
            if config is None or config_key(config) not in running:
                return config, why
            claimed |= running
        return config, why

    def _proposal(
        self, claimed: set[str], avoided: set[str]
    ) -> tuple[TrainConfig | None, str | None]:
        if self.guide is not None:
            best = self.best(self.study)
            explore = self.explore()
            why = self.guide.converged(claimed, *best) or self._unpaid(claimed, best)
            if why and not explore:
                return None, why
            # A deferred config comes back when nothing else could still win.
            config = None
            if explore or self.guide.converged(avoided, *best) is None:
                config = self.guide.propose(avoided)
            config = config or self.guide.propose(claimed)
            if config is None and explore:  # refinements the model sees no gain in, too
                config = self._first_in_order(avoided) or self._first_in_order(claimed)
        else:
            config = self._first_in_order(avoided) or self._first_in_order(claimed)
        return config, None if config else "search space exhausted: every config is claimed"

    def _unpaid(self, claimed: set[str], best: tuple[float | None, float]) -> str | None:
        """Why another trial does not pay over the production run the study tunes for
        (`economics`); None where it may, or without one."""
        if self.guide is None or self.cluster is None:
            return None
        _, expected, unc = self.guide.open_configs(claimed)
        if best[0] is not None:  # what the next trial is expected to save, for `kept_promise`
            self.promise[PROMISED] = expected_share(expected, unc, math.log(best[0]))
        step = best_step_time(self.study)
        time = step[0] if step else None
        return stop_reason(self.study, self.cluster, (expected, unc), best, time)

    def chosen_for(self, config: TrainConfig) -> dict[str, str | float]:
        """The user attributes saying why the guided search proposed `config` and, tuning for
        a production run, what it is expected to save (none for the grid)."""
        if (g := self.guide) is None:
            return {}
        leader = g.leader_measured[0] if g.leader_measured else None
        return {CHOSEN_FOR: chosen_for(config, g.measured, leader, g.candidates), **self.promise}

    def _first_in_order(self, excluded: set[str]) -> TrainConfig | None:
        return next(
            (
                c
                for c in self.ranked.in_given_order()
                if config_key(c) not in excluded and self.allows(c)
            ),
            None,
        )
