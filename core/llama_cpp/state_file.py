"""Sequence state files: one sequence's snapshot in a documented binary format of our own.

The disk cache and ``Llama.save_session`` write them; both read files that
may come from anywhere (a shared directory, a download, a crashed writer), so
reading treats every byte as untrusted: every length is checked against the
file's size before anything is allocated, the whole file is checked against
its sha256, and a file of another model or context is refused before
llama.cpp sees its state.  Nothing here is pickled or unpickled: a pickle (the
seed's disk cache stored pickles, which can run code when loaded) is
recognised and refused.

Layout (integers little-endian; docs/caches.md has the table)::

    0   8   magic b"LLAMASEQ"
    8   4   u32 format version (1)
    12  4   u32 flags (0; reserved)
    16  8   u64 meta_size: bytes of the meta section
    24  8   u64 payload_size: bytes of the payload section
    32  32  sha256 of bytes [0, 32) and [64, end): everything but itself
    64      meta: origin, adapters, tokens, checkpoint table
    ...     payload: each checkpoint's state, then the sequence state

Writing is atomic: a temporary file in the same directory, fsync, then
``os.replace``; a reader never sees half a file under the final name.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import struct
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator, Union

import attrs

from ._adapters import AdapterKey
from .engine.checkpoints import Checkpoint
from .engine.ledger import SequenceSnapshot
from .engine.origin import ForeignStateError, StateOrigin

__all__ = [
    "CorruptStateFile",
    "EncodedStateFile",
    "ForeignStateFile",
    "MAGIC",
    "NotAStateFile",
    "PickledStateFile",
    "StateFileError",
    "StateFileHeader",
    "TruncatedStateFile",
    "UnsupportedStateFileVersion",
    "VERSION",
    "encode",
    "read_header",
    "read_state_file",
    "write_state_file",
]

MAGIC = b"LLAMASEQ"
VERSION = 1
PREFIX = struct.Struct("<8sIIQQ32s")  # magic, version, flags, meta_size, payload_size, sha256
PREFIX_SIZE = PREFIX.size  # 64
MAX_META = 256 << 20  # no real header comes near this (1M tokens are 4 MB): a larger one is damage

Source = Union[str, "os.PathLike[str]", IO[bytes]]


class StateFileError(ValueError):
    """A file that cannot be used as a sequence state file; the message says what is wrong with it."""


class NotAStateFile(StateFileError):
    """The file does not start with the state file magic."""


class PickledStateFile(NotAStateFile):
    """The file, or the state inside it, is a Python pickle: never loaded (unpickling can run code)."""


class TruncatedStateFile(StateFileError):
    """The file is shorter than its header says."""


class UnsupportedStateFileVersion(StateFileError):
    """The file was written in a format version this llama_cpp does not read."""


class CorruptStateFile(StateFileError):
    """The file's checksum does not match its bytes, or its header contradicts itself."""


class ForeignStateFile(StateFileError, ForeignStateError):
    """The file holds a state of another model, or of a context with other parameters."""


@attrs.frozen
class StateFileHeader:
    """What a state file says about itself, read without its payload (cheap: a cache indexes by it)."""

    version: int
    origin: StateOrigin
    adapters: AdapterKey | None
    tokens: tuple[int, ...]
    checkpoints: tuple[tuple[int, int], ...]  # (n_tokens, nbytes) of each checkpoint state, in payload order
    state_size: int
    file_size: int


