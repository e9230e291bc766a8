"""Where studies live: an Optuna storage URL (SQLite file by default), and what a study holds
besides its trials: the problem it tunes, so that resuming, exporting and reporting need
nothing but the study's name and storage."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import re
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy.exc
from optuna.distributions import BaseDistribution
from pydantic import TypeAdapter, ValidationError

from autotune.errors import InputError
from autotune.problem import Problem
from autotune.specs import Cluster, Workload
from autotune.study.record._schema import bring_to_current
from autotune.study.record.optuna_private import HEARTBEAT_S, fail_stale_trials, fail_trial
from autotune.study.record.owner import owner_is_dead, owner_tag
from autotune.study.record.trial_attrs import ERROR, KIND, OWNER, TrialAttrs
from autotune.trial.spec import UserJob

CREATE_ATTEMPTS = 5
GRACE_S = 60
SQLITE_BUSY_S = 300.0
"""How long a call on a SQLite study waits while another connection holds the file locked
(another worker's write, a backup, a `sqlite3` shell) before it fails; SQLite's default, 5 s,
ended a run with a traceback and left its trial WAITING."""
INTERRUPTED = "interrupted"
"""Outcome kind of a trial stopped by the user or by the tuner's death: not a verdict."""
NO_VERDICT = (INTERRUPTED, "slow_node")
"""Failures that say nothing of the config, which may run again: a trial stopped, or one that
ran on a slow node (kept out of later trials)."""


@dataclass(frozen=True)
class StudyRef:
    name: str
    storage_url: str
    folder: Path
    """results/<study>/: trial folders, best/, report."""


def default_study_name(problem: Problem, source: str = "measured") -> str:
    """<model or script>-<cluster>-<engine>, and `-simulated` or `-replayed` for a study
    whose trials are the model's or a recorded sweep's: never the name of a measured one."""
    what = problem.job.name if problem.job else problem.workload.name
    raw = f"{what}-{problem.cluster.name}-{problem.engine.name}"
    if source != "measured":
        raw += f"-{source}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", raw)


def study_ref(name: str, storage: str | None, results: Path) -> StudyRef:
    """Where study `name` lives; its name is its folder under `results`, so a name of dots
    only ('.', '..', ...) is refused: it would name the results folder or one above it."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise InputError(f"study name {name!r}: use letters, digits, '.', '_' and '-' only")
    if not name.strip("."):
        raise InputError(
            f"study name {name!r}: use a letter, digit, '_' or '-' too, not dots only"
        )
    folder = results / name
    url = storage or sqlalchemy.engine.URL.create("sqlite", database=str(folder / "study.db"))
    text = url if isinstance(url, str) else url.render_as_string(hide_password=False)
    if sqlite_file(text) is None and text.split(":", 1)[0].startswith("sqlite"):
        raise InputError(
            f"--storage {masked_url(text)}: an in-memory database keeps nothing once autotune "
            "exits; give a file (sqlite:///path/study.db) or a server"
        )
    return StudyRef(name=name, storage_url=text, folder=folder)


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names (its path unquoted: `res%3Fx` is the folder `res?x`);
    None for another database, or SQLite in memory."""
    try:
        parsed = sqlalchemy.engine.make_url(url)
    except Exception:  # not a URL SQLAlchemy reads: opening it says so
        return None
    if not parsed.drivername.startswith("sqlite") or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def masked_url(url: str) -> str:
    """`url` as it may be printed or put in an error: its password, if any, as `***`
    (postgresql://user:***@host/db). Every storage URL autotune shows goes through here."""
    url = re.sub(SECRET_QUERY, r"\1***", url)
    try:
        parsed = sqlalchemy.engine.make_url(url)
    except Exception:  # not a URL SQLAlchemy reads: hide whatever lies between ':' and '@'
        return re.sub(r"(://[^/:@]*:)[^@]*@", r"\1***@", url)
    if parsed.password is None:
        return url
    return parsed.render_as_string(hide_password=True)


SECRET_QUERY = r"(?i)([?&](?:password|passwd|pwd|sslpassword|secret|token)=)([^&]*)"
"""A password given in a URL's query string (`?password=...`, which libpq and SQLAlchemy's
drivers take): masked like the one before the '@'."""


