"""Stored studies carry their schema version: an unversioned study is migrated once when
opened, a newer one is refused in one line; and config keys stay the same as knobs are added."""

import json
import sqlite3
from pathlib import Path

import optuna
import pytest

from autotune.errors import InputError
from autotune.problem import load_problem
from autotune.space import TrainConfig, config_key
from autotune.study.record._schema import SCHEMA_ATTR, SCHEMA_VERSION
from autotune.study.record.storage import (
    StudyRef,
    load_existing_study,
    masked_url,
    open_study,
    problem_attrs,
    stored_job,
    study_ref,
)
from tests.conftest import autotune

# A key of a config whose late knobs (cp, ep, hsdp, ...) are at their default.
KEY_AT_DEFAULTS = (
    '{"allgather_bucket": 500000000, "ddp_bucket_mb": 25, "dp": 8, "mbs": 2, '
    '"nccl_algo": "default", "nccl_proto": "default", "overlap_comm": false, '
    '"overlap_param_gather": false, "pp": 1, "recompute": "full", "recompute_method": "block", '
    '"recompute_num_layers": 2, "reduce_bucket": 500000000, "sp": false, "tp": 2, "vpp": 1, '
    '"zero": 1}'
)
PROBLEM = ("megatron", "llama3-8b", "dgx-h100:2")


def test_a_key_names_late_knobs_only_when_set() -> None:
    config = TrainConfig(**json.loads(KEY_AT_DEFAULTS))
    assert config_key(config) == KEY_AT_DEFAULTS
    assert '"cp": 2' in config_key(TrainConfig(**json.loads(KEY_AT_DEFAULTS), cp=2))


def _unversioned_study(storage: str, name: str, job: object) -> None:
    """A study as stored before versions were kept: no version, a cluster without an NVLink
    domain, and a job without a framework (or no job at all)."""
    study = optuna.create_study(study_name=name, storage=storage, direction="maximize")
    for key, value in problem_attrs(load_problem(*PROBLEM)).items():
        if key == "cluster":
            value = {k: v for k, v in value.items() if k != "nvlink_domain"}
        if key != "job":
            study.set_user_attr(key, value)
    if job is not None:
        study.set_user_attr("job", job)


def test_a_new_study_carries_the_schema_version(tmp_path: Path) -> None:
    ref = StudyRef(name="new", storage_url=f"sqlite:///{tmp_path / 'study.db'}", folder=tmp_path)
    study = open_study(ref, load_problem(*PROBLEM), optuna.samplers.RandomSampler())
    assert study.user_attrs[SCHEMA_ATTR] == SCHEMA_VERSION


def test_an_unversioned_study_is_migrated_once_and_resumes(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    _unversioned_study(storage, "old", job=None)
    ref = StudyRef(name="old", storage_url=storage, folder=tmp_path)
    problem = load_problem(*PROBLEM)
    open_study(ref, problem, optuna.samplers.RandomSampler())
    stored = optuna.load_study(study_name="old", storage=storage).user_attrs
    assert stored[SCHEMA_ATTR] == SCHEMA_VERSION
    assert stored["job"] is None and stored["cluster"]["nvlink_domain"] is None
    expected = json.loads(json.dumps(problem_attrs(problem)))
    assert {k: stored[k] for k in expected} == expected


@pytest.mark.parametrize(
    ("flag", "config_index", "framework"),
    [
        ("--deepspeed_config", 2, "deepspeed"),
        ("--deepspeed", 2, "huggingface"),
        ("--deepspeed_config", None, "script"),
    ],
)
def test_a_migrated_command_has_its_framework_named(
    tmp_path: Path, flag: str, config_index: int | None, framework: str
) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    command = ["train.py", flag, "ds.json"]
    job = {"command": command, "workdir": "/w", "config_index": config_index}
    _unversioned_study(storage, "old", job=job)
    study = load_existing_study(StudyRef(name="old", storage_url=storage, folder=tmp_path))
    migrated = stored_job(study)
    assert migrated is not None and migrated.framework == framework


def test_a_study_of_a_newer_version_is_refused_in_one_line(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'newer' / 'study.db'}"
    (tmp_path / "newer").mkdir()
    study = optuna.create_study(study_name="newer", storage=storage, direction="maximize")
    study.set_user_attr(SCHEMA_ATTR, SCHEMA_VERSION + 1)
    ref = StudyRef(name="newer", storage_url=storage, folder=tmp_path)
    with pytest.raises(InputError, match=f"schema version {SCHEMA_VERSION + 1}"):
        open_study(ref, load_problem(*PROBLEM), optuna.samplers.RandomSampler())
    result = autotune("export", "--study", "newer", "--results", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 2 and "another --study name" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("name", "command"), [(".", "trials"), ("..", "export"), ("...", "report")]
)
def test_a_study_name_of_dots_only_is_refused_in_one_line(
    tmp_path: Path, name: str, command: str
) -> None:
    result = autotune(command, "--study", name, "--results", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 2 and "dots only" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://user:s3cret@host/db", "postgresql://user:***@host/db"),
        (
            "postgresql+psycopg2://user:p%40ss@host:5432/db",
            "postgresql+psycopg2://user:***@host:5432/db",
        ),
        ("postgresql://user@host/db", "postgresql://user@host/db"),
        ("sqlite:///results/s/study.db", "sqlite:///results/s/study.db"),
        ("not a url://user:s3cret@host", "not a url://user:***@host"),
        ("postgresql://user@host/db?password=s3cret", "postgresql://user@host/db?password=***"),
        (
            "postgresql://user@host/db?sslmode=require&PASSWORD=s3cret&x=1",
            "postgresql://user@host/db?sslmode=require&PASSWORD=***&x=1",
        ),
    ],
)
def test_a_storage_password_is_masked(url: str, shown: str) -> None:
    assert masked_url(url) == shown


