"""The disk cache: sequence snapshots as state files in a directory, least recently used first out.

Each entry is one file in llama_cpp's own state file format
(:mod:`llama_cpp.state_file`: a header with the model and context the state
belongs to, its adapters and tokens, a sha256 over everything, then
llama.cpp's state; no pickle).  The directory is the whole truth, so it
survives restarts and can be shared by several processes and models:

- the index (a token trie) is built from the files' headers alone, and the
  directory listing is read again on every lookup and store, so files other
  processes wrote or deleted are noticed;
- a file is written under a temporary name and renamed into place, so its
  final name only ever holds a whole file; one that vanishes or changes while
  it is read is skipped;
- the access time is the file's mtime (set on every hit), so the least
  recently used order is the same for every process and after a restart;
  a pinned entry's mtime is the end of its pin (in the future), so it is
  evicted only after every entry used before then;
- a file is trusted only once all of it has been read and its sha256 checked:
  a damaged, truncated or pickled file is reported with a warning and
  deleted, and the lookup goes on to the next candidate.  A file of another
  model or context is another Llama's entry: skipped, never restored (told
  with ``verbose``).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

from llama_cpp import state_file
from llama_cpp.engine import SequenceSnapshot
from llama_cpp.llama_cache import BaseLlamaCache

from .trie import TokenTrie

SUFFIX = ".llseq"
STALE_TEMPORARY_SECONDS = 3600  # a temporary file this old was left by a writer that died


class _File:
    """What the index knows of one cache file (from its header and its stat)."""

    __slots__ = ("name", "id", "tokens", "adapters", "origin", "size", "used")

    def __init__(self, name: str, entry_id: int, about: state_file.StateFileHeader | SequenceSnapshot,
                 stat: os.stat_result) -> None:
        self.name, self.id = name, entry_id
        self.tokens, self.adapters, self.origin = about.tokens, about.adapters, about.origin
        self.size, self.used = stat.st_size, stat.st_mtime_ns

    def describes(self, snapshot: SequenceSnapshot) -> bool:
        return (self.tokens, self.adapters, self.origin) == (snapshot.tokens, snapshot.adapters, snapshot.origin)

    def fits(self, adapters: Any, origin: Any) -> bool:
        return (adapters is None or self.adapters == adapters) and (origin is None or self.origin == origin)


class LlamaDiskCache(BaseLlamaCache):
    """Snapshots as files in ``cache_dir`` (created if missing).  The files' total size never exceeds
    ``capacity_bytes`` after a store by this process: the least recently used files go first, and a
    snapshot larger than the whole capacity is not stored.  A lookup finds the entry sharing the longest
    prefix with the prompt, for the right model, context and adapters; ``verbose`` prints hits, misses and
    skipped entries to stderr.  The last snapshot stored or loaded stays in memory too, so that asking
    for it again (the next turn of a chat) reads nothing."""

    def __init__(self, cache_dir: str | os.PathLike[str] = ".cache/llama_cache", capacity_bytes: int = 2 << 30,
                 verbose: bool = False) -> None:
        super().__init__(capacity_bytes)
        self.cache_dir = Path(cache_dir)
        self.verbose = verbose
        self._lock = threading.RLock()  # one cache object may serve Llamas on several threads
        self._files: dict[str, _File] = {}
        self._by_id: dict[int, _File] = {}
        self._unreadable: set[str] = set()  # files of another format version: left alone, not read again
        self._trie = TokenTrie()
        self._next_id = 0
        self._recent: tuple[str, tuple[int, int, int], SequenceSnapshot] | None = None  # (name, stat key, value)
        with self._lock:
            self._scan()

    # -- the protocol ---------------------------------------------------------------------
    @property
    def cache_size(self) -> int:
        """Bytes of the cache files now in the directory (whoever wrote them)."""
        with self._lock:
            self._scan()
            self._restat()
            return sum(f.size for f in self._files.values())

    def __len__(self) -> int:
        with self._lock:
            self._scan()
            return len(self._files)

    def __contains__(self, key: Sequence[int]) -> bool:
        with self._lock:
            self._scan()
            return bool(self._trie.shared([int(t) for t in key]))

    def __getitem__(self, key: Sequence[int]) -> SequenceSnapshot:
        found = self.lookup(key)
        if found is None:
            raise KeyError("no cached entry shares a prefix with these tokens")
        return found[1]

    def __setitem__(self, key: Sequence[int], value: SequenceSnapshot) -> None:
        self._store(key, value, 0)

    def pin(self, key: Sequence[int], value: Any, seconds: float) -> None:
        self._store(key, value, time.time_ns() + int(seconds * 1e9))

    def renew(self, tokens: Sequence[int], adapters: Any = None, origin: Any = None, seconds: float = 0.0) -> bool:
        wanted = [int(t) for t in tokens]
        with self._lock:
            self._scan()
            path = self._trie.shared(wanted)
            if not wanted or len(path) < len(wanted):
                return False
            holders = [self._by_id[i] for i in path[-1] if i in self._by_id and self._by_id[i].fits(adapters, origin)]
            for entry in sorted(holders, key=lambda f: f.used, reverse=True):
                try:
                    stat = _touch(self.cache_dir / entry.name, time.time_ns() + int(seconds * 1e9))
                except FileNotFoundError:  # evicted by another process
                    self._forget(entry.name)
                    continue
                entry.used = stat.st_mtime_ns
                return True
            return False

    def _store(self, key: Sequence[int], value: SequenceSnapshot, pinned_until_ns: int) -> None:
        if not isinstance(value, SequenceSnapshot):
            raise TypeError(f"the disk cache stores llama_cpp.engine.SequenceSnapshot values (what the engine "
                            f"gives it), not {type(value).__name__}")
        tokens = tuple(int(t) for t in key)
        if tokens != value.tokens:
            raise ValueError("the key must be the snapshot's own tokens")
        encoded = state_file.encode(value)
        name = encoded.key + SUFFIX
        size = encoded.size
        with self._lock:
            self._scan()
            if size > self.capacity_bytes:
                self._say(f"a snapshot of {size} bytes is larger than the capacity ({self.capacity_bytes}): "
                          "not stored")
                return
            self._make_room(size, replacing=name)
            path = self.cache_dir / name
            try:
                encoded.write(path)
            except OSError as exc:  # a full or read-only disk costs the cache entry, not the generation
                warnings.warn(f"llama_cpp disk cache: cannot write {path}: {exc}; not stored", RuntimeWarning,
                              stacklevel=2)
                return
            self._forget(name)
            try:
                stat = _touch(path, pinned_until_ns)
            except FileNotFoundError:  # another process's eviction got there first: nothing to index
                return
            self._add(name, value, stat)
            self._recent = (name, _stat_key(stat), value)

    def lookup(self, tokens: Sequence[int], adapters: Any = None, origin: Any = None) -> tuple[int, Any] | None:
        with self._lock:
            self._scan()
            path = self._trie.shared([int(t) for t in tokens])  # (a file dropped while loading stays in it)
            foreign = 0
            tried: set[str] = set()  # an entry is also a candidate at every shallower depth: read it once
            for depth in range(len(path), 0, -1):
                entries = [self._by_id[i] for i in path[depth - 1] if i in self._by_id]
                fitting = sorted((f for f in entries if f.fits(adapters, origin) and f.name not in tried),
                                 key=lambda f: f.used, reverse=True)
                foreign = max(foreign, sum(1 for f in entries if not f.fits(None, origin)))
                for entry in fitting:
                    tried.add(entry.name)
                    snapshot = self._load(entry, origin)
                    if snapshot is not None:
                        self._say(f"hit: {depth} of {len(tokens)} tokens ({entry.name})")
                        return depth, snapshot
            if foreign:
                self._say(f"skipped {foreign} entries of another model or context")
            self._say(f"miss for {len(tokens)} tokens")
            return None

    def prefixes(self, origin: Any = None) -> list[tuple[tuple[int, ...], Any]]:
        with self._lock:
            self._scan()
            return [(tuple(f.tokens), f.adapters) for f in self._files.values() if f.fits(None, origin)]

    def clear(self) -> None:
        """Delete every cache file in the directory."""
        with self._lock:
            self._scan()
            for name in list(self._files):
                self._delete(name)

    # -- the index --------------------------------------------------------------------------
    def _scan(self) -> None:
        """Bring the index in line with the directory: new files are indexed from their headers, vanished
        ones forgotten, temporary files left by dead writers removed."""
        names = set()
        now = time.time()
        self.cache_dir.mkdir(parents=True, exist_ok=True)  # (someone may have removed the whole directory)
        with os.scandir(self.cache_dir) as listing:
            for item in listing:
                if item.name.startswith("."):
                    if item.name.endswith(".tmp"):
                        self._remove_stale(item, now)
                elif item.name.endswith(SUFFIX):
                    names.add(item.name)
        for name in set(self._files) - names:
            self._forget(name)
        self._unreadable &= names
        for name in names - set(self._files) - self._unreadable:
            self._index(name)

    def _remove_stale(self, item: os.DirEntry[str], now: float) -> None:
        try:
            if now - item.stat().st_mtime > STALE_TEMPORARY_SECONDS:
                os.unlink(item.path)
        except OSError:
            pass  # another process removed or renamed it

    def _index(self, name: str) -> None:
        path = self.cache_dir / name
        try:
            with open(path, "rb") as fh:
                stat = os.fstat(fh.fileno())
                header = state_file.read_header(fh)
        except FileNotFoundError:
            return
        except state_file.UnsupportedStateFileVersion as exc:
            self._unreadable.add(name)
            warnings.warn(f"llama_cpp disk cache: {exc}; left alone", RuntimeWarning, stacklevel=2)
            return
        except state_file.StateFileError as exc:
            self._reject(name, exc, stat.st_ino)
            return
        except OSError as exc:
            warnings.warn(f"llama_cpp disk cache: cannot read {path}: {exc}; skipped", RuntimeWarning, stacklevel=2)
            return
        self._add(name, header, stat)

    def _add(self, name: str, about: state_file.StateFileHeader | SequenceSnapshot, stat: os.stat_result) -> None:
        entry = _File(name, self._next_id, about, stat)
        self._next_id += 1
        self._files[name] = entry
        self._by_id[entry.id] = entry
        self._trie.add(entry.tokens, entry.id)

    def _forget(self, name: str) -> None:
        entry = self._files.pop(name, None)
        if entry is not None:
            del self._by_id[entry.id]
            self._trie.remove(entry.tokens, entry.id)
        if self._recent is not None and self._recent[0] == name:
            self._recent = None

    def _restat(self) -> None:
        """Fresh sizes and access times of every indexed file (other processes use them too)."""
        for name, entry in list(self._files.items()):
            try:
                stat = (self.cache_dir / name).stat()
            except FileNotFoundError:
                self._forget(name)
                continue
            entry.size, entry.used = stat.st_size, stat.st_mtime_ns

    def _make_room(self, size: int, replacing: str) -> None:
        """Delete the least recently used files until ``size`` more bytes fit (``replacing``'s bytes are
        given back first)."""
        self._restat()
        others = sorted((f for f in self._files.values() if f.name != replacing), key=lambda f: f.used)
        total = sum(f.size for f in others)
        for entry in others:
            if total + size <= self.capacity_bytes:
                break
            self._delete(entry.name)
            total -= entry.size

    # -- files --------------------------------------------------------------------------------
    def _load(self, entry: _File, origin: Any) -> SequenceSnapshot | None:
        """The entry's snapshot, all of it checked (None if the file is gone, changed or damaged)."""
        path = self.cache_dir / entry.name
        try:
            with open(path, "rb") as fh:
                stat = os.fstat(fh.fileno())
                recent = self._recent
                if recent is not None and recent[0] == entry.name and recent[1] == _stat_key(stat):
                    snapshot = recent[2]
                else:
                    snapshot = state_file.read_state_file(fh, origin=origin)
        except FileNotFoundError:  # evicted by another process
            self._forget(entry.name)
            return None
        except state_file.ForeignStateFile:  # replaced under us by a file of other content: index it again
            self._forget(entry.name)
            self._index(entry.name)
            return None
        except state_file.StateFileError as exc:
            self._reject(entry.name, exc, stat.st_ino)
            return None
        except OSError as exc:
            warnings.warn(f"llama_cpp disk cache: cannot read {path}: {exc}; skipped", RuntimeWarning, stacklevel=2)
            return None
        if not entry.describes(snapshot):  # replaced under us by another file: index what is there now
            self._forget(entry.name)
            self._index(entry.name)
            return None
        try:  # the access goes into the file itself (its mtime), where every process sees it; a pin's stays
            stat = _touch(path, stat.st_mtime_ns)
        except FileNotFoundError:  # evicted by another process just now: what was read is still whole
            self._forget(entry.name)
            return snapshot
        entry.used = stat.st_mtime_ns
        self._recent = (entry.name, _stat_key(stat), snapshot)
        return snapshot

    def _reject(self, name: str, error: Exception, inode: int) -> None:
        """A damaged file: say so, and delete it (unless another process has put a new file there since)."""
        warnings.warn(f"llama_cpp disk cache: {error}; the file is deleted and not used", RuntimeWarning,
                      stacklevel=2)
        path = self.cache_dir / name
        try:
            if path.stat().st_ino == inode:
                os.unlink(path)
        except FileNotFoundError:
            pass
        self._forget(name)

    def _delete(self, name: str) -> None:
        try:
            os.unlink(self.cache_dir / name)
        except FileNotFoundError:
            pass  # another process deleted it first
        self._forget(name)

    def _say(self, message: str) -> None:
        if self.verbose:
            print(f"{type(self).__name__}: {message}", file=sys.stderr)


