"""The status page (README "Status page"): one HTML page and its script and style, served by
``mvs serve`` beside the REST API. The page polls ``GET /overview`` (``workers.api.overview``) and
redraws in place; the files are package data (``workers/api/static``), no build step."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).parent / "static"
PAGE = STATIC_DIR / "status.html"
# The page changes with mvs: a browser revalidates it instead of guessing an age.
NO_CACHE = {"Cache-Control": "no-cache"}


def add_status_page(app: FastAPI) -> None:
    """``GET /`` and ``GET /status``: the page; ``/static/…``: its script and style. Neither is in
    the OpenAPI document (they are not JSON); the data they show is ``GET /overview``, which is."""
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    def status_page() -> FileResponse:
        return FileResponse(PAGE, media_type="text/html", headers=NO_CACHE)

    for path in ("/", "/status"):
        app.get(path, include_in_schema=False, response_class=FileResponse)(status_page)
