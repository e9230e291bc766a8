"""Launchers start a trial's processes, enforce its time limit and classify the outcome."""

from autotune.launchers.base import Launcher, LaunchOutcome, LaunchRequest, get_launcher

__all__ = ["LaunchOutcome", "LaunchRequest", "Launcher", "get_launcher"]
