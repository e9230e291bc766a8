"""What a trial's engine swapped in torch's own namespaces, put back before the next trial in
a warm pool.

Engines patch torch for the life of a process: DeepSpeed's ZeRO-3 replaces
`torch.nn.functional.linear` with its own autograd function and says so ("This will persist
unless manually reset"). A fresh launch of a ZeRO-0 config never runs it, but in a warm pool
every trial after a ZeRO-3 one did, and read up to a fifth slower than its launch. A pool's
rank notes torch's functions, classes and methods once its imports are done and, after
each trial, puts back any a trial replaced, and removes a method a trial set on a class over
the one it inherits. Other attributes a trial added are left: torch's lazily imported submodules
arrive that way. A patch torch makes once per process behind a flag of its own (Dynamo's of
`Module.__init__` at its first compile) would be undone for good; no warm pool's engine
compiles.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import MappingProxyType, ModuleType

import torch

NAMESPACES: tuple[tuple[str, ModuleType | type], ...] = (
    ("torch", torch),
    ("torch.nn.functional", torch.nn.functional),
    ("torch.nn.init", torch.nn.init),
    ("torch.distributed", torch.distributed),
    ("torch.Tensor", torch.Tensor),
    ("torch.nn.Module", torch.nn.Module),
)
"""The namespaces engines patch: tensor constructors, functional ops, weight initialisers,
collectives, and the methods of every tensor and module."""


@dataclass(frozen=True)
class Namespace:
    """One namespace's attributes as the pool's imports left them."""

    name: str
    space: ModuleType | type
    code: MappingProxyType[str, object]
    names: frozenset[str]


def note(namespaces: tuple[tuple[str, ModuleType | type], ...] = NAMESPACES) -> list[Namespace]:
    """Each namespace's code as it is now: functions, classes, and a class's class methods
    and properties. Noted after `torch._dynamo` is imported: the first trial imports it (the
    profiler does) and it wraps `torch.manual_seed` as torch's own, as in every fresh
    launch."""
    importlib.import_module("torch._dynamo")
    return [
        Namespace(
            name,
            space,
            MappingProxyType({k: v for k, v in vars(space).items() if is_code(v)}),
            frozenset(vars(space)),
        )
        for name, space in namespaces
    ]


def is_code(value: object) -> bool:
    """Python 3.11's class methods and properties are not callable, yet are patched too."""
    return callable(value) or isinstance(value, (classmethod, property))


def put_back(noted: list[Namespace]) -> list[str]:
    """Every noted piece of code a trial replaced, restored, and every method it set on a
    class over an inherited one, removed; their dotted names."""
    restored = []
    for ns in noted:
        now = dict(vars(ns.space))
        for key, value in ns.code.items():
            if now.get(key) is not value:
                setattr(ns.space, key, value)
                restored.append(f"{ns.name}.{key}")
        if isinstance(ns.space, type):
            for key in now.keys() - ns.names:
                if any(key in vars(base) for base in ns.space.__mro__[1:]):
                    delattr(ns.space, key)
                    restored.append(f"{ns.name}.{key}")
    return sorted(restored)
