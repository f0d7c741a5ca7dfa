"""/docs offline: Swagger UI 5 from the ``swagger-ui-py`` package's files (its ``static``
folder, found without importing its framework adapters), served by this server at
/docs/static, so the page loads with no internet and names no other host."""

import importlib.util
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles


def _assets() -> Path:
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the swagger-ui-py package is missing: pip install swagger-ui-py")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


ASSETS = _assets()
DOCS_PATHS = ("/docs", "/docs/oauth2-redirect")


def install_docs(app: FastAPI) -> None:
    """Replace FastAPI's CDN /docs with one served from the package's files."""
    app.router.routes[:] = [r for r in app.router.routes
                            if getattr(r, "path", None) not in DOCS_PATHS]
    app.mount("/docs/static", StaticFiles(directory=ASSETS), name="docs-static")
    title = f"{app.title} API"

    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json", title=title,
            swagger_js_url="/docs/static/swagger-ui-bundle.js",
            swagger_css_url="/docs/static/swagger-ui.css",
            swagger_favicon_url="/docs/static/favicon-32x32.png",
            swagger_ui_parameters={"validatorUrl": None})

    app.add_api_route("/docs", docs, methods=["GET"], include_in_schema=False)
