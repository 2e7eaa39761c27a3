"""The task front: repository snapshots, the bug generator, ingestion, validation, the split."""
