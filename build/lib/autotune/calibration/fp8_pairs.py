"""FP8's speed beside bf16 on the same job, from published pairs of runs that differ only in
FP8, and the calibration's `fp8_efficiency` fitted to them.

The one source of such pairs is torchtitan's H100 benchmark (M9 in shared/data's
published_moe_cp_runs.csv, copied to data/): Llama 3 8B under FSDP with torch.compile, with and
without Float8 linears (torchao's tensorwise scaling), on 8 and 128 GPUs. The fit takes two
steps: the source's own compute efficiency from its bf16 runs, then the share of the FP8 peak
from its FP8 runs with everything else held, so what is fitted is FP8's gain over bf16, not
how fast the source's software is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from autotune.engines import get_engine
from autotune.estimate.calibrate import Observation, fit
from autotune.estimate.calibration import Calibration
from autotune.space import TrainConfig
from autotune.specs import Workload, load_cluster
from autotune.specs.workload import Fp8Recipe

DATA = Path(__file__).resolve().parent / "data" / "published_moe_cp_runs.csv"
FLOAT8 = " + Float8"
"""How M9 names the FP8 run of an otherwise equal bf16 run in its flags."""
DEFAULT_SEQ = 8192
"""torchtitan's train-config sequence length, which M9's tables leave unstated (the data's
README)."""


@dataclass(frozen=True)
class Fp8Pair:
    rows: tuple[int, int]
    """The bf16 row's id and the FP8 row's."""
    bf16: Observation
    fp8: Observation


def pairs(path: Path = DATA) -> Iterator[Fp8Pair]:
    """Each FP8 run with the one bf16 run of the same source, model, GPUs, batch and flags."""
    rows = pd.read_csv(path)
    dense = rows[rows.model_type == "dense"]
    for _, run in dense[dense.other_flags.str.contains(FLOAT8, na=False, regex=False)].iterrows():
        same = dense[
            (dense.source_id == run.source_id)
            & (dense.model == run.model)
            & (dense.num_gpus == run.num_gpus)
            & (dense.gbs == run.gbs)
            & (dense.other_flags == run.other_flags.replace(FLOAT8, ""))
        ]
        if len(same) == 1:
            base = same.iloc[0]
            yield Fp8Pair(
                (int(base.row_id), int(run.row_id)),
                _fsdp_run(base, "none"),
                _fsdp_run(run, "tensorwise"),
            )


def _fsdp_run(r: pd.Series, fp8: Fp8Recipe) -> Observation:
    """A torchtitan FSDP run of M9 as an observation: every GPU a data-parallel shard."""
    seq = DEFAULT_SEQ if pd.isna(r.seq_len) else int(r.seq_len)
    workload = Workload(
        name=str(r.model),
        num_layers=int(r.layers),
        hidden_size=int(r.hidden),
        num_attention_heads=int(r.heads),
        num_query_groups=int(r.kv_heads),
        ffn_hidden_size=int(r.ffn_hidden),
        vocab_size=int(r.vocab),
        seq_length=seq,
        global_batch_size=int(r.gbs),
        fp8=fp8,
        swiglu=True,
    )
    gpus = int(r.num_gpus)
    config = TrainConfig(dp=gpus, zero=3, mbs=int(r.mbs), recompute="selective")
    step = workload.tokens_per_step / (r.tokens_per_s_per_gpu * gpus)
    cluster = load_cluster(f"dgx-h100:{gpus // 8}")
    return Observation(workload, cluster, config, get_engine("torch").traits, step)


def source_calibration(found: Sequence[Fp8Pair], start: Calibration) -> Calibration:
    """`start` with the compute efficiency of these pairs' bf16 runs: the source's own
    software level, which FP8's gain is measured against."""
    return fit([p.bf16 for p in found], start, free=("compute_efficiency",))


def fit_fp8(found: Sequence[Fp8Pair], start: Calibration) -> Calibration:
    """The source's calibration with the share of the FP8 peak that makes the model's FP8
    runs as much faster than its bf16 runs as these pairs are; the fit starts from no loss
    at all, so its result does not depend on `start`'s share."""
    full_peak = replace(source_calibration(found, start), fp8_efficiency=1.0)
    return fit([p.fp8 for p in found], full_peak, free=("fp8_efficiency",))


def fitted_fp8_efficiency(start: Calibration, path: Path = DATA) -> float:
    """`fit_fp8` over every published pair, from `start` (a generation's fitted calibration),
    rounded as the code states it."""
    return round(fit_fp8(list(pairs(path)), start).fp8_efficiency, 2)
