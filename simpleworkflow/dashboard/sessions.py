"""Who is asking, and whether a form that changes state really came from the dashboard.

The dashboard takes the API's tokens (:class:`~simpleworkflow.web.auth.Auth`): a
browser logs in once with a token and gets a session cookie (HttpOnly, SameSite=Strict,
Secure over https); a script may send ``Authorization: Bearer <token>`` instead. The
cookie holds no token: it is ``level.issued.nonce.mac``, signed with a key derived from
the token of that level, so it survives a restart, and changing a token ends its
sessions. With no token configured (the loopback default) every visitor gets a session
that may write, signed with a key of this process.

A session ends on the server, not only in the browser: its cookie carries the time it was
issued, under the signature, and is refused once the lifetime has passed. Logging out
ends it at once, for every process that shares the store: its nonce is written to the
store (``workflow_dashboard_logout``, through the admin facade) until the session would
have expired anyway. Every request of a logged-in session is checked against this
process's own record of logouts first, then, on a miss, against the store's (one read by
primary key); when the store cannot answer, the request is refused (a 503 page), never
let in unchecked. Sessions no token opened are never looked up: there is nothing to end.

Every state-changing request is checked twice against cross-site forgery: its Origin
(when the browser sends one) must be this site's, and a cookie session must present its
CSRF token (a MAC of its nonce) in a hidden form field or the ``X-CSRF-Token`` header.
A request with a bearer token needs no CSRF token: a browser never adds that header by
itself.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, Protocol
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from simpleworkflow.admin.verbs import SESSION_CLOCK_SKEW
from simpleworkflow.web.auth import Auth

COOKIE = "simpleworkflow_dashboard"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
#: How long a session lasts by default: a working day.
DEFAULT_LIFETIME_SECONDS = 12 * 3600
#: How far the clocks of processes that share the sessions may disagree.
CLOCK_SKEW_SECONDS = SESSION_CLOCK_SKEW
#: The most logged-out sessions this process remembers at once (about 100 bytes each);
#: past it the oldest are forgotten first, and are found in the store instead. Only
#: sessions opened with a token are remembered.
MAX_REVOKED = 100_000

Level = Literal["write", "read"]


class Logouts(Protocol):
    """Where logouts are shared by every process: the store, through
    :class:`~simpleworkflow.admin.AsyncAdmin`."""

    async def end_dashboard_session(self, nonce: str, expires_at: datetime) -> None: ...

    async def dashboard_session_ended(self, nonce: str) -> bool: ...


class Refused(Exception):
    """A request the dashboard will not serve: ``status`` 401 (log in), 403 (forbidden)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Session:
    """One visitor: what they may do, and the CSRF token their forms carry."""

    #: ``None``: not logged in (only the login page is served).
    level: Level | None
    nonce: str
    csrf: str
    #: Came with a bearer token rather than a cookie: no CSRF token needed.
    bearer: bool = False
    #: A cookie to set on the response (a new session); ``None`` to leave it.
    cookie: str | None = None
    #: When it ends (seconds since the epoch): the server refuses its cookie afterwards.
    expires: float = math.inf

    @property
    def can_read(self) -> bool:
        return self.level is not None

    @property
    def can_write(self) -> bool:
        return self.level == "write"


