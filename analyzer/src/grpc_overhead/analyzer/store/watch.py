"""Stop a user's query when its caller goes away: one watcher thread per query.

Both backends tag a user query (chDB: ``log_comment``; a server: its
``query_id``) and hand ``watch`` a function that kills it by that tag from a
connection of its own. The query's own thread is inside the engine and cannot
be interrupted from Python, so the kill has to come from beside it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from grpc_overhead.analyzer.store.user_statements import Abandoned

#: How often a running user query checks whether its caller is still there.
POLL_S = 0.2


@contextlib.contextmanager
def watch(abandoned: Abandoned | None, kill: Callable[[], None]) -> Iterator[None]:
    """While the block runs, call ``kill()`` once ``abandoned()`` turns True."""
    if abandoned is None:
        yield
        return
    finished = threading.Event()

    def run() -> None:
        while not finished.wait(POLL_S):
            if abandoned():
                with contextlib.suppress(Exception):  # already over: nothing to kill
                    kill()
                return

    watcher = threading.Thread(target=run, name="user-query-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        finished.set()
        watcher.join()
