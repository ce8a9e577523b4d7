"""The read-only web inspector of ``session-sql serve`` and ``session-sql view`` (SPEC §12.5).

An extra (``session-sql[serve]``): Starlette and uvicorn are needed by ``app`` and by
``serve`` only; ``view`` (``render_file``) needs neither. ``outline`` reads the whole-log facts
of a session page and its pages of surface, ``api`` the data and JSON shapes, ``search`` the
text search over a session's messages, ``page`` and ``timeline`` the HTML, ``assets`` the
style sheet and script. See docs/inspector.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from session_sql.inspector.api import session_view
from session_sql.inspector.page import session_page

if TYPE_CHECKING:
    from session_sql import SessionStore

__all__ = ["VIEW_LAST", "render_file"]

VIEW_LAST = 1000
"""What ``render_file`` (and ``session-sql view``) holds by default: the last 1000 events of
the log and the last 1000 surface nodes, a page of a few MB at most whatever the session's
length (each event's data and each node's text is cut at 8000 characters)."""


def render_file(store: SessionStore, session_id: str, *, last: int | None = VIEW_LAST) -> str:
    """One session as a self-contained HTML page (no script, no network): its last ``last``
    events and its last ``last`` surface nodes (None: the whole log and surface)."""
    head = store.head_seq(session_id)
    start = 0 if last is None else max(0, head - last + 1)
    view = session_view(store, session_id, from_seq=start, limit=None, surface_limit=last)
    return session_page(view, standalone=True)