def test_a_storage_that_cannot_be_opened_is_named_without_its_password(tmp_path: Path) -> None:
    url = "postgresql://tuner:s3cret-pw@127.0.0.1:1/studies"  # nothing listens on port 1
    ref = StudyRef(name="s", storage_url=url, folder=tmp_path)
    with pytest.raises(InputError, match="cannot open storage") as refused:
        load_existing_study(ref)
    assert "s3cret-pw" not in str(refused.value)
    assert "postgresql://tuner:***@127.0.0.1:1/studies" in str(refused.value)


@pytest.mark.parametrize("folder", ["res?x=1", "r%41", "with space", "a#b"])
def test_a_results_folder_of_url_characters_keeps_its_study_inside(
    tmp_path: Path, folder: str
) -> None:
    """`--results 'res?x=1'` once put study.db outside the results folder (the SQLite URL
    was built from the path unquoted), and `r%41` failed after making folders."""
    done = autotune(
        "run", "--launcher", "simulate", "--cluster", "local:2", "--trials", "1", "--no-confirm",
        "--results", folder, "--study", "s", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / folder / "s" / "study.db").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder]


def test_simulated_and_measured_trials_never_share_a_study(tmp_path: Path) -> None:
    """A study run with --launcher simulate and then the real launcher once shared the
    default name: the real run skipped what simulation had "measured" and exported a
    simulated trial as the best."""
    results = tmp_path / "results"
    simulated = autotune(
        "run", "--launcher", "simulate", "--cluster", "local:2", "--trials", "1",
        "--no-confirm", "--results", str(results), cwd=tmp_path,
    )  # fmt: skip
    assert simulated.returncode == 0, simulated.stderr
    assert [p.name for p in results.iterdir()] == ["tiny-local_2-deepspeed-simulated"]
    problem = load_problem("deepspeed", "tiny", "local:2")
    ref = study_ref("tiny-local_2-deepspeed-simulated", None, results)
    with pytest.raises(InputError, match="holds simulated trials, and these would be measured"):
        open_study(ref, problem, optuna.samplers.RandomSampler(), "measured")
    open_study(ref, problem, optuna.samplers.RandomSampler(), "simulated")  # resumes


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ({"schema_version": "abc"}, "schema_version 'abc' is no version"),
        ({"schema_version": None}, "schema_version None is no version"),
        ({"workload": {"name": "x"}}, "stored engine, workload or cluster is not complete"),
    ],
)
def test_a_damaged_stored_study_is_named_in_one_line(
    tmp_path: Path, damage: dict[str, object], said: str
) -> None:
    """Tracebacks in trials, export and run, once."""
    results = tmp_path / "results"
    done = autotune(
        "run", "--launcher", "simulate", "--cluster", "local:2", "--trials", "1",
        "--no-confirm", "--results", str(results), "--study", "s",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{results / 's/study.db'}")
    for key, value in damage.items():
        study.set_user_attr(key, value)
    for command in ("trials", "export", "report"):  # each works or says why in one line
        out = ["--out", str(tmp_path / "o")] if command == "export" else []
        shown = autotune(command, "--study", "s", "--results", str(results), *out)
        lines = shown.stderr.strip().splitlines()
        assert "Traceback" not in shown.stderr
        assert shown.returncode == 0 or (len(lines) == 1 and said in lines[0]), shown.stderr
        if command == "export":
            assert shown.returncode == 2


def test_a_trial_whose_stored_config_is_not_a_mapping_is_named(tmp_path: Path) -> None:
    results = tmp_path / "results"
    done = autotune(
        "run", "--launcher", "simulate", "--cluster", "local:2", "--trials", "1",
        "--no-confirm", "--results", str(results), "--study", "s",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(results / "s" / "study.db") as db:  # as a hand edit would
        db.execute("UPDATE trial_user_attributes SET value_json = '[1, 2]' WHERE key = 'config'")
    shown = autotune("trials", "--study", "s", "--results", str(results))
    lines = shown.stderr.strip().splitlines()
    assert shown.returncode == 2 and len(lines) == 1, shown.stderr
    assert "trial 0: its stored config is not a mapping of knobs" in lines[0]
