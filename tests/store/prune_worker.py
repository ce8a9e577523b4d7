"""A prune in a child process, to be killed (``test_retention_crash``).

``python -m tests.store.prune_worker URL SCHEMA ARCHIVE_DIR``: small pages and batches so
that a run of a few dozen sessions has many transactions to be killed in; prints ``ready``
once the store is open, then each session's id as it is deleted.
"""

from __future__ import annotations

import sys

from session_sql import PrunedSession, open_store
from session_sql._store import retention

FUTURE = 4_000_000_000_000


def main(url: str, schema: str, archive: str) -> None:
    retention.PAGE_SESSIONS = 7
    retention.BATCH_SESSIONS = 3
    retention.BATCH_EVENTS = 10

    def show(session: PrunedSession) -> None:
        sys.stdout.write(session.id + "\n")
        sys.stdout.flush()

    with open_store(url, schema=schema, create=False) as store:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        store.prune(updated_before=FUTURE, archive_dir=archive, progress=show)
    sys.stdout.write("done\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
