"""Bearer tokens: one that may do everything, and one that may only read.

Off when neither is set (the default, for a server on the loopback interface; ``serve``
refuses any other address without a token unless told ``--insecure``). Once a token is
set, every endpoint but ``/healthz`` and ``/readyz`` needs one: reads take either token,
writes only the full one (with only a read-only token set, nothing may write). Tokens are
compared in constant time, each against both, so that neither the timing nor which
comparison ran tells anything about a token.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from simpleworkflow import errors
from simpleworkflow.web.problems import ApiProblem

TOKEN_ENV = "SIMPLEWORKFLOW_API_TOKEN"
READ_TOKEN_ENV = "SIMPLEWORKFLOW_API_READ_TOKEN"
#: Shorter tokens are refused: a token is a secret, not a password to remember.
MIN_TOKEN_LENGTH = 16

_bearer = HTTPBearer(auto_error=False, description="a token given to `simpleworkflow serve`")
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="simpleworkflow"'}


@dataclass(frozen=True, slots=True)
class Auth:
    """The server's tokens; both ``None`` means no authentication."""

    token: str | None = None
    read_token: str | None = None

    def __post_init__(self) -> None:
        for name, value in (("token", self.token), ("read_token", self.read_token)):
            if value is not None and (
                not isinstance(value, str)
                or len(value) < MIN_TOKEN_LENGTH
                or not value.isascii()
                or not value.isprintable()
                or " " in value
            ):
                raise errors.ConfigurationError(
                    f"the API {name.replace('_', '-')} must be at least {MIN_TOKEN_LENGTH} "
                    "printable ASCII characters without spaces; make one with "
                    "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
                )
        if self.token is not None and self.token == self.read_token:
            raise errors.ConfigurationError("the API token and read-only token must differ")

    @classmethod
    def from_env(cls, token: str | None = None, read_token: str | None = None) -> Auth:
        """The tokens given, else those of ``$SIMPLEWORKFLOW_API_TOKEN`` and
        ``$SIMPLEWORKFLOW_API_READ_TOKEN`` (an empty variable counts as unset)."""
        return cls(
            token=token or os.environ.get(TOKEN_ENV) or None,
            read_token=read_token or os.environ.get(READ_TOKEN_ENV) or None,
        )

    @property
    def enabled(self) -> bool:
        return self.token is not None or self.read_token is not None

    def level(self, given: str) -> str | None:
        """``"write"``, ``"read"`` or ``None`` for a presented token."""
        presented = given.encode()
        full = _same(presented, self.token)
        read = _same(presented, self.read_token)
        return "write" if full else "read" if read else None

    def reader(self) -> Any:
        """The dependency of an endpoint that reads."""
        return Depends(self._require(write=False))

    def writer(self) -> Any:
        """The dependency of an endpoint that writes."""
        return Depends(self._require(write=True))

    def authorize(self, authorization: str | None, *, write: bool) -> None:
        """Refuse (401, or 403 for a read-only token on a write) a request whose
        ``Authorization`` header does not allow it; nothing when auth is off."""
        if not self.enabled:
            return
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise ApiProblem(
                401,
                "unauthorized",
                "this server needs a bearer token: send `Authorization: Bearer <token>`",
                headers=_CHALLENGE,
            )
        level = self.level(given.strip())
        if level is None:
            raise ApiProblem(401, "unauthorized", "the token is not valid", headers=_CHALLENGE)
        if write and level != "write":
            raise ApiProblem(
                403,
                "forbidden",
                "this token may only read; a request that changes runs or types needs "
                "the full token",
            )

    def identifies(self, authorization: str | None) -> bool:
        """Whether the caller showed a valid token (either), and so may see what the
        server's configuration says (the database's name in an error); never when auth
        is off, since then nobody shows one."""
        if not self.enabled:
            return False
        try:
            self.authorize(authorization, write=False)
        except ApiProblem:
            return False
        return True

    def _require(self, *, write: bool) -> Callable[..., Awaitable[None]]:
        async def check(credentials: HTTPAuthorizationCredentials | None = _BEARER) -> None:
            header = None if credentials is None else f"Bearer {credentials.credentials}"
            self.authorize(header, write=write)

        async def open_door() -> None:
            return None

        return check if self.enabled else open_door


_BEARER = Depends(_bearer)


def _same(presented: bytes, token: str | None) -> bool:
    # An unset token is compared against a value no presented token equals (it is longer
    # than any header), so the work done is the same whether or not the token is set.
    expected = token.encode() if token is not None else b"\x00" * (len(presented) + 1)
    return hmac.compare_digest(presented, expected) and token is not None


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost``, ``127.0.0.1``, ``::1``)."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
