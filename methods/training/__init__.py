"""The training loop shared by every method, and its data pipeline."""
