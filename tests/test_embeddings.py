"""Embeddings: equal to llama.cpp's llama-embedding, packed across sequences, shaped as the seed's API.

The oracle runs llama-embedding on the same file of prompts with the same
context, batch and threads; both sides then pack the same inputs into the
same batches.  Printed values have 7 decimals (integers for normalize 0, the
int16 range, which is compared within the rounding of the print).
"""

from __future__ import annotations

import base64
import json
import math
import threading

import numpy as np
import pytest
import llama_cpp

from llama_cpp import Llama
from llama_cpp.embd_normalize import cosine_similarity, norm_mode, normalize_rows
from llama_cpp.llama_embedding import (LLAMA_POOLING_TYPE_CLS, LLAMA_POOLING_TYPE_LAST, LLAMA_POOLING_TYPE_MEAN,
                                       LLAMA_POOLING_TYPE_NONE, LLAMA_POOLING_TYPE_RANK, NORM_MODE_EUCLIDEAN, NORM_MODE_MAX_INT16,
                                       NORM_MODE_NONE, NORM_MODE_PNORM, NORM_MODE_TAXICAB, LlamaEmbedding)
from llama_cpp.testing import convert_bert

from oracle import llama_embedding

POOLINGS = {"mean": LLAMA_POOLING_TYPE_MEAN, "cls": LLAMA_POOLING_TYPE_CLS, "last": LLAMA_POOLING_TYPE_LAST}
N_CTX = N_BATCH = 512  # the oracle's -c / -b / -ub

_WORDS = ("the quick brown fox jumps over a lazy dog while seven wise owls watch quietly from tall pine trees "
          "near an old stone bridge where children play football every sunny afternoon in late summer and "
          "nobody remembers how the river got its strange name").split()


def _sentences(n: int) -> list[str]:
    """n prompts of 1 to 16 words (a few with accents, digits or a newline), deterministic."""
    out = []
    for i in range(n):
        length = 1 + (i * 7) % 16
        words = [_WORDS[(i * 5 + j * 3) % len(_WORDS)] for j in range(length)]
        if i % 9 == 4:
            words.append("café naïve résumé")
        if i % 11 == 7:
            words.insert(1, f"{i * 31} km,\n")
        out.append(" ".join(words).capitalize() + ".")
    return out


SENTENCES = _sentences(64)


def _assert_close(ours: np.ndarray, theirs: np.ndarray, normalize: int) -> None:
    ours = np.asarray(ours, dtype=np.float64)
    assert ours.shape == theirs.shape
    for a, b in zip(ours, theirs):
        assert cosine_similarity(a, b) >= 0.99999
    if normalize == NORM_MODE_MAX_INT16:  # printed as integers: our unrounded values are within the rounding
        assert np.abs(ours - theirs).max() <= 0.5 + 1e-3
        assert np.abs(ours).max(axis=1) == pytest.approx(32760.0, abs=1e-2)
    else:
        assert np.abs(ours - theirs).max() <= 1e-4


@pytest.fixture(scope="module")
def minilm_by_pooling(minilm_model_path):
    """``load(pooling) -> LlamaEmbedding`` of MiniLM with the oracle's context (loaded once per pooling)."""
    loaded: dict[str, LlamaEmbedding] = {}

    def load(pooling: str) -> LlamaEmbedding:
        if pooling not in loaded:
            loaded[pooling] = LlamaEmbedding(str(minilm_model_path), n_ctx=N_CTX, n_batch=N_BATCH,
                                             n_ubatch=N_BATCH, pooling_type=POOLINGS[pooling], n_threads=2,
                                             n_threads_batch=2, verbose=False)
        return loaded[pooling]

    yield load
    for llm in loaded.values():
        llm.close()


EVERY_POOLING_AND_NORMALIZE = [(pooling, normalize) for pooling in ("mean", "cls", "last")
                               for normalize in (-1, 0, 1, 2, 3)]


