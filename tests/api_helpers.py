"""What the HTTP API's tests share: the app driven in-process through httpx's ASGI
transport, and ``simpleworkflow serve`` as a real process on a free port."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

import httpx
from conftest import Store, stop_processes

from simpleworkflow import AsyncClient
from simpleworkflow.server import Auth, create_app

PREFIX = "/api/v1"
TOKEN = "write-token-0123456789abcdef"
READ_TOKEN = "read-token-0123456789abcdef"


class Api:
    """The API app in this process, on a private event loop, with the store's client:
    each call sends one request through the ASGI interface and returns the response."""

    def __init__(
        self,
        store: Store,
        *,
        auth: Auth | None = None,
        build: Callable[[AsyncClient], Any] | None = None,
        **options: Any,
    ) -> None:
        """``build(client)`` makes the ASGI app instead of ``create_app``."""
        self._loop = asyncio.new_event_loop()
        self.client = AsyncClient(store.url, schema=store.schema)
        self.app = build(self.client) if build else create_app(self.client, auth=auth, **options)
        transport = httpx.ASGITransport(app=self.app)
        self._http = httpx.AsyncClient(transport=transport, base_url="http://localhost")

    def request(self, method: str, url: str, **options: Any) -> httpx.Response:
        return self._loop.run_until_complete(self._http.request(method, url, **options))

    def get(self, url: str, **options: Any) -> httpx.Response:
        return self.request("GET", url, **options)

    def post(self, url: str, **options: Any) -> httpx.Response:
        return self.request("POST", url, **options)

    def delete(self, url: str, **options: Any) -> httpx.Response:
        return self.request("DELETE", url, **options)

    def start(self, type: str, payload: Any = None, **options: Any) -> dict[str, Any]:
        """Start a run through the API; return its body (the start must succeed)."""
        response = self.post(f"{PREFIX}/runs", json={"type": type, "payload": payload, **options})
        assert response.status_code in (200, 201), response.text
        body: dict[str, Any] = response.json()
        return body

    def close(self) -> None:
        self._loop.run_until_complete(self._http.aclose())
        self._loop.run_until_complete(self.client.aclose())
        self._loop.close()


def assert_problem(response: httpx.Response, status: int, *words: str) -> dict[str, Any]:
    """The response is an RFC 9457 problem with ``status`` whose detail says ``words``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json", response.headers
    body: dict[str, Any] = response.json()
    assert body["status"] == status and body["title"] and body["type"].startswith("urn:"), body
    for word in words:
        assert word in body["detail"], (word, body["detail"])
    return body


@contextlib.contextmanager
def served(store: Store, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """``simpleworkflow serve --port 0`` on the store; yields its base URL
    (``http://127.0.0.1:PORT``); stopped with SIGTERM at the end. The API's token
    variables of this environment are left out (``env`` may set them)."""
    with serving(store, *args, env=env) as (base, _):
        yield base


@contextlib.contextmanager
def serving(
    store: Store, *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """:func:`served`, also yielding the server's process (to stop it in the test)."""
    command = [sys.executable, "-m", "simpleworkflow", "serve", "--port", "0", *args]
    environment = {k: v for k, v in store.env.items() if not k.startswith("SIMPLEWORKFLOW_API_")}
    with tempfile.TemporaryFile("w+") as log:  # the server's log, read back if it fails
        proc = subprocess.Popen(
            command,
            env={**environment, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.startswith("serving the API on http://"), line + _rest(proc, log)
            base = line.split()[4].removesuffix(PREFIX)
            _wait_ready(base, proc, log)
            yield base, proc
        finally:
            if proc.poll() is None:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(15)
            stop_processes([proc])


def _wait_ready(base: str, proc: subprocess.Popen[str], log: IO[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, _rest(proc, log)
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return
        time.sleep(0.05)
    raise AssertionError(f"the server at {base} did not answer /healthz within 30 s")


def _rest(proc: subprocess.Popen[str], log: IO[str]) -> str:
    """What a server that failed printed (it is killed first if it still runs)."""
    if proc.poll() is None:
        proc.kill()
    out, _ = proc.communicate(timeout=10)
    log.seek(0)
    return f"{out}\n{log.read()}"
