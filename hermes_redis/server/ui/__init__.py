"""The browser console at /ui and the offline /docs (issue 32): ``install`` adds both to
the app ``create_app`` built, over its SessionMemory and keys."""

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from hermes_redis.server.ui import access
from hermes_redis.server.ui.docs import install_docs
from hermes_redis.server.ui.views import Console

__all__ = ["install"]


def install(app: FastAPI) -> None:
    """Mount /ui (pages and their stylesheet) and replace /docs by its offline twin."""
    console = Console(app.state.mem, app.state.keys)
    app.include_router(console.router())
    app.add_exception_handler(access.FormRefused, console.refused)
    app.mount("/ui/static", StaticFiles(directory=Path(__file__).parent / "static"),
              name="ui-static")
    install_docs(app)
