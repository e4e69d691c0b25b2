"""Composing a Llama by configuration: capabilities chosen by plugin name.

A capability can be given as the object the seed API passes (a cache object,
a handler instance) or as a plain dict that names a plugin::

    Llama(path, cache={"strategy": "ram", "capacity_bytes": 2 << 30})

and a whole instance can be described in a dict or a TOML file::

    # llama.toml
    model_path = "models/SmolLM2-135M-Instruct.Q4_1.gguf"   # or model = "default"
    n_ctx = 2048
    [cache]
    strategy = "ram"
    [scheduling]
    policy = "fair-share"

    Llama.from_config("llama.toml")
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Mapping

from .engine.policy import Policy
from .plugins import CacheStrategy, SchedulingPolicy, SpeculativeEngine, get_host
from .sampling import SAMPLING_KEYWORDS


if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

_CONSTRUCTOR_KEYWORDS = frozenset({"seed"})  # a sampling keyword that is also one of Llama's

# config key -> (record type, key that names the plugin)
CAPABILITIES: dict[str, tuple[type, str]] = {
    "cache": (CacheStrategy, "strategy"),
    "speculative": (SpeculativeEngine, "engine"),
    "scheduling": (SchedulingPolicy, "policy"),
}


def resolve(kind: str, value: Any) -> Any:
    """An object as given, or the one a named plugin builds from a dict of options."""
    if value is None or not isinstance(value, Mapping):
        return value
    record_type, name_key = CAPABILITIES[kind]
    options = dict(value)
    name = options.pop(name_key, None)
    if not isinstance(name, str):
        raise ValueError(f"{kind}={value!r} must name a plugin with the key {name_key!r}")
    record: Any = get_host().choose(record_type, name)
    return record.factory(**options)


def scheduling_policy(value: Any) -> Policy | None:
    """``Llama(scheduling=...)``: a Policy, or a dict naming a policy plugin (``{"policy": "priority", ...}``);
    None for the engine's default (first come, first served)."""
    policy = resolve("scheduling", value)
    if policy is not None and not isinstance(policy, Policy):
        raise ValueError(f"scheduling={value!r} must be a llama_cpp.engine.policy.Policy or a dict naming a "
                         f"scheduling policy ({{'policy': 'priority', ...}}), got {type(policy).__name__}")
    return policy


def load_config(config: Mapping[str, Any] | str | Path) -> dict[str, Any]:
    if isinstance(config, Mapping):
        return dict(config)
    path = Path(config)
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ValueError(f"cannot read the configuration file {str(path)!r}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{str(path)!r} is not valid TOML: {exc}") from exc


def constructor_arguments(config: Mapping[str, Any] | str | Path,
                          overrides: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The model path and constructor keywords of a Llama configuration, read as ``Llama.from_config`` says."""
    values = load_config(config)
    misplaced = sorted(SAMPLING_KEYWORDS & set(values) - _CONSTRUCTOR_KEYWORDS)
    if misplaced:
        raise ValueError(f"{', '.join(misplaced)} in a Llama configuration: sampling parameters belong to each "
                         "request (create_completion, create_chat_completion, generate), not to the Llama")
    overrides = dict(overrides)
    if "model_path" in overrides:
        values.pop("model", None)
        values["model_path"] = Path(overrides.pop("model_path")).resolve()
    values.update(overrides)
    model = values.pop("model", None)
    model_path = values.pop("model_path", None)
    if model_path is None:
        if model not in (None, "default"):
            raise ValueError(f"model = {model!r}: use model_path for a file, or model = 'default'")
        from .default_model import smollm2_path

        model_path = smollm2_path()
    elif not isinstance(config, Mapping) and not Path(model_path).is_absolute():
        model_path = Path(config).parent / model_path
    return str(model_path), values