@attrs.frozen
class EncodedStateFile:
    """A snapshot laid out as a state file, not yet written: its parts refer to the snapshot's bytes
    (nothing large is copied), so the size is known before a cache makes room for it."""

    parts: tuple[bytes, ...] = attrs.field(repr=False)
    key: str  # sha256 hex of origin, adapters and tokens: equal for the same prefix of the same model

    @property
    def size(self) -> int:
        return sum(len(p) for p in self.parts)

    def write(self, path: str | os.PathLike[str]) -> int:
        """Write atomically (temporary file in the same directory, fsync, ``os.replace``); returns the size."""
        path = Path(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                for part in self.parts:
                    fh.write(part)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _fsync_directory(path.parent)
        return self.size


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable too (POSIX; a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- writing -------------------------------------------------------------------------------------
def _str(value: str) -> bytes:
    data = value.encode("utf-8")
    return struct.pack("<I", len(data)) + data


def _identity(snapshot: SequenceSnapshot) -> bytes:
    """The meta section up to the checkpoint table: origin, adapters, tokens."""
    origin = snapshot.origin
    if origin is None:
        raise ValueError("this snapshot does not say which model and context it belongs to (origin is None); "
                         "take it with Llama.snapshot_sequence to write it to a file")
    out = [_str(origin.model), struct.pack("<I", len(origin.context))]
    for name, value in origin.context:
        out.append(_str(name) + struct.pack("<q", value))
    adapters = snapshot.adapters
    if adapters is None:  # tokens evaluated under a mix of adapter sets
        out.append(b"\0")
    else:
        out.append(b"\1" + struct.pack("<I", len(adapters.loras)))
        for name, path, scale in adapters.loras:
            out.append(_str(name) + _str(path) + struct.pack("<d", scale))
        cvec = adapters.control_vector
        if cvec is None:
            out.append(b"\0")
        else:
            digest, start, end = cvec
            out.append(b"\1" + struct.pack("<Q", len(digest)) + bytes(digest) + struct.pack("<qq", start, end))
    tokens = snapshot.tokens
    out.append(struct.pack(f"<Q{len(tokens)}i", len(tokens), *tokens))
    return b"".join(out)


def encode(snapshot: SequenceSnapshot) -> EncodedStateFile:
    """``snapshot`` as a state file (on-device checkpoints are left out: their bytes stay on the device)."""
    identity = _identity(snapshot)
    checkpoints = [c for c in snapshot.checkpoints if not c.on_device]
    table = struct.pack("<I", len(checkpoints)) + b"".join(
        struct.pack("<QQ", c.n_tokens, len(c.state)) for c in checkpoints)
    meta = identity + table
    payload = [c.state for c in checkpoints] + [snapshot.state]
    head = PREFIX.pack(MAGIC, VERSION, 0, len(meta), sum(len(p) for p in payload), b"")[:32]
    digest = hashlib.sha256(head)
    digest.update(meta)
    for part in payload:
        digest.update(part)
    return EncodedStateFile(parts=(head + digest.digest(), meta, *payload),
                            key=hashlib.sha256(identity).hexdigest())


def write_state_file(path: str | os.PathLike[str], snapshot: SequenceSnapshot) -> int:
    """Write ``snapshot`` to ``path`` atomically; returns the file's size."""
    return encode(snapshot).write(path)


# -- reading -------------------------------------------------------------------------------------
class _Meta:
    """A cursor over the meta section: every read is checked against what is left."""

    def __init__(self, data: bytes, name: str) -> None:
        self.data, self.at, self.name = data, 0, name

    def take(self, n: int, what: str) -> bytes:
        if n > len(self.data) - self.at:
            raise CorruptStateFile(f"{self.name}: the header's {what} needs {n} bytes at offset "
                                   f"{PREFIX_SIZE + self.at}, but only {len(self.data) - self.at} are left in it")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def unpack(self, fmt: str, what: str) -> tuple[Any, ...]:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))

    def count(self, fmt: str, item_size: int, what: str) -> int:
        """A count of items of ``item_size`` bytes each, checked to fit in what is left."""
        (n,) = self.unpack(fmt, f"{what} count")
        if n * item_size > len(self.data) - self.at:
            raise CorruptStateFile(f"{self.name}: the header claims {n} {what}, more than its "
                                   f"{len(self.data) - self.at} remaining bytes can hold")
        return n

    def string(self, what: str) -> str:
        (n,) = self.unpack("<I", what)
        try:
            return self.take(n, what).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptStateFile(f"{self.name}: the header's {what} is not UTF-8") from None

    def flag(self, what: str) -> bool:
        (value,) = self.unpack("<B", what)
        if value > 1:
            raise CorruptStateFile(f"{self.name}: the header's {what} flag is {value}, not 0 or 1")
        return bool(value)


