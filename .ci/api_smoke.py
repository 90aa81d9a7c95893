"""The HTTP API of an installed simpleworkflow, as a first user meets it (.ci/wheel-smoke).

Serves ``simpleworkflow serve --port 0`` (the command given as the first argument) on a
new SQLite file in the current directory, then asks ``/readyz``, starts a run with
``POST /api/v1/runs``, reads it back with ``GET /api/v1/runs/{id}``, and checks that the
OpenAPI document and the dashboard's assets are served. Standard library only: it runs in
the virtualenv the wheel was installed in, with nothing else.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from typing import Any

TYPE = "smoke.check.v1"


def call(base: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        base + path, data=data, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
        kind = response.headers.get("content-type", "")
        return response.status, json.loads(text) if "json" in kind else text


def check(what: str, condition: bool, detail: Any = "") -> None:
    if not condition:
        sys.exit(f"FAILED: {what} {detail}")
    print(f"ok: {what}")


def serve(command: str) -> tuple[subprocess.Popen[str], str]:
    server = subprocess.Popen(
        [command, "serve", "--port", "0", "--no-access-log"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert server.stdout is not None
    line = server.stdout.readline()
    if not line.startswith("serving the API on http://"):
        server.kill()
        sys.exit(f"FAILED: serve printed {line!r}{server.communicate()[0]}")
    api = line.split()[4]  # http://127.0.0.1:PORT/api/v1
    return server, api.removesuffix("/api/v1")


def main(command: str) -> None:
    server, base = serve(command)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                status, ready = call(base, "/readyz")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        check("GET /readyz is 200", status == 200, ready)
        status, started = call(base, "/api/v1/runs", {"type": TYPE, "payload": {"n": 1}})
        check("POST /api/v1/runs is 201", status == 201, started)
        check("the start warns that no worker has registered the type", bool(started["warnings"]))
        status, run = call(base, f"/api/v1/runs/{started['id']}")
        check(
            "GET /api/v1/runs/{id} gives the run back",
            status == 200
            and (run["type"], run["payload"], run["status"]) == (TYPE, {"n": 1}, "pending"),
            run,
        )
        status, document = call(base, "/openapi.json")
        check(
            "the OpenAPI document is served", status == 200 and "/api/v1/runs" in document["paths"]
        )
        status, _ = call(base, "/docs")
        check("the interactive docs are served", status == 200)
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main(sys.argv[1])
