"""The server's settings: command-line flags, environment variables and a config file, checked by pydantic.

``python -m llama_cpp.server --model m.gguf --n_ctx 8192`` (the reference server's flag spelling), the same
names as environment variables (``MODEL``, ``N_CTX``, ``API_KEYS``...), or ``--config_file server.yaml``
(JSON, YAML or TOML) with the server's keys and a ``models`` list for several models.  Flags win over the
environment, which wins over the file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class ModelSettings(BaseModel):
    """One model the server serves: the file, its name for clients, and how it is loaded (``Llama``'s
    keywords; anything not listed here goes in ``llama_kwargs``)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    model: str | None = Field(None, description="path to the GGUF model (none: the default model)")
    model_alias: str | None = Field(None, description="the name clients use in 'model' (default: the file name)")
    hf_repo: str | None = Field(None, description="fetch the model from this Hugging Face repository ...")
    hf_file: str | None = Field(None, description="... the file matching this glob")
    mmproj_path: str | None = Field(None, description="multimodal projector GGUF (images, audio)")
    clip_model_path: str | None = Field(None, description="the old name of mmproj_path")
    chat_format: str | None = None
    n_ctx: int = Field(8192, ge=0, description="context size, shared by the sequences")
    n_seq_max: int = Field(4, ge=1, le=256, description="sequences decoded together (continuous batching)")
    n_batch: int = Field(2048, ge=1)
    n_ubatch: int = Field(512, ge=1)
    n_threads: int | None = Field(None, ge=1)
    n_threads_batch: int | None = Field(None, ge=1)
    n_gpu_layers: int | str = "auto"
    seed: int = -1
    embeddings: bool = Field(False, description="also serve /v1/embeddings and /v1/rerank from this model")
    cache: bool = Field(False, description="a prompt cache shared by the sequences")
    cache_type: Literal["ram", "trie", "disk"] = "ram"
    cache_size: int = Field(2 << 30, ge=1)
    speculative: dict[str, Any] | None = None
    verbose: bool = False
    llama_kwargs: dict[str, Any] = Field(default_factory=dict, description="any other Llama keyword")

    @model_validator(mode="after")
    def _one_projector(self) -> ModelSettings:
        if self.mmproj_path is None:
            self.mmproj_path = self.clip_model_path
        elif self.clip_model_path not in (None, self.mmproj_path):
            raise ValueError("mmproj_path and clip_model_path (its old name) name different files")
        if (self.hf_repo is None) != (self.hf_file is None):
            raise ValueError("hf_repo and hf_file go together")
        return self

    @property
    def name(self) -> str:
        """The model's name in requests and /v1/models."""
        if self.model_alias:
            return self.model_alias
        if self.model:
            return Path(self.model).name
        if self.hf_repo:
            return f"{self.hf_repo}/{self.hf_file}"
        return "default"


class ServerSettings(BaseModel):
    """How the server listens and what it lets through."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    ssl_keyfile: str | None = None
    ssl_certfile: str | None = None
    root_path: str = ""
    api_keys: list[str] = Field(default_factory=list, description="accepted keys (Bearer or X-Api-Key); none: open")
    api_key: str | None = Field(None, description="one key (the reference server's setting)")
    cors_origins: list[str] = Field(default_factory=list, description="origins allowed by CORS; none: CORS off")
    cors_allow_credentials: bool = False
    max_body_bytes: int = Field(8 << 20, ge=1024, description="largest request body")
    max_prompt_tokens: int | None = Field(None, ge=1, description="longest prompt (default: the context)")
    max_n: int = Field(8, ge=1, description="largest 'n' (choices per prompt)")
    max_queue: int = Field(64, ge=0, description="requests that may wait for a sequence; more get 429")
    request_timeout: float = Field(600.0, gt=0, description="seconds a request may take, waiting included")
    max_loaded_models: int = Field(1, ge=1, description="models kept loaded; the least recently used goes")
    allow_remote_media: bool = Field(True, description="fetch http(s) media URLs (public addresses only)")
    allow_private_media: bool = Field(False, description="let media URLs reach private and loopback addresses")
    allow_local_media: bool = Field(False, description="let media parts name files on this machine")
    chat_page: bool = Field(True, description="serve the chat page at /")

    @model_validator(mode="after")
    def _cors_and_keys(self) -> ServerSettings:
        if self.api_key and self.api_key not in self.api_keys:
            self.api_keys = [*self.api_keys, self.api_key]
        if "*" in self.cors_origins and self.cors_allow_credentials:
            raise ValueError("cors_origins '*' with cors_allow_credentials: browsers refuse it, and it would let "
                             "any site act with a user's credentials; list the origins")
        return self


class Settings(BaseSettings, ServerSettings, ModelSettings):
    """Everything, flat: the server's keys, one model's keys, and ``models`` for several.  Read by
    :func:`load_settings`; also a plain constructor (``Settings(model="m.gguf", n_seq_max=8)``)."""

    model_config = SettingsConfigDict(extra="forbid", protected_namespaces=(), case_sensitive=False,
                                      env_ignore_empty=True, cli_prog_name="python -m llama_cpp.server",
                                      cli_implicit_flags=False, cli_avoid_json=True)

    models: list[ModelSettings] = Field(default_factory=list, description="several models (config file)")
    config_file: str | None = Field(None, description="JSON, YAML or TOML file of settings (env CONFIG_FILE)")

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: Any, env_settings: Any,
                                   dotenv_settings: Any, file_secret_settings: Any) -> tuple[Any, ...]:
        # the flags come first (pydantic-settings puts them there), then the environment, then what the
        # constructor got: load_settings passes the config file's keys that way
        return env_settings, init_settings

    def model_list(self) -> list[ModelSettings]:
        """The models to serve: ``models``, or the one described by the top-level model keys."""
        if self.models:
            return list(self.models)
        return [ModelSettings(**{k: getattr(self, k) for k in ModelSettings.model_fields})]

    def server(self) -> ServerSettings:
        """The server's own keys."""
        return ServerSettings(**{k: getattr(self, k) for k in ServerSettings.model_fields})


def read_config_file(path: str) -> dict[str, Any]:
    """A config file's keys: JSON, YAML or TOML by its extension."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"config_file {path!r} not found")
    text = p.read_text(encoding="utf-8")
    if p.suffix in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(text)
    elif p.suffix == ".toml":
        try:
            import tomllib
        except ImportError:  # Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        data = tomllib.loads(text)
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"config_file {path!r} must hold a mapping of settings")
    return data


def load_settings(argv: Sequence[str] | None = None) -> Settings:
    """Settings from flags (``argv``, default ``sys.argv[1:]``), the environment and the config file named by
    ``--config_file`` or ``CONFIG_FILE``; flags win over the environment, which wins over the file."""
    args = list(sys.argv[1:] if argv is None else argv)
    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--config_file", "--config-file")
    path = peek.parse_known_args(args)[0].config_file or os.environ.get("CONFIG_FILE")
    from_file = read_config_file(path) if path else {}
    return Settings(_cli_parse_args=args, **from_file)
