"""autotune.units: numbers as a person reads them, never in scientific notation."""

from __future__ import annotations

import pytest

from autotune.space import TrainConfig
from autotune.space.config import coerce_knob
from autotune.units import (
    display_label,
    human_bytes,
    human_count,
    human_duration,
    human_ms,
    human_rate,
    plain_number,
)


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, "-"), (512, "512 B"), (1536, "1.5 KiB"), (466_059_123, "444.5 MiB"),
     (51_200_000_000, "47.7 GiB"), (3 * 2**40, "3.0 TiB")],
)  # fmt: skip
def test_bytes_in_binary_units(value: float | None, text: str) -> None:
    assert human_bytes(value) == text


def test_counts_rates_and_times() -> None:
    assert [human_count(n) for n in (2e8, 50_000_000, 5e8, 1500, 999)] == [
        "200M", "50M", "500M", "1.5K", "999"
    ]  # fmt: skip
    assert human_rate(40_213.4) == "40,213 tok/s"
    assert human_ms(0.0123) == "12.3 ms" and human_ms(5.3315) == "5.33 s"  # past 1,000 ms
    assert [human_duration(s) for s in (1.23, 180, 1500, 9000)] == [
        "1.2 s", "3.0 min", "25 min", "2.5 h"
    ]  # fmt: skip
    assert plain_number(466_059_123.0) == "466,059,123"
    assert plain_number(1.234e-05) == "0.00001234"


def test_a_display_label_is_how_users_write_the_config_and_reads_back() -> None:
    config = TrainConfig(dp=8, zero=2, mbs=4, reduce_bucket=50_000_000, overlap_comm=True)
    shown = display_label(config)
    assert shown == "dp=8,zero=2,mbs=4,reduce_bucket=50M,overlap_comm=true"
    assert display_label(config.label()) == shown  # a stored label reads the same
    assert config.label().endswith("reduce_bucket=50000000,overlap_comm=True")  # exports'
    assert coerce_knob("reduce_bucket", "50M", "--config") == 50_000_000
    assert coerce_knob("allgather_bucket", "5e8", "--config") == 500_000_000
    assert display_label(None) == "-"
