"""`autotune calibrate --study`: its held-out figure is on configs the fit never saw."""

from autotune.calibration.from_study import config_folds
from autotune.engines import get_engine
from autotune.estimate.calibrate import Observation
from autotune.space import TrainConfig, config_key
from autotune.specs import load_cluster, load_workload


def test_no_two_folds_share_a_config() -> None:
    """Eight configs, each measured once and then repeated twice in interleaved rounds (as
    confirmation does): every repeat of a config lies in the fold of its first trial."""
    workload, cluster = load_workload("tiny"), load_cluster("local:2")
    traits = get_engine("deepspeed").traits
    configs = [TrainConfig(mbs=mbs, zero=zero) for mbs in (1, 2, 4, 8) for zero in (0, 2)]
    order = configs + configs[:4] * 2 + configs[4:] * 2
    data = [Observation(workload, cluster, c, traits, 1.0 + i / 100) for i, c in enumerate(order)]
    first, second = config_folds(data)
    keys = [{config_key(o.config) for o in fold} for fold in (first, second)]
    assert not keys[0] & keys[1]
    assert len(first) + len(second) == len(data)
    assert len(keys[0]) == len(keys[1]) == 4
