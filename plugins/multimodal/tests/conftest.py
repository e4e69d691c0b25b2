"""Fixtures: the hand-built media samples, and an http server on loopback that misbehaves on request."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from media_samples import SAMPLES


@pytest.fixture
def samples() -> dict[str, bytes]:
    return dict(SAMPLES)


class _Handler(BaseHTTPRequestHandler):
    """Routes: /png, /redirect?to=URL, /big (Content-Length over the limit), /stream (no length, endless),
    /trickle (one byte of body at a time), /trickle-headers (one byte of a header at a time), /status/<n>."""

    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        self.server.requests.append((self.path, dict(self.headers)))
        url = urlsplit(self.path)
        if url.path == "/png":
            self._send(200, SAMPLES["png"], length=True)
        elif url.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", parse_qs(url.query)["to"][0])
            self.end_headers()
        elif url.path == "/big":
            self.send_response(200)
            self.send_header("Content-Length", str(10 * 1024 * 1024))
            self.end_headers()
        elif url.path == "/stream":
            self._send(200, b"", length=False)
            self._drip(b"\x00" * 65536, pause=0.0)
        elif url.path == "/trickle":
            self._send(200, b"", length=False)
            self._drip(b"\x00", pause=0.02)
        elif url.path == "/trickle-headers":
            self.wfile.write(b"HTTP/1.0 200 OK\r\nX-Slow: ")
            self._drip(b"x", pause=0.02)
        elif url.path.startswith("/status/"):
            self._send(int(url.path.rsplit("/", 1)[1]), b"nope", length=True)

    def _send(self, status: int, body: bytes, length: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "image/png")
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _drip(self, piece: bytes, pause: float) -> None:
        deadline = time.monotonic() + 5
        try:
            while time.monotonic() < deadline and not self.server.stopping.is_set():
                self.wfile.write(piece)
                self.wfile.flush()
                time.sleep(pause)
        except OSError:  # the client hung up, as it should
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.stopping = threading.Event()

    def handle_error(self, request: object, client_address: object) -> None:
        pass

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture(scope="module")
def server() -> Iterator[_Server]:
    httpd = _Server()
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield httpd
    httpd.stopping.set()
    httpd.shutdown()
    httpd.server_close()
