"""LangGraph checkpointers over a session_sql store (SPEC §12.4).

``SessionSQLSaver`` (over a ``SessionStore``) and ``AsyncSessionSQLSaver`` (over an
``AsyncSessionStore``) are ``BaseCheckpointSaver``\\ s. A thread is one session (every
checkpoint namespace of the thread lives in it); its log holds:

* ``langgraph/checkpoint``: one checkpoint, ``{ns, id, parent, checkpoint, metadata, versions,
  values}``, where ``values`` holds only the channels whose version changed (``new_versions``),
  so a checkpoint costs what changed. A list channel that grew (``messages`` under
  ``add_messages``) is stored as what was appended since an earlier version (``extends``:
  the seq of the event holding that one; see ``_write.blob``);
* ``langgraph/writes``: the pending writes of one task, ``{ns, checkpoint, task, path,
  writes: [{idx, channel, value}]}``;
* the ``messages`` channel's chat messages of the root namespace, as core ``user/message``,
  ``assistant/message`` and ``tool/result`` events on the surface, so that ``messages()``, the
  SQL views and ``session-sql show`` read the conversation;
* ``turn/start`` before each run of the graph (its input, a ``Command``, a resume, a run from
  a fork), and ``turn/end`` when a run stops at an ``interrupt()`` or an error; a run that
  finishes says so to no checkpointer, so its turn stays open until the next one starts.
  The run's messages carry its turn number, so the ``turns`` view has a row per run;
* ``langgraph/moved``: the last event of a thread rewritten by ``prune`` or
  ``delete_for_runs`` (see below), then ``langgraph/settled`` once the move settled;
* ``langgraph/moving``: the end of a new generation's seed, pending until ``langgraph/settled``.

A value is stored as ``{"json": value}`` when it is JSON (so SQL reads it) and as
``{"serde": type, "b64": bytes}`` through the saver's ``serde`` otherwise. The integration's
types are written ``ignorable``: every store reads them, with or without this module.

``delete_thread`` and ``prune(strategy="delete")`` delete the thread's session.
``prune(strategy="keep_latest")`` and ``delete_for_runs`` rewrite a thread into a new
*generation* (``<id>~<n>``): the old session is sealed by a ``langgraph/moved`` event that
names the new one and the operation (appended only if nobody appended meanwhile), the new
session is created with the kept checkpoints in one transaction, *pending*; both are marked
settled in one transaction (which needs the old one still there), then the old one is
deleted. Whoever finds a sealed session without its successor, or a pending one (a crash
between the steps), finishes the move, which is deterministic; so readers see the thread
before or after the operation, never in between, and the removed rows leave the database.
``delete_thread`` deletes generations until none is left: a move whose old session it
deleted cannot settle, and its pending session is deleted, so deleting wins. A thread id no
label can hold is kept in labels in base64 pieces (``_ids.labels``). ``copy_thread`` is a
fork.

The package: ``_codec`` (values), ``_ids`` (names), ``_index`` (a thread's log, folded),
``_surface`` (the messages on the surface), ``_read`` and ``_write`` (what a call answers and
writes, planned without I/O), ``_ops`` (each call's store calls, written once as generators),
``_saver`` (the methods, sync and async), ``_sync`` and ``_async`` (how each saver runs them).

Needs the extra: ``pip install 'session-sql[langgraph]'``.
"""

from __future__ import annotations

from session_sql.integrations._requires import requires

with requires("langgraph", "LangGraph", "langgraph"):
    import langchain_core.runnables  # noqa: F401
    import langgraph.checkpoint.base  # noqa: F401

from ._async import AsyncSessionSQLSaver
from ._codec import MAX_INT as MAX_INT
from ._ids import CHECKPOINT_TYPE, MOVED_TYPE, WRITES_TYPE
from ._ids import ID_PREFIX as ID_PREFIX
from ._ids import MAX_ATTEMPTS as MAX_ATTEMPTS
from ._ids import SOURCE_KIND as SOURCE_KIND
from ._ids import THREAD_LABEL as THREAD_LABEL
from ._ids import Batch as Batch
from ._sync import SessionSQLSaver

# the public path, in reprs, help() and pickles, is the package's
AsyncSessionSQLSaver.__module__ = SessionSQLSaver.__module__ = __name__

__all__ = [
    "CHECKPOINT_TYPE",
    "MOVED_TYPE",
    "WRITES_TYPE",
    "AsyncSessionSQLSaver",
    "SessionSQLSaver",
]
