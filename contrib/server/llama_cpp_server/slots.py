"""llama-server's ``/slots``: what each engine sequence holds, and saving, restoring and erasing one.

A slot is an engine sequence (``n_seq_max`` of them).  Save and restore go through ``Llama.save_session`` /
``load_session``: the project's own state file (checked, never pickled), in ``slot_save_path``.  A file name
comes from the client, so it is held to llama-server's rules for a bare file name before it is joined to the
folder: no separators, no ``..``, no control or look-alike characters, no leading or trailing space, no
trailing dot; and the joined path must still be inside the folder.
"""

from __future__ import annotations

import os
import time
import unicodedata
from pathlib import Path
from typing import Any

from llama_cpp.state_file import StateFileError

from .errors import APIError

_FORBIDDEN_CHARACTERS = set(':*?"<>|/\\')
_LOOK_ALIKES = {"\uff0e", "\u2215", "\u2216", "\ufffd", "\ufeff"}  # fullwidth dot, division slashes, ...
MAX_NAME_BYTES = 255


def check_file_name(name: str) -> None:
    """400 unless ``name`` is a plain file name llama-server would accept."""
    encoded = name.encode("utf-8", "surrogatepass")
    bad = (not name or len(encoded) > MAX_NAME_BYTES or name in (".", "..") or ".." in name
           or name != name.strip(" ") or name.endswith(".")
           or any(c in _FORBIDDEN_CHARACTERS or c in _LOOK_ALIKES or unicodedata.category(c) in ("Cc", "Cs")
                  for c in name))
    if bad:
        raise APIError(400, "Invalid filename: a plain file name inside slot_save_path (no '/', '\\', '..', control "
                       "characters, leading or trailing space, or trailing '.')", param="filename")


def slot_file(folder: str, name: str) -> Path:
    """The file ``name`` names inside ``folder`` (checked)."""
    check_file_name(name)
    base = Path(folder).resolve()
    path = (base / name).resolve()
    if path.parent != base:  # belt and braces: the name rules already keep it there
        raise APIError(400, "Invalid filename: it leaves slot_save_path", param="filename")
    return path


def slot_list(llm: Any, speculative: bool) -> list[dict[str, Any]]:
    """``GET /slots``: each sequence's id, context, whether it speculates and whether it is busy, and the
    tokens it holds once it has held some."""
    n_ctx = llm.scheduler.ctx.n_ctx_seq
    out = []
    for info in llm.sequences():
        slot: dict[str, Any] = {"id": info.seq_id, "n_ctx": n_ctx, "speculative": speculative,
                                "is_processing": info.busy}
        if info.n_tokens:
            slot["n_prompt_tokens"] = info.n_tokens
        out.append(slot)
    return out


def _seq_id(llm: Any, id_slot: str) -> int:
    try:
        seq_id = int(id_slot)
    except ValueError:
        raise APIError(400, f"Invalid slot ID {id_slot!r}: an integer", param="id_slot") from None
    n_seq = llm.scheduler.ctx.n_seq_max
    if not 0 <= seq_id < n_seq:
        raise APIError(400, f"Invalid slot ID {seq_id}: the slots are 0..{n_seq - 1}", param="id_slot")
    return seq_id


def slot_action(llm: Any, id_slot: str, action: str | None, filename: str | None,
                folder: str | None) -> dict[str, Any]:
    """``POST /slots/{id}?action=save|restore|erase``, in llama-server's order of checks and its answers."""
    if folder is None:
        raise APIError(501, "slot actions need slot_save_path (llama-server's --slot-save-path)")
    seq_id = _seq_id(llm, id_slot)
    if action not in ("save", "restore", "erase"):
        raise APIError(400, f"Invalid action {action!r}: save, restore or erase", param="action")
    if action == "erase":
        try:
            return {"id_slot": seq_id, "n_erased": llm.erase_sequence(seq_id)}
        except RuntimeError as exc:
            raise APIError(409, str(exc), param="id_slot") from None
    if filename is None:
        raise APIError(400, "filename: required (the file in slot_save_path)", param="filename")
    path = slot_file(folder, filename)
    started = time.perf_counter()
    try:
        if action == "save":
            llm.save_session(path, seq_id)
        else:
            llm.load_session(path, seq_id)
    except FileNotFoundError:
        raise APIError(400, f"Unable to restore slot: no file {filename!r} in slot_save_path",
                       param="filename") from None
    except StateFileError as exc:
        raise APIError(400, f"Unable to restore slot: {exc}", param="filename") from None
    except RuntimeError as exc:
        raise APIError(409, str(exc), param="id_slot") from None
    ms = (time.perf_counter() - started) * 1000.0
    n_tokens = next(info.n_tokens for info in llm.sequences() if info.seq_id == seq_id)
    size = os.path.getsize(path)
    if action == "save":
        return {"id_slot": seq_id, "filename": filename, "n_saved": n_tokens, "n_written": size,
                "timings": {"save_ms": ms}}
    return {"id_slot": seq_id, "filename": filename, "n_restored": n_tokens, "n_read": size,
            "timings": {"restore_ms": ms}}
