"""How hard a study works for its verdict: the default, or thorough for a noisy cluster.

The default stops the guided search once no single unmeasured config could beat the best
at 98%, and re-measures up to 8 leaders 6 times each. Where launches of one config differ
by 10% and the model is wrong config by config, that misses a config within 2% of the best
in a fair share of seeds (results/bench/noisy_worlds.md): with hundreds of configs each
unlikely to win, one of them usually does, and six repeats cannot part leaders a few percent
apart. `THOROUGH` bounds the expected number of configs left that could win, and
repeats more leaders more often, for several times the trials.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Effort:
    stop_risk: float | None
    """The guided search stops once the expected number of unmeasured layouts that beat the
    best by the threshold is at most this (a bound on them all; NCCL variants keep the bound
    on each); None: once no one config could at 98% (a bound on each)."""
    contenders: int
    """The best config and up to this many minus one runners-up it is not surely faster than
    are repeated."""
    repeats: int
    """Repeats per contender at most, besides its own trial."""
    repeats_per_trial: int
    """Repeats allowed per trial the search ran (a user's command relaunches for each)."""
    after_choice: int
    """Repeats of the winner once it is chosen, from which its figures are stated: the
    measurements that chose it read high (`study.verdict.figures`)."""
    indifference: float | None
    """A runner-up leaves the contenders once it is surely (one-sided, as a verdict) not
    faster than the best by this share: a smaller gap would not change what the user should
    run, and repeats to resolve it are what the summary offers (`--thorough`). None: only
    once it is surely slower, or surely within 2%."""


STANDARD = Effort(
    stop_risk=None,
    contenders=8,
    repeats=6,
    repeats_per_trial=2,
    after_choice=2,
    indifference=0.05,
)
"""Caps tuned on simulated noisy worlds (benchmarks/noisy_worlds.py, 10% noise, searched
to convergence; results/bench/noisy_worlds.md): fewer contenders, or fewer repeats per search
trial, name the best less often; four launches cannot part configs 5% apart in 10% noise,
seven mostly can. A quiet cluster settles its leaders long before the caps."""
THOROUGH = Effort(
    stop_risk=0.03,
    contenders=16,
    repeats=40,
    repeats_per_trial=6,
    after_choice=4,
    indifference=None,
)
"""Tuned on seeds 0-39 of the same worlds at 10% noise, searched until the stop rule says so
(seeds 40-79 are held out for results/bench/noisy_worlds.md): a stop risk of 0.1 leaves the
world's best unmeasured in some seeds, where 0.03 hardly ever does; with it, up to 40 repeats
each (6 per search trial) name a config within 2% of the best more often than 20 (4 per
trial)."""
THOROUGH_TRIALS = 200
"""A thorough study's trial budget unless --trials says otherwise (half for a user's command,
each trial of which relaunches their job): its stop rule sums over every config left, so in a
space of many thousands it may not stop before the space is spent. In the noisy worlds its
rule stops well within this budget (results/bench/noisy_worlds.md)."""