class Sessions:
    """Issues and checks sessions for one :class:`Auth`. ``shared`` gives the store's
    record of logouts (called when first needed: the dashboard opens its client lazily);
    without it, logouts are this process's alone."""

    def __init__(
        self,
        auth: Auth,
        lifetime: float = DEFAULT_LIFETIME_SECONDS,
        clock: Callable[[], float] = time.time,
        shared: Callable[[], Logouts] | None = None,
    ) -> None:
        self.auth = auth
        self.lifetime = lifetime
        self._clock = clock
        self._shared = shared
        # Signs sessions that no token backs: the open door, and visitors not logged in.
        self._process_key = secrets.token_bytes(32)
        # Logged-out sessions' nonces, with when each would have expired anyway.
        self._revoked: dict[str, float] = {}

    async def of(self, request: Request) -> Session:
        """The request's session: from its bearer token, its cookie, or a new one.
        :class:`~simpleworkflow.errors.StoreUnavailable` when the store's record of
        logouts must be read and cannot be."""
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if self.auth.enabled and scheme.lower() == "bearer" and given.strip():
            level = self.auth.level(given.strip())
            if level is None:
                raise Refused(401, "the bearer token is not valid")
            return Session(level=_level(level), nonce="", csrf="", bearer=True)
        found = self._verify(request.cookies.get(COOKIE, ""))
        if found is not None and not await self._ended(found):
            return found
        return self.issue(None if self.auth.enabled else "write")

    async def _ended(self, session: Session) -> bool:
        """Whether another process (or this one, before a restart) logged ``session``
        out; a logout found is remembered here, so its cookie is not looked up again."""
        if self._shared is None or not self._can_end(session):
            return False
        if not await self._shared().dashboard_session_ended(session.nonce):
            return False
        self._remember(session)
        return True

    def _can_end(self, session: Session) -> bool:
        """Only a session a token opened can be logged out (anyone may get another)."""
        return not session.bearer and session.level is not None and self.auth.enabled

    def issue(self, level: Level | None) -> Session:
        """A new session (a new nonce, so a new CSRF token) with its cookie to set."""
        nonce = secrets.token_urlsafe(18)
        name = level or "anonymous"
        key = self._key(name)
        assert key is not None, "a session is issued only for a level that has a key"
        issued = int(self._clock())
        signed = f"{name}.{issued}.{nonce}"
        return Session(
            level,
            nonce,
            _mac(key, f"csrf.{nonce}"),
            cookie=f"{signed}.{_mac(key, signed)}",
            expires=issued + self.lifetime,
        )

    def log_in(self, token: str) -> Session | None:
        """The session a token opens, or ``None`` for a wrong token."""
        level = self.auth.level(token) if self.auth.enabled else "write"
        return None if level is None else self.issue(_level(level))

    async def log_out(self, session: Session) -> None:
        """End ``session`` now, in every process sharing the store: its cookie, and so
        its CSRF token, are refused from here on. This process refuses it even when the
        store cannot record it (that raises :class:`~simpleworkflow.errors.
        StoreUnavailable`). A session no token opened has nothing to end."""
        if not self._can_end(session):
            return
        self._remember(session)
        if self._shared is not None:
            expires = datetime.fromtimestamp(session.expires, UTC)
            await self._shared().end_dashboard_session(session.nonce, expires)

    def _remember(self, session: Session) -> None:
        now = self._clock()
        for nonce in [n for n, until in self._revoked.items() if until <= now]:
            del self._revoked[nonce]
        while len(self._revoked) >= MAX_REVOKED:
            del self._revoked[next(iter(self._revoked))]
        self._revoked[session.nonce] = session.expires

    def check_form(self, request: Request, session: Session, presented: str | None) -> None:
        """Refuse a state-changing request from another site, or without the CSRF token of
        its session."""
        origin = request.headers.get("origin")
        if origin is not None and origin != "null" and urlsplit(origin).netloc != _host(request):
            raise Refused(403, "refused: this request came from another site (its Origin)")
        if origin == "null" or request.headers.get("sec-fetch-site") == "cross-site":
            raise Refused(403, "refused: this request came from another site")
        if session.bearer:
            return
        given = presented or request.headers.get(CSRF_HEADER, "")
        if not (session.csrf and hmac.compare_digest(given.encode(), session.csrf.encode())):
            raise Refused(
                403, "refused: the form's CSRF token is missing or stale; reload the page"
            )

    def _verify(self, cookie: str) -> Session | None:
        """The session of a cookie this server signed, unexpired and not logged out."""
        parts = cookie.split(".")
        if len(parts) != 4:
            return None
        name, issued, nonce, mac = parts
        key = self._key(name)
        if (
            key is None
            or not nonce
            or not (issued.isascii() and issued.isdigit() and len(issued) <= 12)
            or not hmac.compare_digest(mac.encode(), _mac(key, f"{name}.{issued}.{nonce}").encode())
        ):
            return None
        expires = int(issued) + self.lifetime
        now = self._clock()
        if not int(issued) - CLOCK_SKEW_SECONDS <= now < expires or nonce in self._revoked:
            return None
        level = None if name == "anonymous" else _level(name)
        if level is not None and not self.auth.enabled and level != "write":
            return None
        return Session(level, nonce, _mac(key, f"csrf.{nonce}"), expires=expires)

    def _key(self, name: str) -> bytes | None:
        if name == "anonymous" or (name == "write" and not self.auth.enabled):
            return self._process_key
        token = {"write": self.auth.token, "read": self.auth.read_token}.get(name)
        if token is None:
            return None
        return hashlib.sha256(b"simpleworkflow dashboard session\0" + token.encode()).digest()


def set_cookie(response: Response, request: Request, session: Session) -> None:
    """Set the session's cookie on ``response`` if it is new; scoped to where the
    dashboard is mounted."""
    if session.cookie is None:
        return
    response.set_cookie(
        COOKIE,
        session.cookie,
        max_age=max(1, math.ceil(session.expires - time.time())),
        path=_cookie_path(request),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def clear_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(COOKIE, path=_cookie_path(request), httponly=True, samesite="strict")


def _cookie_path(request: Request) -> str:
    return str(request.scope.get("root_path") or "") + "/"


def _host(request: Request) -> str:
    return request.headers.get("host", "")


def _level(level: str) -> Level:
    return "write" if level == "write" else "read"


def _mac(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()[:40]
