"""The one error tree of simpleworkflow.

Every error the library raises on purpose derives from :class:`SimpleWorkflowError`,
and each message says what was wrong and what to do about it::

    SimpleWorkflowError
    ├── ConfigurationError          bad database URL, unknown scheme, missing extra
    ├── InvalidInput (ValueError)   refused before anything is stored
    │   ├── InvalidTypeName         not <domain>.<subdomain>.<action>.vN
    │   ├── InvalidPayload          not JSON, NaN, bytes, NUL characters ...
    │   │   └── PayloadTooLarge     over the configured size limit
    │   └── InvalidArgument         priority, delay, cursor, limit ...
    ├── RunNotFound (LookupError)   no run with that id
    ├── WaitTimeout (TimeoutError)  wait() ran out of time; the run goes on
    ├── SchemaError                 the database schema is missing or older than the code
    ├── StoreUnavailable            the database could not be reached or went away
    ├── PermanentError              raised by a handler: fail the run now, never retry
    └── HandlerTimeout              a handler ran past its timeout (retried like any error)

    BaseException
    └── Cancelled                   raised in a handler by ctx.raise_if_cancelled()

``Cancelled`` derives from ``BaseException`` so that an ``except Exception:`` in a
handler cannot swallow the request to stop.
"""

from __future__ import annotations


class SimpleWorkflowError(Exception):
    """Base class of every error raised by simpleworkflow."""


class ConfigurationError(SimpleWorkflowError):
    """The library was configured with something it cannot use."""


class InvalidInput(SimpleWorkflowError, ValueError):
    """An argument was refused before anything was written."""


class InvalidTypeName(InvalidInput):
    """A workflow type name does not follow ``<domain>.<subdomain>.<action>.vN``."""


class InvalidPayload(InvalidInput):
    """A payload or result cannot be stored as JSON in every backend."""


class PayloadTooLarge(InvalidPayload):
    """A payload or result is larger than the configured limit."""


class InvalidArgument(InvalidInput):
    """Some other argument (priority, delay, limit, cursor ...) is out of range."""


class RunNotFound(SimpleWorkflowError, LookupError):
    """No run has the given id (or the id is not a run id at all)."""

    def __init__(self, run_id: str, reason: str = "") -> None:
        self.run_id = run_id
        detail = f" ({reason})" if reason else ""
        super().__init__(
            f"no workflow run with id {run_id!r}{detail}; "
            "check the id, or list runs with `simpleworkflow runs list`"
        )


class WaitTimeout(SimpleWorkflowError, TimeoutError):
    """``wait()`` gave up before the run reached a terminal state."""


class SchemaError(SimpleWorkflowError):
    """The database schema is missing or older than this version of simpleworkflow."""


class StoreUnavailable(SimpleWorkflowError):
    """The database could not be reached, or the connection broke mid-operation."""


class PermanentError(SimpleWorkflowError):
    """Raise (or subclass) in a handler for a failure that no retry can fix."""


class HandlerTimeout(SimpleWorkflowError, TimeoutError):
    """A handler ran longer than the timeout of its workflow definition."""


class Cancelled(BaseException):
    """The attempt must stop: the run was cancelled, its lease was lost, or the worker stops."""