@pytest.mark.parametrize("pooling, normalize", EVERY_POOLING_AND_NORMALIZE)
def test_equal_to_llama_embedding(minilm_by_pooling, minilm_model_path, pooling, normalize):
    theirs = llama_embedding(minilm_model_path, SENTENCES, normalize=normalize, pooling=pooling)
    llm = minilm_by_pooling(pooling)
    decodes = llm.scheduler.counters.n_decodes
    ours = np.asarray(llm.embed(SENTENCES, normalize=normalize))
    _assert_close(ours, theirs, normalize)
    assert llm.scheduler.counters.n_decodes - decodes == _decodes_needed(llm, SENTENCES) >= 2


def _decodes_needed(llm, texts) -> int:
    """How many decodes llama-embedding's packing takes: inputs in order while n_batch tokens hold them."""
    decodes, used = 1, 0
    for text in texts:
        n = len(llm.tokenize(text.encode()))
        if used + n > N_BATCH:
            decodes, used = decodes + 1, 0
        used += n
    return decodes


@pytest.mark.parametrize("pooling, normalize", EVERY_POOLING_AND_NORMALIZE)
def test_one_input_equal_to_llama_embedding(minilm_by_pooling, minilm_model_path, pooling, normalize):
    """One input alone (llama.cpp's matrix kernels differ with the batch's size, so the oracle embeds it alone)."""
    theirs = llama_embedding(minilm_model_path, [SENTENCES[13]], normalize=normalize, pooling=pooling)
    one = np.asarray(minilm_by_pooling(pooling).embed(SENTENCES[13], normalize=normalize))
    assert one.ndim == 1
    _assert_close(one[None], theirs, normalize)


def test_token_matrices_equal_llama_embedding(minilm_model_path):
    """No pooling: one row per token, for every input."""
    prompts = SENTENCES[:6]
    with LlamaEmbedding(str(minilm_model_path), n_ctx=N_CTX, n_batch=N_BATCH, pooling_type=LLAMA_POOLING_TYPE_NONE,
                        n_threads=2, n_threads_batch=2, verbose=False) as llm:
        counts = [len(llm.tokenize(p.encode())) for p in prompts]
        ours = llm.embed(prompts, normalize=2)
        single = llm.embed(prompts[2], normalize=2)
    theirs = llama_embedding(minilm_model_path, prompts, normalize=2, pooling="none", n_rows=sum(counts))
    assert [len(m) for m in ours] == counts
    assert np.asarray(single).shape == (counts[2], 384)
    _assert_close(np.concatenate([np.asarray(m) for m in ours]), theirs, 2)


def test_causal_model_equal_to_llama_embedding(tiny_model_path):
    """A causal model loaded with embeddings=True: it has a KV cache, emptied around every use."""
    prompts = SENTENCES[:12]
    theirs = llama_embedding(tiny_model_path, prompts, normalize=2, pooling="mean")
    with LlamaEmbedding(str(tiny_model_path), n_ctx=N_CTX, n_batch=N_BATCH, pooling_type=LLAMA_POOLING_TYPE_MEAN,
                        n_threads=2, n_threads_batch=2, verbose=False) as llm:
        ours = np.asarray(llm.embed(prompts))
        again = np.asarray(llm.embed(prompts[::-1]))[::-1]  # other sequences, other batches: same vectors
    _assert_close(ours, theirs, 2)
    np.testing.assert_allclose(again, ours, atol=1e-5)


# -- normalization --------------------------------------------------------------------------------------------
def test_normalize_modes_follow_common_embd_normalize():
    rows = np.array([[3.0, -4.0, 0.0], [0.0, 0.0, 0.0], [1.0, 2.0, -2.0]], dtype=np.float32)
    np.testing.assert_allclose(normalize_rows(rows, -1), rows)
    np.testing.assert_allclose(normalize_rows(rows, 0)[0], [24570.0, -32760.0, 0.0])
    np.testing.assert_allclose(normalize_rows(rows, 1)[2], [0.2, 0.4, -0.4], rtol=1e-6)
    np.testing.assert_allclose(normalize_rows(rows, 2)[0], [0.6, -0.8, 0.0], rtol=1e-6)
    p3 = (1 + 8 + 8) ** (1 / 3)
    np.testing.assert_allclose(normalize_rows(rows, 3)[2], [1 / p3, 2 / p3, -2 / p3], rtol=1e-6)
    for mode in (0, 1, 2, 3, 6):
        assert not normalize_rows(rows, mode)[1].any()  # a zero row stays zero
    assert normalize_rows(np.full((1, 4), 1e5, dtype=np.float32), 200).tolist() == [[0.0] * 4]  # overflow
    assert (norm_mode(True), norm_mode(False), norm_mode(np.int64(3))) == (2, -1, 3)
    assert (NORM_MODE_NONE, NORM_MODE_MAX_INT16, NORM_MODE_TAXICAB, NORM_MODE_EUCLIDEAN, NORM_MODE_PNORM) == \
        (-1, 0, 1, 2, 6)


