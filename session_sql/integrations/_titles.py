"""A session title from a framework's own name for it (an id, a first message).

A title is at most 1,000 printable characters (``update_session``); a framework's name may be
longer or hold line breaks, so it is made one printable line, cut with an ellipsis.
"""

from __future__ import annotations

MAX_TITLE = 1000


def title_of(text: object) -> str | None:
    """``text`` as a title: whitespace runs as one space, other unprintables dropped, cut to
    ``MAX_TITLE`` characters; None when nothing is left (or ``text`` is not a string)."""
    if not isinstance(text, str):
        return None
    spaced = "".join(" " if ch.isspace() else ch for ch in text if ch.isprintable() or ch.isspace())
    line = " ".join(spaced.split())
    if len(line) > MAX_TITLE:
        line = line[: MAX_TITLE - 1] + "…"
    return line or None
