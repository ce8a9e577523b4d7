"""SQLite's package: its backend, append transaction, error translation and quick reader."""
