"""The import guard of an integration: its framework missing, say which extra installs it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def requires(module: str, what: str, extra: str) -> Iterator[None]:
    """Around an integration's framework imports: an ``ImportError`` names ``what`` the
    module ``session_sql.integrations.<module>`` needs and the extra that installs it."""
    try:
        yield
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"session_sql.integrations.{module} needs {what}: pip install 'session-sql[{extra}]'"
        ) from exc
