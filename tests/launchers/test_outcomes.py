"""How a launcher turns the files a trial left into an outcome kind and an error line."""

import json
import os
import time
from pathlib import Path

from autotune.launchers.base import LOG_FILE, classify, first_error_line
from autotune.launchers.slurm_accounting import finished
from autotune.trial.result import TrialResult


def write(folder: Path, name: str, data: dict) -> None:
    (folder / name).write_text(json.dumps(data))


def test_result_file_decides_success_not_the_log(tmp_path: Path) -> None:
    TrialResult(
        source="measured", step_time_s=2.0, tokens_per_s=1.0, tflops_per_device=0.1, mfu=None
    ).write(tmp_path)
    (tmp_path / LOG_FILE).write_text("RuntimeError: error error error\n")
    outcome = classify(tmp_path, 0, False, 1.0)
    assert outcome.kind == "ok" and outcome.result is not None
    assert outcome.result.step_time_s == 2.0


def test_a_result_file_without_its_figures_is_no_result(tmp_path: Path) -> None:
    write(tmp_path, "result.json", {"status": "ok", "tokens_per_s": 1.0})
    (tmp_path / LOG_FILE).write_text("RuntimeError: the worker died writing its result\n")
    outcome = classify(tmp_path, 1, False, 1.0)
    assert outcome.kind == "launch_error" and outcome.result is None
    assert outcome.error == "RuntimeError: the worker died writing its result"


def test_root_cause_beats_the_communication_errors_it_caused(tmp_path: Path) -> None:
    write(
        tmp_path,
        "error-rank0.json",
        {"kind": "comm_error", "time": 1.0, "error": "DistBackendError: peer closed"},
    )
    write(
        tmp_path,
        "error-rank1.json",
        {"kind": "oom", "time": 2.0, "error": "OutOfMemoryError: CUDA out of memory"},
    )
    outcome = classify(tmp_path, 1, False, 3.0)
    assert (outcome.kind, outcome.error) == ("oom", "OutOfMemoryError: CUDA out of memory")


def test_earliest_crash_wins(tmp_path: Path) -> None:
    write(tmp_path, "error-rank0.json", {"kind": "crash", "time": 5.0, "error": "B"})
    write(tmp_path, "error-rank1.json", {"kind": "crash", "time": 4.0, "error": "A"})
    assert classify(tmp_path, 1, False, 3.0).error == "A"


def test_timeout_when_killed_without_result(tmp_path: Path) -> None:
    assert classify(tmp_path, -9, True, 30.0).kind == "timeout"


def test_no_rank_reported_is_a_launch_error_with_the_log_line(tmp_path: Path) -> None:
    (tmp_path / LOG_FILE).write_text(
        "W1130 some warning\nTraceback (most recent call last):\n  File x\n"
        "ModuleNotFoundError: No module named 'deepspeed'\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: boom\n"
    )
    outcome = classify(tmp_path, 1, False, 2.0)
    assert outcome.kind == "launch_error"
    assert outcome.error == "ModuleNotFoundError: No module named 'deepspeed'"


def test_first_error_line_falls_back_to_last_line() -> None:
    assert first_error_line("starting\nbash: torchrun: command not found\n") == (
        "bash: torchrun: command not found"
    )
    assert first_error_line("") is None


def old_ok_result(folder: Path, age_s: float = 3600.0) -> None:
    TrialResult(
        source="measured", step_time_s=2.0, tokens_per_s=1.0, tflops_per_device=0.1, mfu=None
    ).write(folder)
    when = time.time() - age_s
    os.utime(folder / "result.json", (when, when))


def test_an_error_file_beats_an_old_result_left_in_the_folder(tmp_path: Path) -> None:
    old_ok_result(tmp_path)
    write(tmp_path, "error-rank0.json", {"kind": "oom", "time": 1.0, "error": "OOM now"})
    outcome = classify(tmp_path, 1, False, 1.0, since=time.time() - 1.0)
    assert (outcome.kind, outcome.error, outcome.result) == ("oom", "OOM now", None)
    assert classify(tmp_path, 1, False, 1.0).kind == "oom"  # without a start too


def test_a_result_older_than_the_launch_does_not_count(tmp_path: Path) -> None:
    old_ok_result(tmp_path)
    outcome = classify(tmp_path, 1, False, 1.0, since=time.time())
    assert outcome.kind == "launch_error" and outcome.result is None
    assert classify(tmp_path, 0, False, 1.0, since=time.time() - 3700.0).kind == "ok"


def test_a_rank_failing_in_teardown_after_the_result_leaves_the_trial_measured(
    tmp_path: Path,
) -> None:
    """Megatron-LM's logging rank writes the result once it has its steps; another rank that
    fails in the framework's teardown afterwards does not undo the measured trial, while an
    error written before the result does."""
    start = time.time() - 5.0
    old_ok_result(tmp_path, age_s=2.0)
    later = time.time() + 1.0
    write(tmp_path, "error-rank1.json", {"kind": "crash", "time": later, "error": "teardown"})
    assert classify(tmp_path, 1, False, 1.0, since=start).kind == "ok"
    write(tmp_path, "error-rank1.json", {"kind": "crash", "time": start + 1.0, "error": "mid"})
    assert classify(tmp_path, 1, False, 1.0, since=start).kind == "crash"


def test_a_submitted_trial_ends_in_any_final_state_slurm_lists() -> None:
    """squeue lists a job it has just ended under its final state: a node failure too."""
    assert all(finished(None, state) for state in ("", "NODE_FAIL", "PREEMPTED", "COMPLETED"))
    assert not any(finished(None, state) for state in ("PENDING", "RUNNING", "COMPLETING"))


TORCHRUN_FAILED = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
ex.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-06_23:55:56
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -15 (pid: 10153)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 10153
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-06_23:55:56
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : {code} (pid: 10152)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""
"""torchrun 2.13's log of a rank that ended by itself (os._exit), the other stopped."""


def test_a_ranks_own_exit_is_named_not_the_signal_that_stopped_the_others(
    tmp_path: Path,
) -> None:
    """`os._exit(3)` was recorded as a launch_error "got signal: 15": autotune's SIGTERM to
    the other rank."""
    (tmp_path / LOG_FILE).write_text(TORCHRUN_FAILED.format(code=3))
    outcome = classify(tmp_path, 1, False, 1.0)
    assert outcome.kind == "crash"
    assert outcome.error is not None and outcome.error.startswith("rank 0 exited with code 3")


def test_a_rank_killed_by_sigkill_is_named_so(tmp_path: Path) -> None:
    """Once a launch_error whose message was a row of "=" signs."""
    (tmp_path / LOG_FILE).write_text(TORCHRUN_FAILED.format(code=-9))
    outcome = classify(tmp_path, 1, False, 1.0)
    assert outcome.kind in ("oom", "crash")
    assert outcome.error is not None and "rank 0 was killed" in outcome.error
    pooled = classify(tmp_path / "none", -9, False, 1.0)  # a pool's rank answers its status
    assert pooled.error is not None and "killed" in pooled.error
