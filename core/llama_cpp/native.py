"""For plugins that own native resources (a draft model, a draft context, an mtmd context).

The same owners the core uses: one object per pointer, freed exactly once,
and loaders whose errors carry llama.cpp's own reason (``capture_messages``
collects what llama.cpp and mtmd log during a call, for such an error), and
``hub_download``, the Hub fetch behind ``from_pretrained`` (for a plugin's
own, such as the multimodal handlers' mmproj files).
"""

from __future__ import annotations

from ._handles import Closing, NativeHandle, SharedHandle, load_model, new_context
from ._hub import hub_download
from ._logger import capture_messages
from ._params import BufferOverrides, moe_cpu_overrides

__all__ = ["BufferOverrides", "Closing", "NativeHandle", "SharedHandle", "capture_messages", "hub_download",
           "load_model", "moe_cpu_overrides", "new_context"]
