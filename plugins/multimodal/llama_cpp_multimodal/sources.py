"""Reading the bytes a media reference names: a ``data:`` URI, a local file, or an http(s) URL."""

from __future__ import annotations

import base64
import binascii
import stat
from pathlib import Path
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

import attrs

from . import remote
from .errors import MediaError
from .policy import MediaPolicy


@attrs.frozen
class Loaded:
    """Bytes, the media type their sender declared ("" if none: files, http), and where they came from."""

    data: bytes = attrs.field(repr=False)
    media_type: str
    source: str


def load(reference: str, policy: MediaPolicy) -> Loaded:
    """The bytes behind ``reference``: ``data:`` URIs always; http(s) and local files as the policy allows.

    A string with no scheme (or a one-letter one: a Windows drive) is a local path.
    """
    if reference[:5].lower() == "data:":
        return load_data_uri(reference, policy)
    scheme = urlsplit(reference).scheme.lower()
    if scheme in ("http", "https"):
        return Loaded(remote.fetch(reference, policy), "", remote.display_url(reference))
    if scheme == "file":
        return load_file(_file_url_path(reference), policy)
    if len(scheme) > 1:
        raise MediaError(f"scheme {scheme!r} is not supported; use a data: URI, an http(s) URL or, "
                         "where allowed, a local path or file: URL")
    return load_file(reference, policy)


def load_data_uri(uri: str, policy: MediaPolicy) -> Loaded:
    """``data:<media type>;base64,<data>``, strictly: only base64, only its alphabet, correctly padded."""
    header, comma, payload = uri[5:].partition(",")
    params = [p.strip() for p in header.split(";")]
    if not comma or params[-1].lower() != "base64":
        raise MediaError("a data: URI must be base64 (data:<media type>;base64,<data>)")
    if len(payload) > (policy.max_bytes + 2) // 3 * 4:
        raise MediaError(f"data: URI holds more than MediaPolicy.max_bytes ({policy.max_bytes} bytes)")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MediaError(f"data: URI is not valid base64: {exc}") from None
    media_type = params[0].lower() if len(params) > 1 else ""
    return Loaded(data, media_type, f"data: URI ({media_type or 'no media type'}, {len(data)} bytes)")


def _file_url_path(url: str) -> str:
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise MediaError(f"file: URL on another host ({parts.netloc!r}) is not supported")
    return url2pathname(unquote(parts.path))


def load_file(path: str, policy: MediaPolicy) -> Loaded:
    """A regular local file, if the policy allows local files, no larger than ``max_bytes``."""
    if not policy.allow_local_files:
        raise MediaError("local files are not allowed (MediaPolicy(allow_local_files=True) allows them); "
                         "send a data: URI or an http(s) URL")
    try:
        resolved = Path(path).resolve(strict=True)
        info = resolved.stat()
    except (OSError, RuntimeError) as exc:
        raise MediaError(f"cannot open local file {path!r}: {exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise MediaError(f"{path!r} is not a regular file")
    if info.st_size > policy.max_bytes:
        raise MediaError(f"{path!r} is larger than MediaPolicy.max_bytes ({policy.max_bytes} bytes)")
    try:
        with resolved.open("rb") as file:
            data = file.read(policy.max_bytes + 1)  # the file may have grown since stat
    except OSError as exc:
        raise MediaError(f"cannot read local file {path!r}: {exc}") from None
    if len(data) > policy.max_bytes:
        raise MediaError(f"{path!r} is larger than MediaPolicy.max_bytes ({policy.max_bytes} bytes)")
    return Loaded(data, "", f"file {str(resolved)!r}")