def _without_password(text: str, url: str) -> str:
    """`text` (a driver's error about `url`) with the URL's password masked wherever it
    appears."""
    text = text.replace(url, masked_url(url))
    secrets = [m.group(2) for m in re.finditer(SECRET_QUERY + "", url) if m.group(2)]
    try:
        password = sqlalchemy.engine.make_url(url).password
    except Exception:
        password = None
    for secret in [*secrets, *([str(password)] if password else [])]:
        text = text.replace(secret, "***")
    return text


def _storage(url: str) -> optuna.storages.BaseStorage:
    engine_kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if (db := sqlite_file(url)) is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
        engine_kwargs["connect_args"] = {"timeout": SQLITE_BUSY_S}
    failure: Exception | None = None
    for _ in range(CREATE_ATTEMPTS):
        try:
            with warnings.catch_warnings():  # heartbeat_interval is "experimental"
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(
                    url,
                    heartbeat_interval=HEARTBEAT_S,
                    grace_period=GRACE_S,
                    engine_kwargs=engine_kwargs,
                )
        except Exception as exc:  # SQLAlchemy raises many kinds; all mean "cannot open it"
            failure = exc
            if not _lost_table_race(exc):
                break
            time.sleep(random.uniform(0.2, 1.0))
    text = str(failure).strip()
    message = text.splitlines()[0] if text else type(failure).__name__
    message = _without_password(message, url)
    raise InputError(f"cannot open storage {masked_url(url)}: {message}") from None


def _lost_table_race(exc: Exception) -> bool:
    """Workers starting together on a fresh database race to create Optuna's tables; the
    losers (PostgreSQL: a duplicate; SQLite: "table ... already exists") find them made a
    moment later."""
    if isinstance(exc, sqlalchemy.exc.IntegrityError | sqlalchemy.exc.ProgrammingError):
        return True
    return isinstance(exc, sqlalchemy.exc.OperationalError) and "already exists" in str(exc)


def problem_attrs(problem: Problem) -> dict[str, Any]:
    """What the study remembers of its problem (as Optuna study user attributes, in the form
    of `_schema.SCHEMA_VERSION`)."""
    return {  # "job" first: a study that has "engine" has its "job"
        "job": dataclasses.asdict(problem.job) if problem.job else None,
        "engine": problem.engine.name,
        "workload": dataclasses.asdict(problem.workload),
        "cluster": dataclasses.asdict(problem.cluster),
        "space": {k: list(v) for k, v in problem.space.values.items()},
    }


def _identity(value: Any) -> Any:
    """What must match to resume a study: stored JSON, without the launchers' sections of the
    cluster (a resume may send SLURM jobs to another partition or account; a study stored
    before launchers owned their sections keeps a `slurm` key)."""
    plain = json.loads(json.dumps(value))
    if isinstance(plain, dict):
        plain.pop("launcher_sections", None)
        plain.pop("slurm", None)
    return plain


def open_study(
    ref: StudyRef,
    problem: Problem,
    sampler: optuna.samplers.BaseSampler,
    trials_from: str = "measured",
) -> optuna.Study:
    """Create the study or load it to resume; refuse to mix engines, workloads, clusters or
    where trials come from (`trials_from`: measured, simulated, or the replayed table's path:
    a simulated trial is never ranked with measured ones), and studies of another schema
    version that cannot be migrated."""
    storage = _storage(ref.storage_url)
    study = optuna.create_study(
        study_name=ref.name,
        storage=storage,
        sampler=sampler,
        direction="maximize",
        load_if_exists=True,
    )
    bring_to_current(study)
    attrs = {**problem_attrs(problem), TRIALS_FROM: trials_from}
    stored = study.user_attrs
    if TRIALS_FROM not in stored and study.get_trials(deepcopy=False):
        sources = {TrialAttrs.of(t).source for t in study.get_trials(deepcopy=False)}
        stored = {**stored, TRIALS_FROM: _legacy_source(sources, trials_from)}
    if TRIALS_FROM in stored and stored[TRIALS_FROM] != trials_from:
        raise InputError(
            f"study {ref.name!r} holds {stored[TRIALS_FROM]} trials, and these would be "
            f"{trials_from}: they are never ranked together; use another --study name"
        )
    for key in ("engine", "workload", "cluster", "job"):
        if key in stored and _identity(stored[key]) != _identity(attrs[key]):
            raise InputError(
                f"study {ref.name!r} was created for another {key} "
                f"({_describe(stored[key])}); use another --study name"
            )
    # A new study, or one another worker is creating this moment: write what is missing
    # (the same values the other worker writes).
    for key, value in attrs.items():
        if key not in stored:
            study.set_user_attr(key, value)
    return study


