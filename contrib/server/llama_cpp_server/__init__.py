"""An OpenAI-compatible server on the llama_cpp engine (``python -m llama_cpp.server``).

Every request goes through the model's engine: concurrent requests share one context up to ``n_seq_max``
sequences decoded together, the others wait in a bounded queue.  docs/server.md has the settings, routes,
security switches, metrics, the chat page and the Ray Serve recipe.
"""

from __future__ import annotations

from .app import create_app
from .models import LlamaProxy, ModelPool
from .settings import ConfigFileSettings, ModelSettings, ServerSettings, Settings, load_settings

__all__ = ["ConfigFileSettings", "LlamaProxy", "ModelPool", "ModelSettings", "ServerSettings", "Settings",
           "create_app", "load_settings"]
