"""Capturing what native code writes straight to the process's stderr.

A few llama.cpp diagnostics bypass the log callback (the GBNF parser prints
its error with ``fprintf(stderr, ...)``).  To turn them into exception
messages, file descriptor 2 is pointed at a temporary file for the duration
of one call.  A file, not a pipe: a pipe would block the writer once its
buffer filled.  The window is one native call long; the caller decides what
to do with the text (usually: put it in the exception it raises).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from typing import Iterator

_lock = threading.Lock()


class Captured:
    text: str = ""


@contextlib.contextmanager
def capture_stderr() -> Iterator[Captured]:
    result = Captured()
    with _lock, tempfile.TemporaryFile() as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            yield result
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            result.text = tmp.read().decode("utf-8", "replace")
