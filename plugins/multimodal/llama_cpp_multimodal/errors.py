"""The one exception of media loading."""

from __future__ import annotations


class MediaError(ValueError):
    """A media part that cannot be used: refused by the policy, unreadable, or not what it claims to be.

    A ``ValueError``, so callers that already turn bad requests into HTTP 400 (the server) or user errors need
    nothing new; its message names the content part and what is allowed.
    """
