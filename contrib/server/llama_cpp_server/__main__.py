"""``python -m llama_cpp.server`` / ``python -m llama_cpp_server`` / ``llama-cpp-server``: run the server."""

from __future__ import annotations

import sys
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Read the settings (flags, environment, config file) and serve until interrupted."""
    import uvicorn

    from .app import create_app
    from .settings import load_settings

    settings = load_settings(argv)
    app = create_app(settings)
    uvicorn.run(app, host=settings.host, port=settings.port, ssl_keyfile=settings.ssl_keyfile,
                ssl_certfile=settings.ssl_certfile, log_level="info" if any(m.verbose for m in settings.model_list())
                else "warning", timeout_graceful_shutdown=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
