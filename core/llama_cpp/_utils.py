"""llama-cpp-python's ``llama_cpp._utils``: ``suppress_stdout_stderr`` and ``Singleton``."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, ClassVar, TextIO

__all__ = ["MetaSingleton", "Singleton", "suppress_stdout_stderr"]

_STDOUT, _STDERR = 1, 2


class suppress_stdout_stderr:  # noqa: N801 - the seed's name
    """Inside ``with suppress_stdout_stderr(disable=False):`` nothing the process writes to stdout or stderr
    shows, native code's output included (file descriptors 1 and 2 point at the null device).

    ``disable=True``, the default, leaves both alone, as in llama-cpp-python, whose code passes
    ``disable=verbose``.  Redirecting the descriptors is process-wide, so one block at a time may do it:
    a block entered while another thread's is active waits for it.
    """

    _lock: ClassVar[threading.RLock] = threading.RLock()

    def __init__(self, disable: bool = True) -> None:
        self.disable = disable
        self._saved: tuple[int, int, TextIO, TextIO] | None = None
        self._null: TextIO | None = None

    def __enter__(self) -> suppress_stdout_stderr:
        if self.disable:
            return self
        self._lock.acquire()
        sys.stdout.flush()
        sys.stderr.flush()
        self._null = open(os.devnull, "w")
        self._saved = (os.dup(_STDOUT), os.dup(_STDERR), sys.stdout, sys.stderr)
        os.dup2(self._null.fileno(), _STDOUT)
        os.dup2(self._null.fileno(), _STDERR)
        sys.stdout = sys.stderr = self._null
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is None:
            return
        out, err, sys.stdout, sys.stderr = self._saved
        self._saved = None
        os.dup2(out, _STDOUT)
        os.dup2(err, _STDERR)
        os.close(out)
        os.close(err)
        if self._null is not None:  # set with _saved by __enter__
            self._null.close()
            self._null = None
        self._lock.release()


class MetaSingleton(type):
    """Calling a class made with this metaclass gives the same instance every time (made on the first call)."""

    _instances: ClassVar[dict[type, Any]] = {}

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls not in cls._instances:
            cls._instances[cls] = super().__call__(*args, **kwargs)
        return cls._instances[cls]


class Singleton(metaclass=MetaSingleton):
    """A base class whose subclasses have one instance each (llama-cpp-python's chat handler registry)."""