def _touch(path: Path, not_before_ns: int = 0) -> os.stat_result:
    """Set the file's mtime to now, to the nanosecond (the kernel's own stamp is only as fine as its
    scheduler tick, which would leave files used a few ms apart in no order), or to ``not_before_ns`` if that
    is later: a pinned file's mtime is the end of its pin, so that eviction, oldest first, reaches it only
    after every file used before then (in every process, and after a restart)."""
    now = max(time.time_ns(), not_before_ns)
    os.utime(path, ns=(now, now))
    return path.stat()


def _stat_key(stat: os.stat_result) -> tuple[int, int, int]:
    """What changes when a file is replaced or rewritten: its inode, size and mtime."""
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def disk_cache_from_options(path: str | os.PathLike[str] | None = None,
                            cache_dir: str | os.PathLike[str] | None = None, capacity_bytes: int = 2 << 30,
                            verbose: bool = False) -> LlamaDiskCache:
    """The ``disk`` strategy's factory: ``path`` or the seed's ``cache_dir`` names the directory."""
    if path is not None and cache_dir is not None and Path(path) != Path(cache_dir):
        raise ValueError(f"the disk cache got two directories, path={path!r} and cache_dir={cache_dir!r}; "
                         "give one")
    directory = path if path is not None else cache_dir
    return LlamaDiskCache(".cache/llama_cache" if directory is None else directory, capacity_bytes, verbose)
