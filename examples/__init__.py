"""Runnable examples, from the repository root of a clone (this folder and ``tests/support/``, which the digits
example's local Hub comes from, are not part of the installed package), with the environment's own interpreter
and ``torchrun``: ``python -m examples.digits``, ``torchrun --standalone --nproc_per_node=2 -m examples.ddp_train``."""
