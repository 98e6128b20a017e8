"""``mvs serve``: the REST API on uvicorn, in the foreground until SIGTERM / Ctrl-C."""

from __future__ import annotations

import uvicorn

from workers.api.app import create_app
from workers.config import Settings


def serve(settings: Settings, *, host: str, port: int) -> int:
    """Serve ``create_app(settings)`` on ``host:port`` (uvicorn stops on SIGTERM and SIGINT)."""
    config = uvicorn.Config(create_app(settings), host=host, port=port, access_log=False, log_level="info")
    uvicorn.Server(config).run()
    return 0
