"""The responses OpenAI's Responses API keeps (``store: true``): what ``previous_response_id`` continues and
``GET``/``DELETE /v1/responses/{id}`` read.

A stored response holds the answer as it was sent, the input items of its request, and the conversation it ended
(chat messages, the answer's included), so a continuation renders the same conversation the model saw plus the new
input, and the engine finds that prompt's prefix in memory.  The store is bounded by count and by bytes (the least
recently used go first), scoped to the tenant that made each response (another API key gets a 404, as if it did not
exist), and optionally mirrored to JSON files in a folder, so that stored responses outlive a restart.  A file is
data, never code (no pickle); one that does not parse into a record is skipped.

A stored response lives in the server that made it.  With several replicas behind one address (Ray Serve), a
continuation must reach that one, so a store can have a *home*: a tag its replica is known by, which every id it
makes begins with (:meth:`ResponseStore.new_id`, :func:`home_tag`), and which a router reads back from a
``previous_response_id`` or a ``/v1/responses/{id}`` path (:func:`home_of`) without any state of its own.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import re
import threading
import uuid
from pathlib import Path
from typing import Any

import attrs

log = logging.getLogger("llama_cpp_server")

#: what an id looks like (``resp_`` and 32 hex digits): nothing else names a file in the folder
ID = re.compile(r"resp_[0-9a-f]{32}")
#: hex digits of an id, after ``resp_``, that name its store's home (random in a store without one)
HOME_DIGITS = 8


def home_tag(replica: str) -> str:
    """The home of the store of the replica called ``replica`` (a Serve replica's unique id): a hash of the name,
    :data:`HOME_DIGITS` hex digits."""
    return hashlib.blake2b(replica.encode("utf-8"), digest_size=HOME_DIGITS // 2).hexdigest()


def home_of(response_id: object) -> str | None:
    """The home tag a response id carries (None when ``response_id`` is not a response id).  For an id made by a
    store without a home these digits are random, and name no replica."""
    if not isinstance(response_id, str) or not ID.fullmatch(response_id):
        return None
    return response_id[5:5 + HOME_DIGITS]


@attrs.frozen
class StoredResponse:
    id: str
    tenant: str  # whom it was made for (:func:`.guards.request_tenant`)
    response: dict[str, Any]  # the response object as answered
    input_items: list[dict[str, Any]]  # its request's input items, each with an id
    conversation: list[dict[str, Any]]  # the chat messages up to and including its answer, instructions aside

    def to_json(self) -> bytes:
        return json.dumps(attrs.asdict(self), ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> StoredResponse:
        """A record from its file; ValueError if it is not one."""
        value = json.loads(data)
        if not isinstance(value, dict) or set(value) != {f.name for f in attrs.fields(cls)}:
            raise ValueError("not a stored response")
        record = cls(**value)
        if not (isinstance(record.id, str) and ID.fullmatch(record.id) and isinstance(record.tenant, str)
                and isinstance(record.response, dict) and isinstance(record.input_items, list)
                and isinstance(record.conversation, list)):
            raise ValueError("not a stored response")
        return record


class ResponseStore:
    """At most ``max_count`` responses of at most ``max_bytes`` in all; ``folder``: where they are mirrored;
    ``home``: the tag its ids begin with (:func:`home_tag`; "" for none, until its replica sets it)."""

    def __init__(self, max_count: int, max_bytes: int, folder: str | Path | None = None) -> None:
        self.home = ""
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.folder = Path(folder) if folder is not None else None
        self._lock = threading.Lock()
        self._records: collections.OrderedDict[str, tuple[StoredResponse, int]] = collections.OrderedDict()
        self._bytes = 0
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._load()

    def __len__(self) -> int:
        return len(self._records)

    @property
    def home(self) -> str:
        return self._home

    @home.setter
    def home(self, tag: str) -> None:
        if tag and not re.fullmatch(f"[0-9a-f]{{{HOME_DIGITS}}}", tag):
            raise ValueError(f"a store's home is {HOME_DIGITS} hex digits (home_tag), got {tag!r}")
        self._home = tag

    def new_id(self) -> str:
        """A new response id, beginning with this store's home."""
        return f"resp_{self.home}{uuid.uuid4().hex[len(self.home):]}"

    def _load(self) -> None:
        """The folder's records, oldest first, as far as the bounds allow."""
        assert self.folder is not None
        files = sorted((p for p in self.folder.glob("resp_*.json") if ID.fullmatch(p.stem)),
                       key=lambda p: p.stat().st_mtime)
        for path in files:
            try:
                if path.stat().st_size > self.max_bytes:
                    raise ValueError("larger than the store")
                record = StoredResponse.from_json(path.read_bytes())
                if record.id != path.stem:
                    raise ValueError("its id is not its name")
            except (OSError, ValueError) as exc:
                log.warning("stored response %s skipped: %s", path.name, exc)
                continue
            self._insert(record, path.stat().st_size)

    def _insert(self, record: StoredResponse, size: int) -> None:
        """Add (lock held or loading), then evict the least recently used past the bounds."""
        self._records[record.id] = (record, size)
        self._bytes += size
        while self._records and (len(self._records) > self.max_count or self._bytes > self.max_bytes):
            _, (evicted, size) = self._records.popitem(last=False)
            self._forget(evicted, size)

    def _forget(self, record: StoredResponse, size: int) -> None:
        self._bytes -= size
        if self.folder is not None:
            (self.folder / f"{record.id}.json").unlink(missing_ok=True)

    def put(self, record: StoredResponse) -> None:
        """Keep ``record`` (one larger than the whole store is not kept)."""
        data = record.to_json()
        if len(data) > self.max_bytes:
            log.warning("response %s not stored: %d bytes, more than the store's %d", record.id, len(data),
                        self.max_bytes)
            return
        with self._lock:
            if self.folder is not None:
                (self.folder / f"{record.id}.json").write_bytes(data)
            self._insert(record, len(data))

    def get(self, response_id: str, tenant: str) -> StoredResponse | None:
        """The record of ``response_id`` if ``tenant`` made it (it becomes the most recently used)."""
        with self._lock:
            entry = self._records.get(response_id)
            if entry is None or entry[0].tenant != tenant:
                return None
            self._records.move_to_end(response_id)
            return entry[0]

    def delete(self, response_id: str, tenant: str) -> bool:
        """Forget ``response_id`` if ``tenant`` made it; whether it did."""
        with self._lock:
            entry = self._records.get(response_id)
            if entry is None or entry[0].tenant != tenant:
                return False
            del self._records[response_id]
            self._forget(*entry)
            return True
