"""Remote media through a local http server on loopback only: addresses, redirects, size and time limits."""

from __future__ import annotations

import ipaddress
import time
from urllib.parse import quote

import pytest
from media_samples import SAMPLES, treat_as_public

from llama_cpp_multimodal import MediaError, MediaInput, MediaPolicy, parse_part, refused_address_reason

PRIVATE_OK = MediaPolicy(allow_private_addresses=True)
PUBLIC_LOOPBACK = MediaPolicy(address_check=treat_as_public("127.0.0.1"))


def fetch(url: str, policy: MediaPolicy = MediaPolicy()) -> MediaInput:
    media = parse_part({"type": "image_url", "image_url": {"url": url}}, 3, policy)
    assert isinstance(media, MediaInput)
    return media


@pytest.mark.parametrize(("address", "reason"), [
    ("127.0.0.1", "loopback"), ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("192.168.1.1", "private"),
    ("169.254.169.254", "link-local"), ("224.0.0.1", "multicast"), ("0.0.0.0", "unspecified"),
    ("240.0.0.1", "reserved"), ("100.64.0.1", "not globally routable"), ("::1", "loopback"), ("fe80::1", "link-local"),
    ("fc00::1", "private"), ("::", "unspecified"), ("ff02::1", "multicast"), ("::ffff:127.0.0.1", "loopback"),
    ("::ffff:10.0.0.1", "private"), ("2002:7f00:1::", "loopback"), ("64:ff9b::a00:1", "private"),
    ("8.8.8.8", None), ("2606:4700:4700::1111", None), ("::ffff:8.8.8.8", None),
])
def test_address_check(address: str, reason: str | None) -> None:
    assert refused_address_reason(ipaddress.ip_address(address)) == reason


def test_loopback_is_refused_by_default_and_allowed_when_asked(server) -> None:
    with pytest.raises(MediaError, match=r"content part 3 \(image_url\): http://127.0.0.1:\d+/png resolves to "
                                         r"127.0.0.1, a loopback address; refused"):
        fetch(f"{server.url}/png")
    assert fetch(f"{server.url}/png", PRIVATE_OK).data == SAMPLES["png"]
    assert fetch(f"{server.url}/png", PUBLIC_LOOPBACK).source == f"{server.url}/png"


def test_nothing_is_forwarded(server) -> None:
    fetch(f"{server.url}/png?secret=1#frag", PRIVATE_OK)
    path, headers = server.requests[-1]
    assert path == "/png?secret=1"
    assert {k.lower() for k in headers} <= {"host", "user-agent", "accept", "accept-encoding", "connection"}
    assert headers["Accept-Encoding"] == "identity"


def test_every_resolved_address_is_checked_and_the_connection_uses_a_checked_one(server) -> None:
    port = server.server_address[1]

    def resolver(host: str, _port: int) -> list[str]:
        return {"media.test": ["127.0.0.1"], "mixed.test": ["127.0.0.1", "10.0.0.7"]}[host]

    policy = MediaPolicy(address_check=treat_as_public("127.0.0.1"), resolver=resolver)
    assert fetch(f"http://media.test:{port}/png", policy).data == SAMPLES["png"]  # no DNS: pinned to 127.0.0.1
    assert server.requests[-1][1]["Host"] == f"media.test:{port}"
    with pytest.raises(MediaError, match="resolves to 10.0.0.7, a private address"):
        fetch(f"http://mixed.test:{port}/png", policy)
    with pytest.raises(MediaError, match="cannot resolve 'no-such-host.invalid'"):
        fetch("http://no-such-host.invalid/png", PRIVATE_OK)


@pytest.mark.parametrize(("target", "message"), [
    ("http://127.0.0.2:{port}/png", "resolves to 127.0.0.2, a loopback address"),
    ("http://[::ffff:127.0.0.2]:{port}/png", "a loopback address"),
    ("http://10.0.0.1:{port}/png", "a private address"),
    ("http://169.254.169.254/latest/meta-data/", "a link-local address"),
    ("file:///etc/passwd", "scheme 'file' of file:///etc/passwd is not allowed"),
    ("data:image/png;base64,AAAA", "scheme 'data'"),
])
def test_a_redirect_is_checked_like_the_first_url(server, target: str, message: str) -> None:
    location = target.format(port=server.server_address[1])
    with pytest.raises(MediaError, match=message):
        fetch(f"{server.url}/redirect?to={quote(location, safe='')}", PUBLIC_LOOPBACK)


def test_redirects_are_followed_and_counted(server) -> None:
    once = f"{server.url}/redirect?to=/png"
    assert fetch(once, PUBLIC_LOOPBACK).data == SAMPLES["png"]
    twice = f"{server.url}/redirect?to={quote(once, safe='')}"
    with pytest.raises(MediaError, match="more than 1 redirects"):
        fetch(twice, MediaPolicy(address_check=treat_as_public("127.0.0.1"), max_redirects=1))


def test_oversized_responses_are_cut_off(server) -> None:
    small = MediaPolicy(allow_private_addresses=True, max_bytes=1024 * 1024)
    with pytest.raises(MediaError, match=r"/big is larger than MediaPolicy.max_bytes \(1048576 bytes\)"):
        fetch(f"{server.url}/big", small)
    start = time.monotonic()
    with pytest.raises(MediaError, match=r"/stream is larger than MediaPolicy.max_bytes"):
        fetch(f"{server.url}/stream", small)
    assert time.monotonic() - start < 3


@pytest.mark.parametrize("path", ["/trickle", "/trickle-headers"])
def test_a_trickling_server_is_cut_off_by_the_deadline(server, path: str) -> None:
    start = time.monotonic()
    with pytest.raises(MediaError, match=rf"{path} took longer than MediaPolicy.timeout \(0.5 s\)"):
        fetch(f"{server.url}{path}", MediaPolicy(allow_private_addresses=True, timeout=0.5))
    assert time.monotonic() - start < 1.5


@pytest.mark.parametrize(("url", "policy", "message"), [
    ("{base}/status/404", PRIVATE_OK, "answered HTTP 404"),
    ("{base}/png", MediaPolicy(allow_remote=False), "remote URLs are not allowed"),
    ("{base}/png", MediaPolicy(schemes={"https"}, allow_private_addresses=True), "scheme 'http' .* not allowed"),
    ("http://user:pw@127.0.0.1/png", PRIVATE_OK, r"credentials in the URL http://127.0.0.1/png are not sent"),
    ("http://127.0.0.1:1/png", PRIVATE_OK, "cannot fetch http://127.0.0.1:1/png: ConnectionRefusedError"),
])
def test_other_refusals(server, url: str, policy: MediaPolicy, message: str) -> None:
    with pytest.raises(MediaError, match=message):
        fetch(url.format(base=server.url), policy)


def test_urls_are_encoded_as_a_browser_would_and_bad_ones_are_refused(server) -> None:
    fetch(f"{server.url}/png?name=a b\u00e9&x=%41", PRIVATE_OK)
    assert server.requests[-1][0] == "/png?name=a%20b%C3%A9&x=%41"
    for url, message in (("http://127.0.0.1:99999/png", "bad port in http://127.0.0.1/png"), ("http:///png", "no host"),
                         ("http://exa\u0000mple.com/", "cannot resolve")):
        with pytest.raises(MediaError, match=message):
            fetch(url, PRIVATE_OK)
