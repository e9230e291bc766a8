"""Bad input: one line on stderr, exit code 2, nothing written."""

from pathlib import Path

import pytest

from tests.conftest import autotune


def refused(result, message: str) -> None:  # type: ignore[no-untyped-def]
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["space", "--model", "gpt-9"], "unknown model 'gpt-9'"),
        (["space", "--cluster", "dgx-h900"], "unknown cluster 'dgx-h900'"),
        (["space", "--engine", "jax"], "unknown engine 'jax'"),
        (["trial", "--config", "turbo=1"], "unknown knob 'turbo'"),
        (
            ["trial", "--engine", "torch", "--cluster", "local:8", "--config", "tp=8"],
            "heads_divisible_by_tp",
        ),
        (["trial", "--config", "pp=4"], "world_size"),
        (["run", "--trials", "0"], "--trials"),
        (["run", "--sampler", "bayes"], "unknown sampler 'bayes'"),
        (["run", "--cluster", "local:2x1"], "the local launcher runs one: use --launcher slurm"),
        (["run", "--max-time", "soon"], "--max-time: expected a duration"),
        (["space", "--space", "missing.yaml"], "does not exist"),
    ],
)
def test_bad_flags_are_refused_in_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = autotune(*args, cwd=tmp_path)
    refused(result, message)
    assert not (tmp_path / "results").exists()


def test_malformed_yaml_model(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text("num_layers: [2\n")
    refused(autotune("trial", "--model", "m.yaml", cwd=tmp_path), "malformed YAML")
    assert not (tmp_path / "results").exists()


def test_space_without_valid_config_names_the_rule(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text("engine: deepspeed\nknobs:\n  mbs: [3]\n")
    result = autotune("space", "--space", "s.yaml", "--cluster", "local:2", cwd=tmp_path)
    refused(result, "batch_divisible_by_mbs_dp removed")


def test_space_command_counts_and_explains(tmp_path: Path) -> None:
    result = autotune("space", "--cluster", "local:2", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    import json

    data = json.loads(result.stdout)
    assert data["valid"] > 0 and data["total"] == data["valid"] + sum(
        data["removed_by_rule"].values()
    )
    assert "zero_needs_dp" in data["removed_by_rule"]


def test_dashboard_refuses_the_network_without_expose_and_unknown_studies(tmp_path: Path) -> None:
    exposed = autotune("dashboard", "--study", "s", "--host", "0.0.0.0", cwd=tmp_path)
    assert exposed.returncode == 2 and "--expose" in exposed.stderr
    assert len(exposed.stderr.strip().splitlines()) == 1
    unknown = autotune("dashboard", "--study", "nosuch", "--results", str(tmp_path), cwd=tmp_path)
    assert unknown.returncode == 2 and "nosuch" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("content", [bytes(range(256)) * 8, b"{}", b'{"rows": [1, "x"]}'])
@pytest.mark.parametrize(
    ("args", "name"),
    [
        (["space", "--model", "FILE"], "m.yaml"),
        (["space", "--cluster", "FILE"], "c.yaml"),
        (["space", "--space", "FILE"], "s.yaml"),
        (["run", "--launcher", "replay", "--table", "FILE"], "t.csv"),
        (["calibrate", "--commbench", "FILE"], "report.json"),
        (["estimate", "--trial-file", "FILE"], "trial.json"),
        (
            ["run", "--cluster", "local:2", "--", "train.py", "--deepspeed_config", "FILE"],
            "d.json",
        ),
    ],
)
def test_any_content_in_a_file_autotune_reads_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], name: str, content: bytes
) -> None:
    """Random bytes, or JSON/YAML of the wrong shape, in every file a user hands autotune."""
    (tmp_path / name).write_bytes(content)
    (tmp_path / "train.py").write_text("")
    result = autotune(*[name if a == "FILE" else a for a in args], cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr[-2000:]


def test_an_unreadable_saved_calibration_is_one_line_and_exit_2(tmp_path: Path) -> None:
    folder = tmp_path / "results" / "calibration"
    folder.mkdir(parents=True)
    (folder / "dgx-h100_1.json").write_bytes(bytes(range(256)))
    result = autotune("estimate", "--cluster", "dgx-h100:1", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "calibration" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_space_says_what_each_knob_means_in_the_engines_own_words(tmp_path: Path) -> None:
    import json

    def meanings(engine: str) -> dict[str, str]:
        result = autotune(
            "space", "--engine", engine, "--cluster", "local:2", "--json", cwd=tmp_path
        )
        assert result.returncode == 0, result.stderr
        return {k: v["meaning"] for k, v in json.loads(result.stdout)["knobs"].items()}

    megatron, deepspeed, torch = meanings("megatron"), meanings("deepspeed"), meanings("torch")
    assert "--overlap-grad-reduce" in megatron["overlap_comm"]
    assert "--use-distributed-optimizer" in megatron["zero"]
    assert "--ddp-bucket-size counts parameters" in megatron["ddp_bucket_mb"]
    assert "zero_optimization.overlap_comm" in deepspeed["overlap_comm"]
    assert "elements" in deepspeed["reduce_bucket"]
    assert "ZeroRedundancyOptimizer" in torch["zero"] and "FSDP2" in torch["zero"]
    assert all(megatron.values()) and all(deepspeed.values()) and all(torch.values())
