"""The package's version: the one place it is written (setuptools, ``--version`` and the Hub user-agent read it)."""

__version__ = "0.1.0"
