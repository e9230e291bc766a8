"""Lists every flag Megatron-LM's pretrain_gpt.py parser defines, for the export's parser test.

megatron-core's wheel ships no `megatron/training`, so this reads it from a Megatron-LM
checkout of the tag matching the installed megatron-core, e.g.

    git clone --branch core_v0.16.1 https://github.com/NVIDIA/Megatron-LM /tmp/Megatron-LM
    .venv/bin/python scripts/megatron_flags.py /tmp/Megatron-LM core_v0.16.1 \
        > tests/data/megatron_lm_flags.txt

Only the parser is built: tokenizer and logging packages it imports but never calls while
adding arguments are stood in for, and `megatron.training`'s own __init__ (which pulls in
CUDA-only kernels) is skipped.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import sys
import types
from pathlib import Path
from unittest import mock

OPTIONAL_IMPORTS = {"regex", "six", "sentencepiece", "tiktoken", "nltk", "wandb", "one_logger"}


class _StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in OPTIONAL_IMPORTS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = mock.MagicMock()
        module.__path__, module.__spec__ = [], spec
        return module

    def exec_module(self, module):
        pass


def main() -> None:
    checkout, tag = Path(sys.argv[1]).resolve(), sys.argv[2]
    sys.meta_path.append(_StandIn())
    sys.path.insert(0, str(checkout))
    training = types.ModuleType("megatron.training")
    training.__path__ = [str(checkout / "megatron" / "training")]
    training.__getattr__ = lambda name: mock.MagicMock(name=name)  # type: ignore[method-assign]
    sys.modules["megatron.training"] = training
    from megatron.training.arguments import add_megatron_arguments

    parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    print(f"# Flags of Megatron-LM {tag} megatron/training/arguments.py, made by")
    print("# scripts/megatron_flags.py. A flag followed by VALUE takes one; others are switches.")
    for flag, action in sorted(parser._option_string_actions.items()):
        if flag.startswith("--"):
            print(flag if action.nargs == 0 else f"{flag} VALUE")


if __name__ == "__main__":
    main()
