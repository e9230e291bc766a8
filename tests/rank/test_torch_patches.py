"""A warm pool's rank puts back what a trial patched in torch's namespaces, so the next
trial runs torch's own code, as a fresh launch of its config does."""

from __future__ import annotations

import types

from autotune.rank.torch_patches import note, put_back


class Base:
    def step(self) -> str:
        return "inherited"


class Tensorish(Base):
    def add(self) -> str:
        return "own"

    @classmethod
    def dispatch(cls) -> str:
        return "own"


def namespaces() -> tuple[tuple[str, types.ModuleType | type], ...]:
    functional = types.ModuleType("functional")
    functional.linear = lambda: "torch's"  # type: ignore[attr-defined]
    functional.version = "1"  # type: ignore[attr-defined]
    return (("functional", functional), ("Tensorish", Tensorish))


def test_a_replaced_function_and_a_shadowed_method_are_put_back() -> None:
    spaces = namespaces()
    functional = spaces[0][1]
    noted = note(spaces)
    originals = {k: vars(Tensorish)[k] for k in ("add", "dispatch")}
    functional.linear = lambda: "the engine's"  # type: ignore[attr-defined]
    Tensorish.add = lambda self: "patched"  # type: ignore[method-assign]
    Tensorish.dispatch = classmethod(lambda cls: "patched")  # type: ignore[method-assign, assignment]
    Tensorish.step = lambda self: "patched"  # type: ignore[method-assign]
    try:
        assert put_back(noted) == [
            "Tensorish.add",
            "Tensorish.dispatch",
            "Tensorish.step",
            "functional.linear",
        ]
        assert functional.linear() == "torch's"  # type: ignore[attr-defined]
        assert Tensorish().add() == "own" and Tensorish().step() == "inherited"
        assert Tensorish.dispatch() == "own"
        assert put_back(noted) == []  # nothing left to put back
    finally:
        for key, value in originals.items():
            setattr(Tensorish, key, value)
        if "step" in vars(Tensorish):
            del Tensorish.step


def test_what_a_trial_added_or_set_as_data_stays() -> None:
    """A submodule imported during a trial arrives as a new attribute, and a module's data
    may change: neither is a patch of torch's code."""
    spaces = namespaces()
    functional = spaces[0][1]
    noted = note(spaces)
    functional.lazily_imported = types.ModuleType("sub")  # type: ignore[attr-defined]
    functional.version = "2"  # type: ignore[attr-defined]
    Tensorish.cache = {}  # type: ignore[attr-defined]
    try:
        assert put_back(noted) == []
        assert functional.version == "2"  # type: ignore[attr-defined]
    finally:
        del Tensorish.cache  # type: ignore[attr-defined]
