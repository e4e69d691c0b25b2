"""For plugins that own native resources (a draft model, a draft context, an mtmd context).

The same owners the core uses: one object per pointer, freed exactly once,
and loaders whose errors carry llama.cpp's own reason.
"""

from __future__ import annotations

from ._handles import Closing, NativeHandle, load_model, new_context
from ._params import BufferOverrides, moe_cpu_overrides

__all__ = ["BufferOverrides", "Closing", "NativeHandle", "load_model", "moe_cpu_overrides", "new_context"]
