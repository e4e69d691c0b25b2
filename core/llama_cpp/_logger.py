"""Routing llama.cpp's log messages: verbosity levels and substring filters.

llama.cpp has one log callback per process, so this configuration is
process-global: ``Llama(verbose=False)`` or ``set_verbosity()`` on one
instance affects every instance.  Messages go to the ``logging`` logger
``"llama-cpp-python"`` (level 0 "output" to stdout, the others to stderr
through that logger's handler).

Levels: 0 output, 1 error, 2 warn, 3 info (the default), 4 trace, 5 debug.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import sys
import threading
from typing import Callable, Iterable, Iterator

from llama_cpp_native import ffi, lib

logger = logging.getLogger("llama-cpp-python")

DEFAULT_LOG_FILTERS: list[str] = ["CUDA Graph", "CUDA graph"]

_ALIASES = {
    "output": 0, "none": 0,
    "error": 1, "err": 1, "silent": 1,
    "warn": 2, "warning": 2, "quiet": 2,
    "info": 3, "default": 3, "normal": 3,
    "trace": 4, "trc": 4,
    "debug": 5, "verbose": 5,
}
# ggml level -> verbosity level needed to show it (CONT continues the previous message)
_GGML_LEVELS = {
    lib.GGML_LOG_LEVEL_NONE: 0,
    lib.GGML_LOG_LEVEL_ERROR: 1,
    lib.GGML_LOG_LEVEL_WARN: 2,
    lib.GGML_LOG_LEVEL_INFO: 3,
    lib.GGML_LOG_LEVEL_DEBUG: 5,
}
_PY_LEVELS = {1: logging.ERROR, 2: logging.WARNING, 3: logging.INFO, 4: logging.DEBUG, 5: logging.DEBUG}

_lock = threading.Lock()
_state = {"verbosity": 3, "last": 3, "case_sensitive": True}
_filters: list[str] = list(DEFAULT_LOG_FILTERS)


def parse_verbosity(value: object) -> int:
    """A level from an int, a numeric string, an alias or a bool (True=5, False=1)."""
    if isinstance(value, bool):
        return 5 if value else 1
    if isinstance(value, int):
        return min(5, max(0, value))
    if isinstance(value, str):
        key = value.strip().lower()
        if key in _ALIASES:
            return _ALIASES[key]
        try:
            return min(5, max(0, int(key)))
        except ValueError:
            raise ValueError(f"unknown verbosity {value!r}; use 0-5 or one of: {', '.join(sorted(_ALIASES))}") from None
    raise TypeError(f"verbosity must be an int, a string or a bool, got {type(value).__name__}")


_captures = threading.local()


class CapturedLog:
    """What llama.cpp logged on one thread during a ``capture_messages`` block."""

    __slots__ = ("messages", "errors", "quiet", "_last_error")

    def __init__(self, quiet: bool) -> None:
        self.messages: list[str] = []  # every message, whatever its level
        self.errors: list[str] = []  # the error-level ones, continuations joined
        self.quiet = quiet
        self._last_error = False

    def add(self, level: int, message: str) -> None:
        self.messages.append(message)
        if level == lib.GGML_LOG_LEVEL_CONT:
            if self._last_error and self.errors:
                self.errors[-1] += message
            return
        self._last_error = level == lib.GGML_LOG_LEVEL_ERROR
        if self._last_error:
            self.errors.append(message)

    def reason(self, fallback: str) -> str:
        """llama.cpp's error lines, each once and in order, or ``fallback`` when it logged none."""
        lines: list[str] = []
        for message in self.errors:
            for line in message.splitlines():
                line = line.strip()
                if line and line not in lines:
                    lines.append(line)
        return "; ".join(lines) if lines else fallback


@contextlib.contextmanager
def capture_messages(*, quiet: bool = False) -> Iterator[CapturedLog]:
    """Collect what llama.cpp logs on this thread inside the block, whatever the level.

    Used to put llama.cpp's own diagnostic into the exception a failed call
    raises.  With ``quiet`` the captured messages are not also printed (the
    exception carries them), which is what ``Llama(verbose=False)`` asks for.
    """
    captured = CapturedLog(quiet)
    previous = getattr(_captures, "log", None)
    _captures.log = captured
    # the low-level API may have replaced the callback (llama_log_set): take it back for the call
    installed = ffi.new("ggml_log_callback *")
    user_data = ffi.new("void **")
    lib.llama_log_get(installed, user_data)
    foreign = ffi.cast("void *", installed[0]) != ffi.cast("void *", _on_log)
    if foreign:
        lib.llama_log_set(_on_log, ffi.NULL)
    try:
        yield captured
    finally:
        _captures.log = previous
        if foreign:
            lib.llama_log_set(installed[0], user_data[0])


