"""Bring your history: past incidents read from the tools a team already uses, filed as incidents and memory.

`record.py` is the one shape every source reads into; `sources/` holds one reader per tool; the importer files the
records through the org handle (re-import is an update keyed by source and source id)."""
