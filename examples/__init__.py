"""Runnable examples (from the repository root): ``python -m examples.digits``, ``python -m examples.ddp_train``."""
