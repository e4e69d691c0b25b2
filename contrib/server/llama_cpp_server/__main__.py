"""``python -m llama_cpp.server`` / ``python -m llama_cpp_server`` / ``llama-cpp-server``: run the server."""

from __future__ import annotations

import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from .bridge import Workers


def main(argv: Sequence[str] | None = None) -> int:
    """Read the settings (flags, environment, config file) and serve until interrupted."""
    import uvicorn

    from .app import create_app
    from .settings import load_settings

    settings = load_settings(argv)
    app = create_app(settings)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, ssl_keyfile=settings.ssl_keyfile,
                            ssl_certfile=settings.ssl_certfile, log_level="info" if any(
                                m.verbose for m in settings.model_list()) else "warning",
                            timeout_graceful_shutdown=5)
    workers: Workers = app.state.workers

    class Server(uvicorn.Server):
        """uvicorn's server, which also ends the requests in flight when a shutdown signal comes.  uvicorn
        waits for open connections before the app's shutdown runs: a stream would go on for
        ``timeout_graceful_shutdown`` seconds, then its task be cancelled with a traceback in the log.  Ended
        here, each stream finishes (``finish_reason`` "abort") and its connection closes at once."""

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            super().handle_exit(sig, frame)
            # on a thread of its own: a signal handler may have interrupted the event loop inside the lock
            # that cancelling takes
            threading.Thread(target=workers.cancel_all, name="llama_cpp-shutdown", daemon=True).start()

    try:
        Server(config).run()
    except KeyboardInterrupt:  # uvicorn raises SIGINT again once it has shut down (uvicorn.run does the same)
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
