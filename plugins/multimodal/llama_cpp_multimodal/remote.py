"""Fetching media over http(s) from untrusted URLs, with the standard library only.

Every hop (the URL and each redirect) is checked the same way: the scheme, no credentials in the URL,
the host resolved and every address it resolves to checked by the policy, and the connection made to
one of those checked addresses (not to a second resolution, which DNS rebinding could point elsewhere).
The body is read in chunks and cut off past ``max_bytes``; the whole fetch, redirects included, has one
deadline, enforced by a watchdog that shuts the socket down, so a server trickling bytes cannot hold a
request open. Nothing is forwarded: no cookies, no credentials, no proxy (environment proxies are
ignored), and ``Accept-Encoding: identity`` so the size limit counts the bytes that are kept.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import threading
import time
from typing import Callable
from urllib.parse import quote, urljoin, urlsplit

import attrs

from .errors import MediaError
from .policy import MediaPolicy

REDIRECTS = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "llama-cpp-multimodal"
CHUNK = 64 * 1024
_PATH_SAFE = "!$%&'()*+,/:;=?@~"


def display_url(url: str) -> str:
    """``url`` without credentials, query or fragment: enough to say which, safe to put in a log."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a bad port is reported by the caller; the message must not fail on it
        port = ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def fetch(url: str, policy: MediaPolicy) -> bytes:
    """The body at ``url``, following redirects, within the policy's limits; MediaError otherwise.

    The response's ``Content-Type`` is not consulted: servers often get it wrong, and the bytes decide.
    """
    if not policy.allow_remote:
        raise MediaError("remote URLs are not allowed (MediaPolicy(allow_remote=True) allows them)")
    deadline = time.monotonic() + policy.timeout
    for _hop in range(policy.max_redirects + 1):
        response = _get(url, policy, deadline)
        if isinstance(response, bytes):
            return response
        url = urljoin(url, response)
    raise MediaError(f"more than {policy.max_redirects} redirects")


@attrs.frozen
class _Target:
    https: bool
    host: str
    port: int
    path: str
    addresses: tuple[str, ...]


def _check(url: str, policy: MediaPolicy) -> _Target:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in policy.schemes:
        raise MediaError(f"scheme {scheme!r} of {display_url(url)} is not allowed; allowed: {sorted(policy.schemes)}")
    if parts.username is not None or parts.password is not None:
        raise MediaError(f"credentials in the URL {display_url(url)} are not sent; remove them")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError as exc:
        raise MediaError(f"bad port in {display_url(url)}: {exc}") from None
    if not parts.hostname:
        raise MediaError(f"no host in {display_url(url)}")
    try:
        host = parts.hostname.encode("idna").decode("ascii")
        addresses = tuple(policy.resolver(host, port))
        checked = [ipaddress.ip_address(address) for address in addresses]
    except (OSError, UnicodeError, ValueError) as exc:
        raise MediaError(f"cannot resolve {parts.hostname!r}: {exc}") from None
    if not addresses:
        raise MediaError(f"{host!r} resolves to no address")
    if not policy.allow_private_addresses:
        for address, ip in zip(addresses, checked):
            reason = policy.address_check(ip)
            if reason:
                raise MediaError(f"{display_url(url)} resolves to {address}, a {reason} address; refused "
                                 "(MediaPolicy(allow_private_addresses=True) allows it)")
    # percent-encode what a browser would (spaces, non-ASCII); keep what is already encoded
    path = quote(parts.path or "/", safe=_PATH_SAFE) + (f"?{quote(parts.query, safe=_PATH_SAFE)}" if parts.query else "")
    return _Target(scheme == "https", host, port, path, addresses)


def _connector(addresses: tuple[str, ...], port: int) -> Callable[..., socket.socket]:
    """A replacement for ``socket.create_connection`` that only dials the checked addresses."""

    def connect(_address: object, timeout: float, source_address: tuple[str, int] | None = None) -> socket.socket:
        error: OSError | None = None
        for address in addresses:
            try:
                return socket.create_connection((address, port), timeout, source_address)
            except OSError as exc:
                error = exc
        assert error is not None
        raise error

    return connect


def _get(url: str, policy: MediaPolicy, deadline: float) -> bytes | str:
    """One hop: the body (bytes) or a redirect's Location (str)."""
    target = _check(url, policy)
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise _timed_out(url, policy)
    if target.https:
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            target.host, target.port, timeout=remaining, context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(target.host, target.port, timeout=remaining)
    # http.client's own hook for making the socket (not in its stubs): connect to the checked addresses only
    conn._create_connection = _connector(target.addresses, target.port)  # type: ignore[attr-defined]
    expired = threading.Event()

    def watchdog() -> None:
        expired.set()
        sock = conn.sock  # read once: the request thread may be closing it
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked recv; the request thread sees the error
            except OSError:
                pass

    timer = threading.Timer(remaining, watchdog)
    timer.daemon = True
    timer.start()
    try:
        conn.request("GET", target.path, headers={
            "User-Agent": USER_AGENT, "Accept": "*/*", "Accept-Encoding": "identity", "Connection": "close"})
        response = conn.getresponse()
        if response.status in REDIRECTS:
            location = response.getheader("Location")
            if not location:
                raise MediaError(f"{display_url(url)} redirects ({response.status}) without a Location")
            return location
        if not 200 <= response.status < 300:
            raise MediaError(f"{display_url(url)} answered HTTP {response.status} {response.reason}")
        return _read_body(response, url, policy, deadline, expired)
    except (OSError, http.client.HTTPException) as exc:
        if expired.is_set() or time.monotonic() >= deadline:
            raise _timed_out(url, policy) from None
        raise MediaError(f"cannot fetch {display_url(url)}: {type(exc).__name__}: {exc}") from None
    finally:
        timer.cancel()
        conn.close()


def _read_body(response: http.client.HTTPResponse, url: str, policy: MediaPolicy, deadline: float,
               expired: threading.Event) -> bytes:
    too_large = f"{display_url(url)} is larger than MediaPolicy.max_bytes ({policy.max_bytes} bytes)"
    length = response.getheader("Content-Length")
    if length is not None and length.strip().isdigit() and int(length) > policy.max_bytes:
        raise MediaError(too_large)
    body = bytearray()
    while chunk := response.read1(CHUNK):
        body += chunk
        if len(body) > policy.max_bytes:
            raise MediaError(too_large)
        if expired.is_set() or time.monotonic() >= deadline:
            raise _timed_out(url, policy)
    if expired.is_set():  # the watchdog's shutdown can look like a clean end of the body
        raise _timed_out(url, policy)
    return bytes(body)


def _timed_out(url: str, policy: MediaPolicy) -> MediaError:
    return MediaError(f"{display_url(url)} took longer than MediaPolicy.timeout ({policy.timeout} s)")
