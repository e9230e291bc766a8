"""The form of a study's stored attributes, by version: every study carries the version it
was written in, and a study stored before versions were kept is migrated to the current form
once, when it is opened, so that nothing else reads an older form."""

from __future__ import annotations

from typing import Any

import optuna

from autotune.engines.deepspeed.jobs import is_hugging_face
from autotune.errors import InputError

SCHEMA_VERSION = 1
SCHEMA_ATTR = "schema_version"
"""The study user attribute that holds the version its attributes are stored in."""
UNVERSIONED = 0
"""The version of a study stored before versions were kept."""


def stored_version(study: optuna.Study) -> int:
    """The version the study's attributes are in; an empty study is in the current one."""
    attrs = study.user_attrs
    if SCHEMA_ATTR in attrs:
        stored = attrs[SCHEMA_ATTR]
        if isinstance(stored, bool) or not isinstance(stored, int) or stored < 0:
            raise InputError(
                f"study {study.study_name!r}: its {SCHEMA_ATTR} {stored!r} is no version "
                "autotune writes (a whole number); it was edited or damaged: use another --study"
            )
        return stored
    return UNVERSIONED if "engine" in attrs else SCHEMA_VERSION


def bring_to_current(study: optuna.Study) -> None:
    """Migrate the study's attributes to the current form, or refuse one from a newer
    autotune in one line."""
    version = stored_version(study)
    if version > SCHEMA_VERSION:
        raise InputError(
            f"study {study.study_name!r} is stored in schema version {version}, newer than "
            f"this autotune's {SCHEMA_VERSION}: upgrade autotune or use another --study name"
        )
    if version == UNVERSIONED:
        for key, value in _versioned_attrs(study.user_attrs).items():
            study.set_user_attr(key, value)
    if SCHEMA_ATTR not in study.user_attrs:
        study.set_user_attr(SCHEMA_ATTR, SCHEMA_VERSION)
    check_stored_trials(study)


def check_stored_trials(study: optuna.Study) -> None:
    """Each trial's stored config a mapping of knobs with values of their types, as input is
    checked: one that is not is named in one line, before anything reads it."""
    from autotune.space.config import KNOBS, coerce_knob
    from autotune.study.record.trial_attrs import CONFIG

    for trial in study.get_trials(deepcopy=False):
        stored = trial.user_attrs.get(CONFIG)
        if stored is None:
            continue
        where = f"study {study.study_name!r}, trial {trial.number}: its stored config"
        if not isinstance(stored, dict) or not set(stored) <= set(KNOBS):
            raise InputError(f"{where} is not a mapping of knobs; it was edited or damaged")
        for knob, value in stored.items():
            if coerce_knob(knob, value, where) != value or isinstance(value, bool) != (
                KNOBS[knob] is bool
            ):
                raise InputError(f"{where}: {knob} {value!r} is not a value of that knob")


def _versioned_attrs(stored: dict[str, Any]) -> dict[str, Any]:
    """The attributes an unversioned study stores differently in version 1: its `job` (none
    for a study stored before jobs were), with its framework named, and its cluster's NVLink
    domain (unset)."""
    cluster = stored["cluster"]
    return {
        "job": _with_framework(stored.get("job")),
        "cluster": {**cluster, "nvlink_domain": cluster.get("nvlink_domain")},
    }


def _with_framework(job: Any) -> Any:
    """A stored command with its framework named as version 1 names it: a ds_config argument
    makes it a DeepSpeed script (Hugging Face's Trainer where `--deepspeed` gives the file),
    none a script tuned through autotune.step."""
    if not isinstance(job, dict):
        return job
    index = job.get("config_index")
    framework = job.get("framework") or ("script" if index is None else "deepspeed")
    if framework == "deepspeed" and is_hugging_face(job.get("command", ()), index):
        framework = "huggingface"
    return {**job, "framework": framework}
