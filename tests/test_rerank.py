"""Reranking: LlamaEmbedding.rank equals llama-embedding --pooling rank on tiny random rerankers."""

from __future__ import annotations

import numpy as np
import pytest

from llama_cpp import Llama
from llama_cpp.llama_embedding import LLAMA_POOLING_TYPE_RANK, LlamaEmbedding

from oracle import llama_embedding

QUERY = "what is a panda?"
DOCUMENTS = [
    "hi",
    "The giant panda (Ailuropoda melanoleuca), sometimes called a panda bear or simply panda, is a bear species "
    "endemic to China.",
    "Pandas eat bamboo.",
    "It rained all day in the city, and nobody went outside.",
    "",
]


@pytest.fixture(scope="module")
def reranker(tiny_reranker_path):
    with LlamaEmbedding(str(tiny_reranker_path), n_threads=2, n_threads_batch=2, verbose=False) as llm:
        yield llm


@pytest.mark.parametrize("n_cls_out", [1, 2])
def test_rank_equals_llama_embedding(tiny_bert_factory, n_cls_out):
    path = tiny_bert_factory(n_cls_out=n_cls_out)
    theirs = llama_embedding(path, [f"{QUERY}\t{d}" for d in DOCUMENTS], normalize=-1, pooling="rank")
    assert theirs.shape == (len(DOCUMENTS), n_cls_out)
    with LlamaEmbedding(str(path), n_ctx=512, n_batch=512, n_threads=2, n_threads_batch=2, verbose=False) as llm:
        scores = llm.rank(QUERY, DOCUMENTS)
        assert all(isinstance(s, float) for s in scores)
        np.testing.assert_allclose(scores, theirs[:, 0], atol=1e-5)  # in input order; the first output
        # the classifier's outputs themselves: a score for a one-output head, else all of them, never normalized
        outputs = llm.embed(["hi", "Pandas eat bamboo."], normalize=2)
        if n_cls_out == 1:
            assert all(isinstance(x, float) for x in outputs)
        else:
            assert np.asarray(outputs).shape == (2, 2)
            assert np.linalg.norm(outputs[0]) != pytest.approx(1.0)


def test_one_document_with_a_one_output_head(reranker):
    """The seed raised TypeError here (float() of a list).  Alone, the pair is decoded in a smaller batch,
    whose kernels round differently."""
    scores = reranker.rank(QUERY, DOCUMENTS)
    assert reranker.rank(QUERY, [DOCUMENTS[2]]) == [pytest.approx(scores[2], rel=1e-3)]


def test_pair_layout_is_cls_query_sep_document_sep(reranker):
    """Without a rerank template: [CLS] query [SEP] document [SEP], BERT's sentence-pair layout; the
    scores of rank() are the head's output on exactly those tokens."""
    query, document = reranker.tokenize(QUERY.encode()), reranker.tokenize(b"Pandas eat bamboo.")
    tokens = query + document[1:]  # each is [CLS] text [SEP]
    assert tokens[0] == reranker.token_bos() == 101 and tokens[-1] == 102
    assert tokens.count(102) == 2
    assert reranker.embed(tokens) == pytest.approx(reranker.rank(QUERY, ["Pandas eat bamboo."])[0], abs=1e-6)


def test_rerank_template_is_used(tiny_bert_factory):
    """A model with a ``rerank`` chat template is given the filled template (llama.cpp's way)."""
    path = tiny_bert_factory(rerank_template="query: {query} document: {document}")
    with LlamaEmbedding(str(path), n_threads=2, verbose=False) as llm:
        expected = llm.embed(f"query: {QUERY} document: Pandas eat bamboo.")
        assert llm.rank(QUERY, ["Pandas eat bamboo."]) == [pytest.approx(expected, abs=1e-5)]
        assert llm.embed(f"{QUERY} Pandas eat bamboo.") != pytest.approx(expected, abs=1e-3)


def test_rank_bad_input(reranker, minilm_model_path):
    with pytest.raises(ValueError, match="empty list"):
        reranker.rank(QUERY, [])
    with pytest.raises(TypeError, match="documents must be a list of strings"):
        reranker.rank(QUERY, "a single string")
    with pytest.raises(TypeError, match=r"documents\[1\] is int"):
        reranker.rank(QUERY, ["ok", 3])
    with pytest.raises(TypeError, match="query must be a string"):
        reranker.rank(None, ["ok"])
    with LlamaEmbedding(str(minilm_model_path), verbose=False) as embedder:
        with pytest.raises(ValueError, match=r"needs a reranker: this context pools with 'mean'.*RANK"):
            embedder.rank(QUERY, ["ok"])


def test_rank_pooling_on_llama_and_long_documents(tiny_reranker_path):
    """Llama(embedding=True) serves a reranker's outputs through embed; rank() truncates a long pair."""
    with Llama(str(tiny_reranker_path), embedding=True, n_threads=2, verbose=False) as llm:
        assert llm.pooling_type() == LLAMA_POOLING_TYPE_RANK
        score, count = llm.embed("hello world", return_count=True)
        assert isinstance(score, float) and count == 4
        assert llm.create_embedding("hello world")["data"][0]["embedding"] == pytest.approx(score)
    with LlamaEmbedding(str(tiny_reranker_path), n_ctx=512, n_batch=64, n_ubatch=64, verbose=False) as llm:
        long = " ".join(["bamboo"] * 200)
        assert len(llm.rank(QUERY, [long, "short"])) == 2
        with pytest.raises(ValueError, match="tokens"):
            llm.rank(QUERY, [long], truncate=False)
