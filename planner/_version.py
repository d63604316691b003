"""The package version (one place: the plan files record it)."""

__version__ = "0.2.0"