@pytest.mark.parametrize("value, error, words", [
    (-2, ValueError, "got -2"), (2.0, TypeError, "float"), ("2", TypeError, "str"), (None, TypeError, "NoneType"),
])
def test_normalize_out_of_range_or_of_a_wrong_type(minilm_by_pooling, value, error, words):
    with pytest.raises(error, match=words) as info:
        minilm_by_pooling("mean").embed("hello", normalize=value)
    assert "euclidean" in str(info.value)  # the message lists what is allowed


def test_seed_defaults_raw_for_llama_unit_length_for_llama_embedding(minilm_model_path, minilm_by_pooling):
    with Llama(str(minilm_model_path), embedding=True, n_threads=2, verbose=False) as llm:
        raw = np.asarray(llm.embed("hello world"))
        assert np.asarray(llm.embed("hello world", normalize=True)) == pytest.approx(raw / np.linalg.norm(raw),
                                                                                      abs=1e-6)
    unit = np.asarray(minilm_by_pooling("mean").embed("hello world"))
    assert minilm_by_pooling("mean").embed("hello world", normalize=True) == pytest.approx(unit, abs=0)  # not L1
    assert np.linalg.norm(raw) > 1.5
    assert np.linalg.norm(unit) == pytest.approx(1.0, abs=1e-6)
    assert unit == pytest.approx(raw / np.linalg.norm(raw), abs=1e-6)


# -- shapes, counts, formats ----------------------------------------------------------------------------------
def test_output_shapes_and_counts(minilm_by_pooling):
    llm = minilm_by_pooling("mean")
    vector, count = llm.embed("hello world", return_count=True)
    assert len(vector) == 384 and isinstance(vector[0], float) and count == 4  # [CLS] hello world [SEP]
    listed = llm.embed(["hello world"])
    assert len(listed) == 1 and listed[0] == pytest.approx(vector, abs=1e-6)
    split, count = llm.embed("hello world|good night|", separator="|", return_count=True)
    assert [len(v) for v in split] == [384, 384, 384] and split[0] == pytest.approx(vector, abs=1e-6)
    assert count == 4 + 4 + 2  # the empty last part is [CLS] [SEP]
    tokens = llm.tokenize(b"hello world")
    assert llm.embed(tokens) == pytest.approx(vector, abs=1e-6)  # one token list: one vector
    assert llm.embed([tokens, tokens[:2]])[0] == pytest.approx(vector, abs=1e-6)
    assert llm.embed(np.asarray(tokens)) == pytest.approx(vector, abs=1e-6)
    assert llm.embed([[], tokens])[0] == []  # an empty token list embeds to nothing, in its place


def test_create_embedding_openai_shape_usage_and_base64(minilm_model_path):
    with Llama(str(minilm_model_path), embedding=True, n_seq_max=4, n_threads=2, verbose=False) as llm:
        texts = ["hello world", "good night moon", "a"]
        response = llm.create_embedding(texts, model="minilm")
        assert response["object"] == "list" and response["model"] == "minilm"
        assert [d["index"] for d in response["data"]] == [0, 1, 2]
        assert all(d["object"] == "embedding" and len(d["embedding"]) == 384 for d in response["data"])
        n = sum(len(llm.tokenize(t.encode())) for t in texts)
        assert response["usage"] == {"prompt_tokens": n, "total_tokens": n}
        assert llm.create_embedding("hello world")["model"] == str(minilm_model_path)
        encoded = llm.create_embedding(texts, encoding_format="base64", normalize=2)
        for plain, packed in zip(llm.embed(texts, normalize=2), encoded["data"]):
            decoded = np.frombuffer(base64.b64decode(packed["embedding"]), dtype="<f4")
            assert decoded.tolist() == pytest.approx(plain, abs=0)  # the same float32 values
        json.dumps(response)
        with pytest.raises(ValueError, match="encoding_format must be one of 'float', 'base64'"):
            llm.create_embedding("x", encoding_format="int8")