def _looks_pickled(data: bytes) -> bool:
    """A pickle of protocol 2 or later starts with PROTO (0x80) and its protocol number.  No state file and
    no llama.cpp sequence state starts so (a state starts with llama.cpp's magic, 0xaf143cd8)."""
    return len(data) >= 2 and data[0] == 0x80 and 2 <= data[1] <= 5


@contextlib.contextmanager
def _opened(source: Source) -> Iterator[tuple[IO[bytes], str]]:
    if not isinstance(source, (str, os.PathLike)):  # an open binary stream
        yield source, str(getattr(source, "name", "<stream>"))
        return
    with open(source, "rb") as fh:
        yield fh, os.fspath(source)


def _read_exactly(fh: IO[bytes], n: int, name: str, what: str) -> bytes:
    data = fh.read(n)
    if len(data) != n:
        raise TruncatedStateFile(f"{name}: the file ends inside its {what} ({len(data)} of {n} bytes)")
    return data


def _read_header(fh: IO[bytes], name: str) -> tuple[StateFileHeader, bytes, bytes]:
    """The header, and the raw prefix and meta bytes (for the checksum); ``fh`` is read from its start."""
    size = fh.seek(0, os.SEEK_END)
    fh.seek(0)
    prefix = fh.read(PREFIX_SIZE)
    if _looks_pickled(prefix):
        raise PickledStateFile(f"{name} is a Python pickle, not a llama_cpp state file; pickles are never loaded "
                               "(loading one can run arbitrary code)")
    if not prefix or not MAGIC.startswith(prefix[:len(MAGIC)]):
        raise NotAStateFile(f"{name} is not a llama_cpp state file (it starts with {prefix[:8]!r}, "
                            f"not {MAGIC!r})")
    if len(prefix) < PREFIX_SIZE:
        raise TruncatedStateFile(f"{name}: the file ends inside its {PREFIX_SIZE}-byte header "
                                 f"({len(prefix)} bytes)")
    _magic, version, flags, meta_size, payload_size, _digest = PREFIX.unpack(prefix)
    if version != VERSION:
        raise UnsupportedStateFileVersion(f"{name} is a state file of format version {version}; this llama_cpp "
                                          f"reads version {VERSION}")
    if flags != 0:
        raise CorruptStateFile(f"{name}: reserved header flags are {flags:#x}, not 0")
    if meta_size > MAX_META:
        raise CorruptStateFile(f"{name}: the header claims a {meta_size}-byte meta section (at most {MAX_META})")
    if PREFIX_SIZE + meta_size + payload_size > size:
        raise TruncatedStateFile(f"{name} is truncated: its header describes {PREFIX_SIZE + meta_size + payload_size} "
                                 f"bytes, the file has {size}")
    if PREFIX_SIZE + meta_size + payload_size < size:
        raise CorruptStateFile(f"{name} has {size - PREFIX_SIZE - meta_size - payload_size} bytes after the end "
                               "its header describes")
    meta_bytes = _read_exactly(fh, meta_size, name, "meta section")
    meta = _Meta(meta_bytes, name)
    model = meta.string("model fingerprint")
    n_params = meta.count("<I", 12, "context parameters")  # a name's length and a value at least
    context = tuple((meta.string("context parameter name"), meta.unpack("<q", "context parameter")[0])
                    for _ in range(n_params))
    adapters = None
    if meta.flag("adapters"):
        n_loras = meta.count("<I", 16, "LoRA adapters")  # two lengths and a scale at least
        loras = []
        for _ in range(n_loras):
            lora_name, lora_path = meta.string("LoRA name"), meta.string("LoRA path")
            (scale,) = meta.unpack("<d", "LoRA scale")
            if not math.isfinite(scale):
                raise CorruptStateFile(f"{name}: LoRA {lora_name!r} has the scale {scale}")
            loras.append((lora_name, lora_path, scale))
        cvec = None
        if meta.flag("control vector"):
            (n,) = meta.unpack("<Q", "control vector size")
            digest = meta.take(n, "control vector")
            start, end = meta.unpack("<qq", "control vector layers")
            cvec = (digest, start, end)
        adapters = AdapterKey(tuple(loras), cvec)
    n_tokens = meta.count("<Q", 4, "tokens")
    tokens = struct.unpack(f"<{n_tokens}i", meta.take(4 * n_tokens, "tokens"))
    n_checkpoints = meta.count("<I", 16, "checkpoints")
    table = tuple(meta.unpack("<QQ", "checkpoint table") for _ in range(n_checkpoints))
    if meta.at != len(meta_bytes):
        raise CorruptStateFile(f"{name}: the meta section does not end where its header says ({meta.at} of "
                               f"{len(meta_bytes)} bytes used)")
    previous = 0
    for n, _nbytes in table:  # the ledger relies on them being in order, each within the tokens
        if not previous < n <= n_tokens:
            raise CorruptStateFile(f"{name}: a checkpoint after {n} tokens, where the checkpoints must be in "
                                   f"increasing order, after 1 to {n_tokens} tokens (the state holds {n_tokens})")
        previous = n
    state_size = payload_size - sum(nbytes for _n, nbytes in table)
    if state_size < 0:
        raise CorruptStateFile(f"{name}: the checkpoints take more bytes than the payload has")
    header = StateFileHeader(version=version, origin=StateOrigin(model, context), adapters=adapters,
                             tokens=tuple(tokens), checkpoints=table, state_size=state_size, file_size=size)
    return header, prefix, meta_bytes