_hushed = threading.local()


@contextlib.contextmanager
def hush_when_aborted(aborted: Callable[[], bool]) -> Iterator[None]:
    """Inside the block, on this thread, llama.cpp's error lines are dropped once ``aborted()`` is true.

    A compute stopped on purpose by the abort callback (``Llama.abort()``, a server dropping a request
    whose client left, ``close()``) logs three error lines ("failed to compute graph", ...), which only
    alarm whoever asked for the abort; the aborted request ends with its own finish reason."""
    previous = getattr(_hushed, "aborted", None)
    _hushed.aborted = aborted
    try:
        yield
    finally:
        _hushed.aborted = previous


@ffi.callback("ggml_log_callback")
def _on_log(level: int, text: object, user_data: object) -> None:
    message = ffi.string(text).decode("utf-8", "replace")
    captured = getattr(_captures, "log", None)
    if captured is not None:
        captured.add(level, message)
        if captured.quiet:
            return
    aborted = getattr(_hushed, "aborted", None)
    if aborted is not None and level in (lib.GGML_LOG_LEVEL_ERROR, lib.GGML_LOG_LEVEL_CONT) and aborted():
        return
    needed = _state["last"] if level == lib.GGML_LOG_LEVEL_CONT else _GGML_LEVELS.get(level, 3)
    _state["last"] = needed
    if needed > _state["verbosity"]:
        return
    if _filters:
        haystack = message if _state["case_sensitive"] else message.lower()
        for f in _filters:
            if (f if _state["case_sensitive"] else f.lower()) in haystack:
                return
    if needed == 0:
        sys.stdout.write(message)
    else:
        sys.stderr.write(message)


def _route(callback: object) -> None:
    """Send llama.cpp's, ggml's and mtmd's messages to ``callback`` (a ``ggml_log_callback``)."""
    lib.llama_log_set(callback, ffi.NULL)
    if hasattr(lib, "mtmd_helper_log_set"):
        lib.mtmd_helper_log_set(callback, ffi.NULL)


def _discard_at_exit() -> None:
    """Drop llama.cpp's messages from here on (an ``atexit`` hook).

    The interpreter's teardown frees ``_on_log`` with this module, and models and contexts that are only
    freed then (a ``Llama`` held by another module's global, or by a reference cycle) still log while they
    are freed: through a freed callback, that is a segmentation fault at exit.  atexit hooks run before the
    teardown, and the discarding callback is C, which nothing frees."""
    _route(lib.llama_cpp_native_log_discard)


def set_verbosity(value: object) -> int:
    level = parse_verbosity(value)
    with _lock:
        _state["verbosity"] = level
    return level


def get_verbosity() -> int:
    return int(_state["verbosity"])


def set_verbose(verbose: bool) -> None:
    set_verbosity(5 if verbose else 3)


def set_quiet() -> None:
    set_verbosity(2)


def set_silent() -> None:
    set_verbosity(1)


def set_log_filters(filters: Iterable[str], *, case_sensitive: bool = True) -> None:
    with _lock:
        _filters[:] = [str(f) for f in filters]
        _state["case_sensitive"] = case_sensitive


def add_log_filters(filters: Iterable[str]) -> None:
    with _lock:
        _filters.extend(str(f) for f in filters if str(f) not in _filters)


def get_log_filters() -> list[str]:
    return list(_filters)


def get_log_filters_case_sensitive() -> bool:
    return bool(_state["case_sensitive"])


def clear_log_filters() -> None:
    set_log_filters([])


def reset_log_filters() -> None:
    set_log_filters(DEFAULT_LOG_FILTERS)


def reset_logging() -> None:
    set_verbosity(3)
    reset_log_filters()


def configure_logging(*, verbosity: object = None, verbose: bool | None = None, quiet: bool = False,
                      silent: bool = False, log_filters: Iterable[str] | None = None,
                      append_log_filters: bool = False, log_filters_case_sensitive: bool = True) -> int:
    """Set the process-wide level (silent > quiet > verbosity > verbose) and filters."""
    if silent:
        level = set_verbosity(1)
    elif quiet:
        level = set_verbosity(2)
    elif verbosity is not None:
        level = set_verbosity(verbosity)
    elif verbose is not None:
        level = set_verbosity(5 if verbose else 1)
    else:
        level = get_verbosity()
    if log_filters is not None:
        if append_log_filters:
            add_log_filters(log_filters)
            _state["case_sensitive"] = log_filters_case_sensitive
        else:
            set_log_filters(log_filters, case_sensitive=log_filters_case_sensitive)
    return level


_route(_on_log)
atexit.register(_discard_at_exit)
