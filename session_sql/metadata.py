"""Reading the session row an export carries in its header (``x-session-sql``), as public names.

``export_jsonl`` writes the row's tenant, user id, title, labels and last-write time under
``EXPORT_KEY``; ``import_jsonl`` takes them out again. ``split_export_header`` is that reading,
for a tool that needs to know what a file records before importing it (``session-sql import
--restore-tenants`` opens the store of the file's tenant). ``HIDDEN_LABEL`` is the label that
keeps a session out of the default listings (``list_sessions(include_hidden=False)``).
"""

from __future__ import annotations

from session_sql._store.metadata import (
    EXPORT_KEY,
    HIDDEN_LABEL,
    Exported,
    Metadata,
    split_export_header,
)

__all__ = ["EXPORT_KEY", "HIDDEN_LABEL", "Exported", "Metadata", "split_export_header"]