def read_header(source: Source) -> StateFileHeader:
    """Read and check a state file's header only (not its payload, so not its checksum either).
    ``source`` is a path or a binary file open for reading (read from its start)."""
    with _opened(source) as (fh, name):
        return _read_header(fh, name)[0]


def read_state_file(source: Source, origin: StateOrigin | None = None) -> SequenceSnapshot:
    """A state file's snapshot (``source``: a path or a binary file open for reading), after checking
    everything: structure, sizes, checksum, no pickle, and (with ``origin``) that it belongs to that
    model and context.  Raises a :class:`StateFileError` subclass that says what is wrong; OSError as
    ``open`` does."""
    with _opened(source) as (fh, name):
        header, prefix, meta = _read_header(fh, name)
        if origin is not None and header.origin != origin:
            raise ForeignStateFile(f"{name} holds a state of another model or context "
                                   f"({header.origin.differences(origin)})")
        digest = hashlib.sha256(prefix[:32])
        digest.update(meta)
        states = []
        for _n, nbytes in header.checkpoints:
            states.append(_read_exactly(fh, nbytes, name, "checkpoint states"))
            digest.update(states[-1])
        state = _read_exactly(fh, header.state_size, name, "sequence state")
        digest.update(state)
        if digest.digest() != prefix[32:]:
            raise CorruptStateFile(f"{name} is damaged or was altered: its sha256 does not match its contents")
    if _looks_pickled(state):
        raise PickledStateFile(f"{name} carries a Python pickle where llama.cpp's state belongs; never loaded")
    checkpoints = tuple(Checkpoint(n_tokens=n, state=data) for (n, _nbytes), data in zip(header.checkpoints, states))
    return SequenceSnapshot(tokens=header.tokens, state=state, adapters=header.adapters, checkpoints=checkpoints,
                            origin=header.origin)
