"""Threads burning CPU in pure Python: a process busy with work of its own.

Both ``load --busy-threads`` (a client computing features between calls) and
``service --busy-threads`` (a server whose GIL is taken outside its handlers)
use them: every thread that wants the GIL back then waits up to the 5 ms switch
interval per busy thread, which is what a saturated Python process does to the
phases around its calls.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def busy_threads(count: int) -> Iterator[None]:
    """``count`` threads burning CPU in pure Python (holding the GIL) until the block ends."""
    stop = threading.Event()

    def burn() -> None:
        total = 0
        while not stop.is_set():
            for number in range(2_000):
                total += number

    threads = [threading.Thread(target=burn, name=f"busy-{i}", daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)
