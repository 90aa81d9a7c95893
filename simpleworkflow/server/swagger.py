"""``/docs``: Swagger UI over the OpenAPI document, from files installed with the server
extra (the ``swagger-ui-bundle-v2`` package), never from a CDN: the page works offline, and
no script from elsewhere runs on the origin that also serves the dashboard. The page is
sent under a Content-Security-Policy that lets it load only this server's files; its one
script of our own (:data:`_START`) is a file too, since the policy forbids inline ones.
"""

from __future__ import annotations

import html
import importlib.util
from importlib import resources
from pathlib import PurePosixPath

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from simpleworkflow.web import problems

#: The files of the bundle that the page loads, with their media types.
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui-standalone-preset.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon-32x32.png": "image/png",
}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
        "form-action 'self'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
#: Starts Swagger UI on the document the page names; no validator badge (it would ask
#: validator.swagger.io about the document).
_START = """window.addEventListener("DOMContentLoaded", function () {
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.openapi,
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
    layout: "StandaloneLayout"
  });
});
"""
_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title} - API docs</title>
<link rel="stylesheet" href="{assets}/swagger-ui.css">
<link rel="icon" type="image/png" href="{assets}/favicon-32x32.png">
</head>
<body>
<div id="swagger-ui" data-openapi="{openapi}"></div>
<script src="{assets}/swagger-ui-bundle.js"></script>
<script src="{assets}/swagger-ui-standalone-preset.js"></script>
<script src="{assets}/start.js"></script>
</body>
</html>
"""
_MISSING = (
    "<!doctype html><html><head><meta charset='utf-8'><title>API docs</title></head><body>"
    "<p>The interactive docs need the <code>swagger-ui-bundle-v2</code> package (part of "
    "the server extra): <code>pip install 'simpleworkflow[server]'</code>. The OpenAPI "
    "document is at <a href='{openapi}'>{openapi}</a>.</p></body></html>"
)


def router(title: str, openapi_url: str = "/openapi.json", path: str = "/docs") -> APIRouter:
    """The page at ``path`` and its files under ``path/assets``."""
    docs = APIRouter(include_in_schema=False)

    @docs.get(path)
    async def page(request: Request) -> HTMLResponse:
        root = str(request.scope.get("root_path") or "")
        openapi = html.escape(root + openapi_url)
        if not installed():
            return HTMLResponse(_MISSING.format(openapi=openapi), headers=SECURITY_HEADERS)
        text = _PAGE.format(
            title=html.escape(title), assets=root + path + "/assets", openapi=openapi
        )
        return HTMLResponse(text, headers=SECURITY_HEADERS)

    @docs.get(path + "/assets/{name}")
    async def asset(name: str) -> Response:
        if name == "start.js":
            body: bytes | None = _START.encode()
            media = "text/javascript"
        else:
            body, media = _bundle_file(name), ASSETS.get(name, "")
        if body is None:
            return problems.problem_response(404, "not-found", f"no file {name[:100]!r} here")
        headers = {"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"}
        return Response(body, media_type=media, headers=headers)

    return docs


def installed() -> bool:
    return importlib.util.find_spec("swagger_ui_bundle") is not None


def _bundle_file(name: str) -> bytes | None:
    """One of :data:`ASSETS` from the installed bundle, or ``None``."""
    if name not in ASSETS or not installed():
        return None
    import swagger_ui_bundle  # type: ignore[import-untyped]  # the server extra

    folder = PurePosixPath(str(swagger_ui_bundle.swagger_ui_path)).name
    found = resources.files("swagger_ui_bundle").joinpath("vendor", folder, name)
    return found.read_bytes() if found.is_file() else None
