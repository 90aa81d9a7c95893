"""Who a request claims to be for, and where it claims to come from: the two checks that
keep another site's page from acting through a user's browser.

- **Host.** A page of ``evil.example`` whose name the attacker re-points at 127.0.0.1
  (DNS rebinding) reaches a server on the loopback interface from the user's browser, as
  its own origin: no cross-site check can tell. Its requests still say
  ``Host: evil.example``, so the server answers only the names it was told are its own.
- **Origin.** A browser says where a request that changes state came from (``Origin``,
  and ``Sec-Fetch-Site`` in browsers since 2020); a request from another site is refused.
  A client that is not a browser (curl, httpx, the CLI) sends neither, and is served.

Pure functions over headers, shared by the API's routes and the app's middleware.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from simpleworkflow import errors

#: Methods that change nothing, which the cross-site check leaves alone.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: The names of this machine, answered by default.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
ALLOWED_HOSTS_ENV = "SIMPLEWORKFLOW_ALLOWED_HOSTS"


@dataclass(frozen=True, slots=True)
class AllowedHosts:
    """The host names a server answers to. A name matches itself (any port); one that
    starts with a dot, ``.example.com``, matches its subdomains too; ``*`` matches any
    (for a server whose proxy checks the name). ``any_ip`` admits every IP literal: right
    for a server bound to every interface, since a rebound name is never an IP literal."""

    names: frozenset[str]
    any_ip: bool = False

    @classmethod
    def of(cls, names: Iterable[str] = (), *, any_ip: bool = False) -> AllowedHosts:
        """The loopback names and ``names`` (each checked)."""
        found = {_normal(name) for name in LOOPBACK_HOSTS}
        for name in names:
            if not isinstance(name, str) or not name.strip() or any(c in name for c in "/@ "):
                raise errors.ConfigurationError(
                    f"an allowed host is a host name, '.domain' for its subdomains too, or "
                    f"'*' for any; not {name!r}"
                )
            found.add(_normal(name.strip()))
        return cls(frozenset(found), any_ip)

    @classmethod
    def for_bind(cls, bound: str, extra: Iterable[str] = ()) -> AllowedHosts:
        """What ``serve`` answers on ``bound``: that address (every IP literal for a
        wildcard address), the loopback names, ``extra`` and those of
        ``$SIMPLEWORKFLOW_ALLOWED_HOSTS`` (comma-separated)."""
        names = [*extra, *from_env()]
        wildcard = bound in ("", "0.0.0.0", "::", "[::]")
        return cls.of([*names, *(() if wildcard else (bound,))], any_ip=wildcard)

    def allows(self, host_header: str | None) -> bool:
        """Whether a ``Host`` header names this server."""
        if "*" in self.names:
            return True
        if not host_header:
            return False
        host = _normal(_without_port(host_header))
        if host in self.names:
            return True
        if self.any_ip and _is_ip(host):
            return True
        return any(name.startswith(".") and host.endswith(name) for name in self.names)


def from_env() -> list[str]:
    """The names of ``$SIMPLEWORKFLOW_ALLOWED_HOSTS``, comma-separated."""
    text = os.environ.get(ALLOWED_HOSTS_ENV, "")
    return [name.strip() for name in text.split(",") if name.strip()]


def cross_site(method: str, headers: Mapping[str, str]) -> str | None:
    """Why a request that changes state must be refused as coming from another site, or
    ``None``. ``headers`` are lower-cased names (Starlette's ``Headers`` are)."""
    if method.upper() in SAFE_METHODS:
        return None
    fetch_site = headers.get("sec-fetch-site", "").lower()
    if fetch_site in ("cross-site", "same-site"):
        return f"the browser says it came from another site (Sec-Fetch-Site: {fetch_site})"
    origin = headers.get("origin")
    if origin is None:
        return None
    if origin == "null":
        return "it came from an opaque origin (Origin: null)"
    if urlsplit(origin).netloc.lower() != headers.get("host", "").lower():
        return f"it came from another site (Origin: {origin[:200]})"
    return None


def _without_port(host: str) -> str:
    host = host.strip()
    if host.startswith("["):  # [::1]:8000
        return host[1 : host.find("]")] if "]" in host else host
    if host.count(":") == 1:
        return host.partition(":")[0]
    return host


def _normal(name: str) -> str:
    return name.lower().strip("[]").rstrip(".") if name != "*" else name


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
