"""What the measurements say: between-launch noise, effort, the leaders' confirmation, loss
parity against the user's run, the winner's figures and the winner itself (`decide`)."""

from autotune.study.verdict.winner import Verdict, decide

__all__ = ["Verdict", "decide"]
