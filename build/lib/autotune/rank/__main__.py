"""Every rank's entry: `python -m autotune.rank MODULE ARG...`.

It notes the clock before anything heavy is imported, then imports MODULE (an engine's or a
framework's rank worker, a pool's rank, commbench's worker) and calls its
`main(args, started)`, so a trial's import time is measured from here and no worker module
has to take the time before its own imports. Compiled ops come from this install's own
folder (`build_lock.py`); DeepSpeed's CPU allreduce buffers are unlinked as it ends
(`shared_buffers.py`).
"""

import importlib
import sys
import time

from autotune.rank import shared_buffers
from autotune.rank.build_lock import use_install_folder


def main() -> None:
    started = time.time()
    if len(sys.argv) < 2:
        sys.exit("usage: python -m autotune.rank MODULE ARG...")
    module, *args = sys.argv[1:]
    use_install_folder()  # before any engine is imported
    try:
        importlib.import_module(module).main(args, started)
    finally:  # a worker that returns or raises (one that ends by `exit_now` releases there)
        shared_buffers.release()


if __name__ == "__main__":
    main()
