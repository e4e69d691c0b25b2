"""The server tests' fixtures, defined in :mod:`serving` (with the helpers the tests import from there)."""

from serving import chat_model_path, fim_chat_model_path, reasoning_model_path, serve  # noqa: F401 (fixtures)
