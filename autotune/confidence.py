"""How sure each decision of the tuner must be, in one place. A `_PROBABILITY` is a
confidence level (one- or two-sided, as named); a `_SIGMAS` is a count of standard
deviations. A leaf module: the trial, study and export packages all read it."""

INTERVAL_TWO_SIDED_PROBABILITY = 0.95
"""The intervals the tuner reports and measures to: a trial's step time, a config's mean
throughput, one config's ratio to another."""

WINNER_ONE_SIDED_PROBABILITY = 0.95
"""How sure "the best is faster than the runner-up" must be for confirmation to stop
repeating them (study/verdict/confirm)."""

NCCL_KEEP_ONE_SIDED_PROBABILITY = 0.99
"""How sure a forced NCCL setting must be to beat NCCL's own choice before the export keeps
it (study/verdict/_nccl_verdict). Stricter than naming a winner: NCCL's default adapts to
every size and version, a forced setting is a liability wherever it is not a gain, and the winner's
repeats are themselves the ones that made it lead the confirmation; a laxer level lets
simulated studies export a setting that only ties the default
(benchmarks/nccl_refinement.py counts how often)."""

SLOWER_ONE_SIDED_PROBABILITY = 0.9975
"""How sure a trial must be that it is slower than the step time to beat before it stops
measuring (trial/length): 99.75% at each look, since the rule looks after every step (a
Bonferroni bound over the few looks a trial gets)."""

EARLY_STOP_SIGMAS = 2.33
"""Standard deviations of the difference between a launch and the best config's mean that
early stopping allows for (99% one-sided): a trial is stopped as slower only beyond what
launches differ by (study/verdict/noise)."""

PROPOSAL_OPTIMISM_SIGMAS = 2.0
"""Standard deviations of optimism when the guided search proposes a config (about a 98%
one-sided bound, as the stop rule's; study/search/guided): at one, a few trials' worth of small
gains near the leader outbid a class or parallel layout never measured that the model ranks
10% lower, which in worlds of structured error is where the best often lies
(results/bench/search_worlds.md)."""

STOP_RULE_SIGMAS = 2.0
"""Standard deviations the guided search's stop rule demands (about 98% one-sided):
stopping is for good (study/search/guided)."""
