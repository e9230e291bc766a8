"""Failures injected on purpose (AUTOTUNE_INJECT_FAULT), so tests can show each kind of
failure is recorded with its cause and the study goes on."""

from __future__ import annotations

import os
import time

import torch

from autotune.trial.spec import FAULT_ENV


def maybe_inject_fault(rank: int) -> None:
    fault = os.environ.get(FAULT_ENV)
    if rank != 0 or not fault:
        return
    if fault == "hang":
        time.sleep(10**6)
    if fault == "crash":
        raise RuntimeError("injected crash (AUTOTUNE_INJECT_FAULT=crash)")
    if fault == "oom":
        raise torch.OutOfMemoryError("injected out of memory (AUTOTUNE_INJECT_FAULT=oom)")
