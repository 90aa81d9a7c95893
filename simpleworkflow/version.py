"""The package's version, in a module of its own so that the worker can record it
without importing the package's top (which imports the worker)."""

__version__ = "0.1.0"
