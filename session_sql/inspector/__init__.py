"""The read-only web inspector of ``session-sql serve`` and ``session-sql view`` (SPEC §12.5).

An extra (``session-sql[serve]``): Starlette and uvicorn are needed by ``app`` and by
``serve`` only; ``view`` (``render_file``) needs neither. ``outline`` reads the whole-log facts
of a session page, ``api`` the data and JSON shapes, ``page`` the HTML, ``assets`` the style
sheet and script. See docs/inspector.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from session_sql.inspector.api import session_view
from session_sql.inspector.page import session_page

if TYPE_CHECKING:
    from session_sql import SessionStore

__all__ = ["render_file"]


def render_file(store: SessionStore, session_id: str, *, last: int | None = None) -> str:
    """One session as a self-contained HTML page (no script, no network): the whole log, or
    its ``last`` events."""
    head = store.head_seq(session_id)
    start = None if last is None else max(0, head - last + 1)
    view = session_view(store, session_id, from_seq=start or 0, limit=None, surface_last=None)
    return session_page(view, standalone=True)
