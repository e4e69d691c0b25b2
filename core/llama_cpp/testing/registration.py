"""Registering a plugin for the duration of a test."""

from __future__ import annotations

import contextlib
from typing import Iterator

from ..plugins import get_host


@contextlib.contextmanager
def registered_plugin(plugin: object, name: str | None = None) -> Iterator[str]:
    """Register ``plugin`` (a module or an object with hookimpls) inside the block only.

    A plugin that is already registered (installed through its entry point)
    stays as it is and is not unregistered afterwards.
    """
    host = get_host()
    host.ensure_loaded()
    if host.pm.is_registered(plugin):
        yield host.pm.get_name(plugin) or ""
        return
    registered = host.register(plugin, name=name)
    try:
        yield registered
    finally:
        host.unregister(name=registered)
