"""/docs offline: Swagger UI 5 from the ``swagger-ui-py`` package's files (its ``static``
folder, found without importing its framework adapters), served by this server at
/docs/static, so the page loads with no internet and names no other host."""

import html
import importlib.util
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles


def _assets() -> Path:
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the swagger-ui-py package is missing: pip install swagger-ui-py")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


ASSETS = _assets()
# issue 44: no inline script (FastAPI's page starts Swagger UI inline), so /docs is served
# under the console's default-src 'self' policy; the start is /ui/static/docs-init.js
PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/docs/static/swagger-ui.css">
<link rel="icon" href="/docs/static/favicon-32x32.png">
<title>TITLE</title>
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/static/swagger-ui-bundle.js"></script>
<script src="/ui/static/docs-init.js"></script>
</body>
</html>
"""
DOCS_PATHS = ("/docs", "/docs/oauth2-redirect")


def install_docs(app: FastAPI) -> None:
    """Replace FastAPI's CDN /docs with one served from the package's files."""
    app.router.routes[:] = [r for r in app.router.routes
                            if getattr(r, "path", None) not in DOCS_PATHS]
    app.mount("/docs/static", StaticFiles(directory=ASSETS), name="docs-static")
    title = f"{app.title} API"

    page = PAGE.replace("TITLE", html.escape(title))

    async def docs() -> HTMLResponse:
        return HTMLResponse(page)

    app.add_api_route("/docs", docs, methods=["GET"], include_in_schema=False)