TRIALS_FROM = "trials_from"
"""On the study: where its trials come from (measured, simulated, or a replayed table)."""


def _legacy_source(sources: set[str | None], trials_from: str) -> str:
    """Where a study from before `TRIALS_FROM` took its trials, read from their sources (a
    replayed study's table is taken to be the one given now)."""
    known = sources - {None}
    if known <= {"measured"}:
        return "measured"
    if "simulated" in known:
        return "simulated"
    return trials_from if trials_from.startswith("replayed") else "replayed"


def _describe(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, dict):
        return str(value.get("name") or " ".join(value.get("command", [])) or "?")
    return str(value)


def load_existing_study(ref: StudyRef) -> optuna.Study:
    """An existing study, or an InputError; never creates a storage to find out."""
    if (db := sqlite_file(ref.storage_url)) is not None and not db.is_file():
        raise InputError(f"no study {ref.name!r}: {db} does not exist")
    storage = _storage(ref.storage_url)
    names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
    if ref.name not in names:
        known = f"; studies there: {', '.join(names)}" if names else ""
        raise InputError(f"no study {ref.name!r} in {masked_url(ref.storage_url)}{known}")
    study = optuna.load_study(study_name=ref.name, storage=storage)
    bring_to_current(study)
    return study


def stored_specs(study: optuna.Study) -> tuple[str, Workload, Cluster]:
    """The engine, workload and cluster the study was created for, checked as input is; one
    that was edited or damaged is named in one line."""
    attrs = study.user_attrs
    try:
        return (
            str(attrs["engine"]),
            TypeAdapter(Workload).validate_python(attrs["workload"]),
            TypeAdapter(Cluster).validate_python(attrs["cluster"]),
        )
    except (KeyError, ValidationError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(
            f"study {study.study_name!r}: its stored engine, workload or cluster is not "
            f"complete ({first}); it was edited or damaged: use another --study"
        ) from None


def stored_job(study: optuna.Study) -> UserJob | None:
    """The user's command the study tunes, if it tunes one."""
    job = study.user_attrs.get("job")
    if not job:
        return None
    try:
        return TypeAdapter(UserJob).validate_python(job)
    except ValidationError:
        raise InputError(f"study {study.study_name!r}: its stored command is unreadable") from None


def fail_abandoned_trials(study: optuna.Study) -> list[int]:
    """Mark RUNNING trials whose tuner died as failed (interrupted): at once when it ran on
    this host, else by Optuna's heartbeat once the grace period has passed."""
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        owner = TrialAttrs.of(trial).owner
        if owner and owner_is_dead(owner):
            fail_trial(
                study, trial, {KIND: INTERRUPTED, ERROR: "the tuner running this trial died"}
            )
            failed.append(trial.number)
    stale = {KIND: INTERRUPTED, ERROR: "the tuner running this trial stopped its heartbeat"}
    return failed + [n for n in fail_stale_trials(study, stale) if n not in failed]


@contextlib.contextmanager
def held_until_told(study: optuna.Study) -> Iterator[None]:
    """Mark the trials this process holds RUNNING as interrupted when a signal or an error
    stops it between asking a trial and telling it (a trial that was launched is told by its
    own handler, `trial_run`), so none is left running for a resume to wait on."""
    try:
        yield
    except BaseException:
        stopped = {KIND: INTERRUPTED, ERROR: "interrupted by the user (or a signal)"}
        me = owner_tag()
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if TrialAttrs.of(t).owner == me:
                fail_trial(study, t, stopped)
        raise


def ask_held(study: optuna.Study, distributions: dict[str, BaseDistribution]) -> optuna.Trial:
    """`study.ask`, the trial marked as held by this process (`owner_tag`)."""
    trial = study.ask(distributions)
    trial.set_user_attr(OWNER, owner_tag())
    return trial
