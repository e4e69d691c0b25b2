"""llama-server's names of sampler stages, onto the core's (``llama_cpp.sampling``'s stage names).

A client of llama-server lists its chain in ``samplers`` with llama-server's names (``typ_p``, ``nucleus``,
``temp``; any case, ``-`` or no separator) or as a string of one letter each (``"kypmt"``); the web UI and the
editor plugins send them on every route, ``/completion`` and the OpenAI ones alike.
"""

from __future__ import annotations

from .errors import APIError

_NAMES = {"dry": "dry", "top_k": "top_k", "top_p": "top_p", "nucleus": "top_p", "top_n_sigma": "top_n_sigma",
          "typ_p": "typical_p", "typ": "typical_p", "typical_p": "typical_p", "min_p": "min_p",
          "temperature": "temperature", "temp": "temperature", "xtc": "xtc", "infill": "infill",
          "penalties": "penalties", "adaptive_p": "adaptive_p"}
_LETTERS = {"d": "dry", "k": "top_k", "y": "typical_p", "p": "top_p", "s": "top_n_sigma", "m": "min_p",
            "t": "temperature", "x": "xtc", "i": "infill", "e": "penalties", "a": "adaptive_p"}
#: the core's stage names back to llama-server's, for ``generation_settings``
SERVER_NAMES = {"typical_p": "typ_p"}


def llama_server_samplers(value: list[str] | str | None, keep_unknown: bool = False) -> tuple[str, ...] | None:
    """The core's stage names for ``samplers``: llama-server's names, or its letters.  An unknown name is
    refused (llama-server skips it with a warning), or with ``keep_unknown`` left as it is: the OpenAI routes
    also take the core's names of installed plugin stages, which the core checks."""
    if value is None:
        return None
    names: list[str] = []
    for entry in value:  # a string is its letters
        if isinstance(value, str):
            if entry not in _LETTERS:
                raise APIError(400, f"samplers: unknown sampler letter {entry!r}; allowed: {''.join(_LETTERS)}",
                               param="samplers")
            names.append(_LETTERS[entry])
            continue
        key = entry.lower().replace("-", "_")
        found = _NAMES.get(key) or next((v for k, v in _NAMES.items() if k.replace("_", "") == key), None)
        if found is None and not keep_unknown:
            raise APIError(400, f"samplers: unknown sampler {entry!r}; allowed: {', '.join(sorted(_NAMES))}",
                           param="samplers")
        names.append(found or entry)
    return tuple(names)


__all__ = ["SERVER_NAMES", "llama_server_samplers"]