def test_llama_embedding_output_formats(minilm_by_pooling):
    llm = minilm_by_pooling("mean")
    assert llm.scheduler.ctx.n_seq_max == 256  # llama-embedding's packing
    response = llm.create_embedding(["hello", "world"])
    assert set(response["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    assert response["usage"]["completion_tokens"] == 0
    plus = llm.create_embedding(["hello", "world", "hello"], output_format="json+")
    sims = np.asarray(plus["cosineSimilarity"])
    assert sims.shape == (3, 3) and np.allclose(np.diag(sims), 1.0) and sims[0, 2] == pytest.approx(1.0)
    assert "cosineSimilarity" not in llm.create_embedding(["hello"], output_format="json+")
    array = llm.create_embedding(["hello", "world"], output_format="array")
    assert array == [d["embedding"] for d in response["data"]]
    with pytest.raises(ValueError, match="output_format must be one of 'json', 'json\\+', 'array'"):
        llm.create_embedding("x", output_format="csv")
    # Llama.create_embedding's encoding_format too (a server calls both classes alike)
    packed = llm.create_embedding(["hello", "world", "hello"], output_format="json+", encoding_format="base64")
    for plain, item in zip(plus["data"], packed["data"]):
        assert np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4").tolist() == pytest.approx(
            plain["embedding"], abs=1e-6)
    assert packed["cosineSimilarity"] == plus["cosineSimilarity"]
    with pytest.raises(ValueError, match="encoding_format must be one of 'float', 'base64'"):
        llm.create_embedding("x", encoding_format="int8")


def test_packing_follows_idle_sequences_and_batch(minilm_model_path):
    """n_seq_max inputs per decode at most, and no more tokens than n_ubatch (llama.cpp's non-causal limit)."""
    with Llama(str(minilm_model_path), embedding=True, n_seq_max=4, n_ctx=512, n_batch=64, n_ubatch=64,
               n_threads=2, verbose=False) as llm:
        texts = ["one two three"] * 7 + [" ".join(["word"] * 50)]  # 5 tokens each, then 52
        vectors = llm.embed(texts)
        # 4 inputs (20 tokens); 3 (15: the 52 do not fit after them); the long one alone
        assert (llm.scheduler.counters.n_decodes, llm.scheduler.counters.n_tokens_decoded) == (3, 7 * 5 + 52)
    assert all(v == pytest.approx(vectors[0], abs=1e-5) for v in vectors[:7])


def test_mean_pooling_context_llama_cpp_cannot_build_is_refused(minilm_model_path):
    """llama.cpp aborts the process creating a mean-pooling context whose micro-batch n_seq_max does not
    divide; the constructor says so instead, and LlamaEmbedding's default n_seq_max always divides."""
    with pytest.raises(ValueError, match=r"n_ubatch \(64\) must be a multiple of n_seq_max \(3\).*n_seq_max=2"):
        Llama(str(minilm_model_path), embedding=True, n_seq_max=3, n_batch=64, n_ubatch=64, verbose=False)
    with LlamaEmbedding(str(minilm_model_path), n_batch=100, n_ubatch=100, verbose=False) as llm:
        assert llm.scheduler.ctx.n_seq_max == 100
        assert len(llm.embed(["a b c"] * 30)) == 30


def test_truncation(minilm_model_path):
    with Llama(str(minilm_model_path), embedding=True, n_ctx=512, n_batch=32, n_ubatch=32, n_threads=2,
               verbose=False) as llm:
        long = " ".join(["word"] * 100)
        _vector, count = llm.embed(long, return_count=True)
        assert count == 32
        assert llm.embed(long) == pytest.approx(llm.embed(llm.tokenize(long.encode())[:32]), abs=1e-6)
        with pytest.raises(ValueError, match=r"input 1 has 102 tokens.*at most 32 tokens.*truncate=True"):
            llm.embed(["short", long], truncate=False)
    # LlamaEmbedding cuts to the same limit (the seed's raised IndexError past n_batch)
    with LlamaEmbedding(str(minilm_model_path), n_ctx=512, n_batch=32, n_ubatch=32, n_threads=2,
                        verbose=False) as llm:
        response = llm.create_embedding([long, "short"], normalize=-1)
        assert response["usage"]["prompt_tokens"] == 32 + 3
        with pytest.raises(ValueError, match="input 0 has 102 tokens"):
            llm.create_embedding(long, truncate=False)


def test_bad_input(minilm_by_pooling, tiny_model_path):
    llm = minilm_by_pooling("mean")
    with pytest.raises(ValueError, match="empty list"):
        llm.embed([])
    with pytest.raises(TypeError, match="input must be a string, a list of strings"):
        llm.embed(42)
    with pytest.raises(TypeError, match=r"input\[1\] is float"):
        llm.embed(["ok", 1.5])
    with pytest.raises(TypeError, match="not bytes"):
        llm.embed(b"hello")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm.embed([[101, 10 ** 7]])
    with pytest.raises(ValueError, match="needs a reranker: this context pools with 'mean'"):
        llm.rank("query", ["document"])
    with Llama(str(tiny_model_path), n_threads=2, verbose=False) as plain:
        with pytest.raises(RuntimeError, match=r"loaded without embeddings.*embedding=True"):
            plain.embed("hello")
        with pytest.raises(RuntimeError, match="embedding=True"):
            plain.create_embedding("hello")
    closed = Llama(str(tiny_model_path), embedding=True, n_threads=2, verbose=False)
    closed.close()
    with pytest.raises(RuntimeError, match="closed"):
        closed.embed("hello")


# -- the generation engine's sequences ------------------------------------------------------------------------
def test_embedding_leaves_a_running_generation_alone(tiny_model_path):
    """A stream holds sequence 0; embedding takes the idle sequence and the stream goes on as if nothing
    happened (the seed's reset() after embed destroyed it)."""
    prompt = "Once upon a time"
    kw = dict(n_ctx=512, n_seq_max=2, n_threads=2, n_threads_batch=2, verbose=False)
    with Llama(str(tiny_model_path), **kw) as plain:
        expected = plain.create_completion(prompt, max_tokens=24, temperature=0.0)["choices"][0]["text"]
    with Llama(str(tiny_model_path), embedding=True, pooling_type=LLAMA_POOLING_TYPE_LAST, **kw) as llm:
        reference = llm.embed(["a first text", "and a second one"])
        stream = llm.create_completion(prompt, max_tokens=24, temperature=0.0, stream=True)
        pieces = [next(stream)["choices"][0]["text"] for _ in range(8)]
        busy = llm.scheduler.slots[0]
        held = list(busy.ledger.tokens)
        assert llm.embed(["a first text", "and a second one"]) == [pytest.approx(v, abs=1e-5) for v in reference]
        assert busy.ledger.tokens == held
        assert llm.scheduler.slots[1].ledger.tokens == []  # nothing of the embedding stays
        pieces += [chunk["choices"][0]["text"] for chunk in stream]
        assert "".join(pieces) == expected
        # with every sequence held by this thread's open streams, embedding says so instead of waiting
        first = llm.create_completion(prompt, max_tokens=24, stream=True)
        second = llm.create_completion(prompt, max_tokens=24, stream=True)
        next(first), next(second)
        with pytest.raises(RuntimeError, match="in use by a running generation"):
            llm.embed("hello")
        first.close(), second.close()
        assert len(llm.embed("hello")) == 64


def test_embedding_keeps_the_current_sequence_when_another_is_idle(tiny_model_path):
    """eval() continues the current sequence: an embedding takes an empty sequence before it."""
    with Llama(str(tiny_model_path), embedding=True, pooling_type=LLAMA_POOLING_TYPE_LAST, n_seq_max=2,
               n_threads=2, verbose=False) as llm:
        tokens = llm.tokenize(b"Once upon a time")
        llm.eval(tokens)
        llm.embed("a text")
        assert llm.eval_tokens == tokens
        llm.embed(["one", "two"])  # both sequences needed: the current one is emptied too
        assert llm.eval_tokens == []


def test_embedding_from_another_thread_while_generating(minilm_model_path, tiny_model_path):
    with Llama(str(tiny_model_path), embedding=True, pooling_type=LLAMA_POOLING_TYPE_MEAN, n_seq_max=2,
               n_threads=2, verbose=False) as llm:
        expected = llm.embed("the same words")
        results: list = []
        worker = threading.Thread(target=lambda: results.extend(llm.embed(["the same words"] * 5)))
        stream = llm.create_completion("Hello", max_tokens=32, temperature=0.0, stream=True)
        next(stream)
        worker.start()
        text = "".join(chunk["choices"][0]["text"] for chunk in stream)
        worker.join(timeout=60)
        assert len(results) == 5 and all(v == pytest.approx(expected, abs=1e-5) for v in results)
        assert text


def test_langchain_llamacpp_embeddings(minilm_model_path):
    """LangChain's LlamaCppEmbeddings (it loads Llama(embedding=True, device=None, n_parts=..., ...) and reads
    create_embedding / embed) works unchanged."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # langchain-community's own notice, use_mlock's
        from langchain_community.embeddings import LlamaCppEmbeddings

        lc = LlamaCppEmbeddings(model_path=str(minilm_model_path), n_threads=2, verbose=False)
    try:
        documents = lc.embed_documents(["hello world", "good night"])
        query = lc.embed_query("hello world")
        assert len(documents) == 2 and len(documents[0]) == len(query) == 384
        assert documents[0] == pytest.approx(query, abs=1e-6)
    finally:
        lc.client.close()


# -- the converter --------------------------------------------------------------------------------------------
def _write_safetensors(path, tensors: dict[str, np.ndarray]) -> None:
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + b"".join(blobs))


def _bert_reference(w: dict[str, np.ndarray], ids: list[int], n_head: int) -> np.ndarray:
    """Hugging Face's BertModel forward pass in float64 numpy (tanh GELU, as ggml computes it): the last
    hidden states, one row per token."""
    def norm(x, name):
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * w[name + ".weight"] + w[name + ".bias"]

    def dense(x, name):
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    n, d = len(ids), w["embeddings.word_embeddings.weight"].shape[1]
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
    x = norm(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
    layer = 0
    while f"encoder.layer.{layer}.attention.self.query.weight" in w:
        p = f"encoder.layer.{layer}."
        q, k, v = (dense(x, p + "attention.self." + s).reshape(n, n_head, -1).transpose(1, 0, 2)
                   for s in ("query", "key", "value"))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(d // n_head)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        att = (scores / scores.sum(-1, keepdims=True) @ v).transpose(1, 0, 2).reshape(n, d)
        x = norm(x + dense(att, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        h = dense(x, p + "intermediate.dense")
        h = 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
        x = norm(x + dense(h, p + "output.dense"), p + "output.LayerNorm")
        layer += 1
    return x


def _random_bert_folder(folder, rng, d=16, ff=32, layers=2, heads=2, labels=None) -> dict[str, np.ndarray]:
    """A Hugging Face BERT folder with random weights (a classifier head with ``labels``); its weights."""
    words = ["hello", "world", "good", "night", "moon", "##s", "the", "cat", "."]
    vocab = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    config = {"architectures": ["BertForSequenceClassification" if labels else "BertModel"], "hidden_size": d,
              "intermediate_size": ff, "num_hidden_layers": layers, "num_attention_heads": heads,
              "max_position_embeddings": 64, "layer_norm_eps": 1e-12, "type_vocab_size": 2,
              "vocab_size": len(vocab)}
    if labels:
        config["id2label"] = {str(i): label for i, label in enumerate(labels)}
    w = {"embeddings.word_embeddings.weight": rng.standard_normal((len(vocab), d)),
         "embeddings.position_embeddings.weight": rng.standard_normal((64, d)) * 0.3,
         "embeddings.token_type_embeddings.weight": rng.standard_normal((2, d)) * 0.1,
         "embeddings.LayerNorm.weight": 1 + 0.1 * rng.standard_normal(d),
         "embeddings.LayerNorm.bias": 0.1 * rng.standard_normal(d)}
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for name, (rows, cols) in {"attention.self.query": (d, d), "attention.self.key": (d, d),
                                   "attention.self.value": (d, d), "attention.output.dense": (d, d),
                                   "intermediate.dense": (ff, d), "output.dense": (d, ff)}.items():
            w[p + name + ".weight"] = rng.standard_normal((rows, cols)) * 0.3
            w[p + name + ".bias"] = 0.1 * rng.standard_normal(rows)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[p + name + ".weight"] = 1 + 0.1 * rng.standard_normal(d)
            w[p + name + ".bias"] = 0.1 * rng.standard_normal(d)
    if labels:
        w["classifier.weight"] = rng.standard_normal((len(labels), d))
        w["classifier.bias"] = rng.standard_normal(len(labels))
    w = {k: v.astype(np.float32) for k, v in w.items()}
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    prefixed = {("bert." + k if not k.startswith("classifier") else k): v for k, v in w.items()}
    _write_safetensors(folder / "model.safetensors",
                       {**prefixed, "bert.embeddings.position_ids": np.arange(64, dtype=np.float32)[None],
                        "bert.pooler.dense.weight": np.zeros((d, d), np.float32)})
    return w


def test_convert_bert_computes_the_checkpoint(tmp_path):
    """convert_bert's GGUF computes what the safetensors BERT computes (a small random checkpoint)."""
    w = _random_bert_folder(tmp_path / "bert", np.random.default_rng(7))
    path = convert_bert(tmp_path / "bert", tmp_path / "bert.gguf")
    with Llama(str(path), embedding=True, pooling_type=LLAMA_POOLING_TYPE_MEAN, n_threads=2, verbose=False) as llm:
        ids = llm.tokenize(b"Hello worlds, the cat.")
        assert ids == [3, 6, 7, 11, 2, 12, 13, 14, 4]  # lowercased WordPiece; "," is unknown
        ours = np.asarray(llm.embed(ids))
    reference = _bert_reference({k: v.astype(np.float64) for k, v in w.items()}, ids, 2).mean(0)
    assert cosine_similarity(ours, reference) >= 0.99999
    assert np.abs(ours - reference).max() <= 2e-3  # ggml's GELU is a float16 table of the tanh form


def test_convert_bert_sequence_classifier_is_a_reranker(tmp_path):
    """A BertForSequenceClassification checkpoint becomes a rank-pooling GGUF whose score is its classifier
    on the [CLS] row (llama.cpp's converter drops the pooler, and so does this one)."""
    w = _random_bert_folder(tmp_path / "ranker", np.random.default_rng(8), labels=["relevant", "irrelevant"])
    path = convert_bert(tmp_path / "ranker", tmp_path / "ranker.gguf")
    with LlamaEmbedding(str(path), n_threads=2, verbose=False) as llm:
        assert llm.pooling_type() == LLAMA_POOLING_TYPE_RANK
        assert llama_cpp.llama_model_n_cls_out(llm.model) == 2  # the low-level API takes Llama.model
        assert llama_cpp.llama_model_cls_label(llm.model, 0) == b"relevant"
        ids = llm.tokenize(b"hello moon") + llm.tokenize(b"good night")[1:]  # [CLS] q [SEP] d [SEP]
        assert ids == [3, 6, 10, 4, 8, 9, 4]
        score = llm.rank("hello moon", ["good night"])[0]
        outputs = np.asarray(llm.embed(ids))
    hidden = _bert_reference({k: v.astype(np.float64) for k, v in w.items()}, ids, 2)
    reference = hidden[0] @ w["classifier.weight"].T.astype(np.float64) + w["classifier.bias"]
    np.testing.assert_allclose(outputs, reference, atol=5e-3)
    assert score == pytest.approx(outputs[0], abs=1e-6)
