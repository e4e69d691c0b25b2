/* C entry points to the parts of llama.cpp that only exist as C++ (in its
 * "common" library), so that the cffi binding can reach them. */
#ifndef LLAMA_CPP_NATIVE_SHIM_H
#define LLAMA_CPP_NATIVE_SHIM_H

#if defined(__GNUC__) && defined(LLAMA_CPP_NATIVE_SHIM_BUILD)
#    define LLAMA_CPP_NATIVE_SHIM_API __attribute__((visibility("default")))
#else
#    define LLAMA_CPP_NATIVE_SHIM_API
#endif

#include <stdbool.h>
#include <stdint.h>

#include "llama.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GBNF grammar for a JSON schema, by llama.cpp's own converter.  Returns a
 * malloc'ed string, or NULL with *error set to a malloc'ed message.  Free both
 * with llama_cpp_native_free. */
LLAMA_CPP_NATIVE_SHIM_API char * llama_cpp_native_json_schema_to_grammar(const char * schema_json, char ** error);

LLAMA_CPP_NATIVE_SHIM_API void llama_cpp_native_free(char * text);

/* The most verbose level llama.cpp's "common" code still prints (its own logger, not llama_log_set's):
 * 1 errors, 2 warnings, 3 information, 4 tracing, 5 debugging. */
LLAMA_CPP_NATIVE_SHIM_API void llama_cpp_native_common_log_verbosity(int32_t level);

/* An abort callback (ggml_abort_callback, user data: the gate) that asks `callback` only while `enabled` is
 * set.  Installed once per context: a Python callback per graph node costs more than a one-token decode, so
 * it is only enabled for big batches, and switching llama_set_abort_callback itself logs a line each time. */
struct llama_cpp_native_abort_gate {
    int32_t enabled;
    ggml_abort_callback callback;
    void * callback_data;
};

LLAMA_CPP_NATIVE_SHIM_API bool llama_cpp_native_abort_gate_check(void * gate);

/* A log callback (ggml_log_callback) that drops every message.  The Python package installs it for llama.cpp,
 * ggml and mtmd when the interpreter exits: its own callback is freed while the interpreter tears its modules
 * down, and models and contexts freed after that still log. */
LLAMA_CPP_NATIVE_SHIM_API void llama_cpp_native_log_discard(enum ggml_log_level level, const char * text, void * user_data);

/* Speculative decoding by llama.cpp's common_speculative (common/speculative.h).
 *
 * The caller owns the loop and both contexts: it decodes the target, hands
 * every decoded batch to _process (prompt chunks too: draft models and the
 * hidden-state drafters read that decode's outputs), asks for a draft per
 * sequence, verifies it, and reports what was accepted.  The handle keeps,
 * per sequence, the tokens that are in the target's memory (the history the
 * n-gram drafters search). */
struct llama_cpp_native_spec_params {
    int32_t type;                 /* enum common_speculative_type (common.h), one type per handle */
    uint32_t n_seq;               /* sequences of the target context */
    struct llama_context * ctx_tgt;
    struct llama_context * ctx_dft;  /* draft / MTP context, NULL for the n-gram types */
    int32_t draft_n_max;
    int32_t draft_n_min;
    float draft_p_min;
    bool draft_backend_sampling;
    int32_t ngram_size_n;         /* simple, map-k, map-k4v */
    int32_t ngram_size_m;
    int32_t ngram_min_hits;
    int32_t ngram_mod_n_match;
    int32_t ngram_mod_n_max;
    int32_t ngram_mod_n_min;
    const char * lookup_cache_static;   /* ngram-cache files (llama-lookup-create's format), NULL if none */
    const char * lookup_cache_dynamic;
};

struct llama_cpp_native_spec;

/* NULL with *error set (malloc'ed) when llama.cpp refuses the configuration. */
LLAMA_CPP_NATIVE_SHIM_API struct llama_cpp_native_spec * llama_cpp_native_spec_init(
        const struct llama_cpp_native_spec_params * params, char ** error);

LLAMA_CPP_NATIVE_SHIM_API void llama_cpp_native_spec_free(struct llama_cpp_native_spec * spec);

/* The longest draft the initialized implementation can propose. */
LLAMA_CPP_NATIVE_SHIM_API int32_t llama_cpp_native_spec_n_max(const struct llama_cpp_native_spec * spec);

/* A new generation on seq_id whose target memory holds tokens[0..n_tokens). */
LLAMA_CPP_NATIVE_SHIM_API bool llama_cpp_native_spec_begin(struct llama_cpp_native_spec * spec, int32_t seq_id,
        const llama_token * tokens, int32_t n_tokens, char ** error);

/* The batch the target just decoded, row by row. */
LLAMA_CPP_NATIVE_SHIM_API bool llama_cpp_native_spec_process(struct llama_cpp_native_spec * spec,
        const llama_token * tokens, const llama_pos * pos, const int32_t * seq_ids, const int8_t * outputs,
        int32_t n_tokens, char ** error);

/* Drafts for n sequences at once (the model drafters decode them together): for sequence seq_ids[i],
 * after id_last[i], at most n_max[i] tokens, written to out + i * stride, their count to counts[i].
 * False with *error set on failure. */
LLAMA_CPP_NATIVE_SHIM_API bool llama_cpp_native_spec_draft_many(struct llama_cpp_native_spec * spec, int32_t n,
        const int32_t * seq_ids, const llama_token * id_last, const int32_t * n_max, llama_token * out,
        int32_t stride, int32_t * counts, char ** error);

/* n_accepted drafted tokens were accepted; kept[0..n_kept) are the tokens that entered the target's
 * memory for good (the token the draft followed, then the accepted drafts). */
LLAMA_CPP_NATIVE_SHIM_API bool llama_cpp_native_spec_accept(struct llama_cpp_native_spec * spec, int32_t seq_id,
        int32_t n_accepted, const llama_token * kept, int32_t n_kept, char ** error);

/* The target's memory of seq_id now holds only its first n_tokens tokens. */
LLAMA_CPP_NATIVE_SHIM_API void llama_cpp_native_spec_truncate(struct llama_cpp_native_spec * spec, int32_t seq_id,
        int32_t n_tokens);

/* The token the sampler chain `chain` chooses from output `idx` of `ctx` (as llama_sampler_sample does),
 * for a chain that begins by keeping the `n` highest logits (a top-k): the chain is handed only the tokens
 * that can be among the n best (those of the blocks of 16 tokens whose best logit reaches the n-th best of
 * the blocks' best), not a candidate array of the whole vocabulary.  Its top-k then keeps the same n tokens
 * in the same order, so every later sampler sees what it would have seen, and the chain chooses the same
 * token.  A chain that begins with a logit bias before its top-k passes the bias too (bias_ids ascending,
 * n_bias of them; NULL and 0 without): the tokens are ranked by their biased logits, and the chain adds the
 * bias itself.
 *
 * Returns the token (accepted into the chain); -1, with the chain untouched, when the candidates cannot be
 * cut safely: two of the n + 1 best logits are equal (llama.cpp's partial sort orders equal logits its own
 * way), a logit is NaN or infinite, or there are no logits at idx; then sample with llama_sampler_sample.
 * -2 when the chain failed (it threw, or selected no candidate). */
LLAMA_CPP_NATIVE_SHIM_API llama_token llama_cpp_native_sample_top(struct llama_sampler * chain,
        struct llama_context * ctx, int32_t idx, int32_t n, const llama_token * bias_ids, const float * bias_values,
        int32_t n_bias);

/* Samples as llama_sampler_sample does (the candidates a backend sampler left, else every token of the
 * vocabulary; the chain applied, its selected token accepted), and reports what the chain left: the n most probable candidates after it, by
 * probability (ids and probs; fewer when fewer have a probability above 0), how many were written (*n_out)
 * and the probability of the chosen token (*p_token): llama-server's post_sampling_probs.
 *
 * Returns the token; -1 when there are no logits at idx or n is negative; -2 when the chain failed; -3 when it
 * left no candidate (see llama_cpp_native_sample). */
LLAMA_CPP_NATIVE_SHIM_API llama_token llama_cpp_native_sample_candidates(struct llama_sampler * chain,
        struct llama_context * ctx, int32_t idx, int32_t n, llama_token * ids, float * probs, int32_t * n_out,
        float * p_token);

/* Samples as llama_sampler_sample does (a backend sampler's token as it is; else the candidates it left, or
 * every token of the vocabulary; the chain applied, its selected token accepted), without ending the process where it would: when the chain leaves no candidate
 * (every logit -inf: a grammar, after a logit bias or an edited logits row excluded all it allows) llama.cpp's
 * grammar aborts on the token chosen anyway; here that token is not accepted.
 *
 * Returns the token; -1 when there are no logits at idx; -2 when the chain failed (it threw, or selected no
 * candidate); -3 when it left no candidate. */
LLAMA_CPP_NATIVE_SHIM_API llama_token llama_cpp_native_sample(struct llama_sampler * chain,
        struct llama_context * ctx, int32_t idx);

/* llama.cpp's repetition penalties (llama_sampler_init_penalties, without its n_vocab): the same window of the
 * last penalty_last_n accepted tokens (below 0: 0, which disables it), the same arithmetic, so the same logits,
 * bit for bit.  It changes the candidates of the window's tokens by index when the candidate array is the
 * vocabulary in id order, as a chain meets it after a logit bias, where llama.cpp looks every candidate up
 * in a hash table: on a tiny model that was a fifth of each token's time.  Candidate ids must be distinct
 * (every array llama.cpp makes has them so).  No backend sampling.  Free with llama_sampler_free (or the
 * chain that owns it); NULL when out of memory. */
LLAMA_CPP_NATIVE_SHIM_API struct llama_sampler * llama_cpp_native_penalties_init(int32_t penalty_last_n,
        float penalty_repeat, float penalty_freq, float penalty_present);

/* How a sequence's next token is chosen from an output of a decode: the engine decides it once per request
 * (llama_cpp.engine.sampler.SequenceSampler) and every token of the request is chosen by it, one at a time
 * (llama_cpp_native_choose) or in a burst (llama_cpp_native_decode_burst). */
struct llama_cpp_native_choice {
    struct llama_sampler * chain;   /* the request's chain (not used when argmax is set; NULL: closed) */
    int32_t n_vocab;
    int32_t argmax;                 /* the chain is argmax after at most the logit bias: the first maximum of the
                                     * biased row, as llama.cpp's greedy sampler takes it, with no candidate array */
    int32_t top_n;                  /* > 0: the chain begins with a top-k of top_n (after at most the bias):
                                     * llama_cpp_native_sample_top, else the whole vocabulary */
    const llama_token * bias_ids;   /* the logit bias, ascending ids (for argmax and top_n), n_bias of them */
    const float * bias_values;
    int32_t n_bias;
    int32_t n_top_cut;              /* counters: tokens the top-k path chose from the tokens near the best logit, */
    int32_t n_top_whole;            /* and those it left to the whole vocabulary (equal or NaN logits) */
};

/* The token `choice` chooses from output idx of the last decode on ctx (accepted into its chain); negative as
 * llama_cpp_native_sample returns it: -1 no logits at idx, -2 the chain failed, -3 it left no candidate. */
LLAMA_CPP_NATIVE_SHIM_API llama_token llama_cpp_native_choose(struct llama_cpp_native_choice * choice,
        struct llama_context * ctx, int32_t idx);

/* Decode `batch` (*status: llama_decode's status; nothing more is done unless it is 0) and choose a token from
 * its last output; then, while fewer than n_max tokens are chosen, the last is no end-of-generation token of
 * stop_vocab (NULL: none ends it) and budget_us have not passed since the call began, decode that token alone
 * in seq_id at position pos, pos + 1 ... and choose the next from it.  The chosen tokens go to out; returns
 * how many.  The last chosen token is never decoded.  A failed choice ends the burst with its code in
 * *failure (0 when none failed); a failed later decode ends it too, leaving memory as it was. */
LLAMA_CPP_NATIVE_SHIM_API int32_t llama_cpp_native_decode_burst(struct llama_context * ctx,
        struct llama_batch batch, struct llama_cpp_native_choice * choice, llama_seq_id seq_id, llama_pos pos,
        int32_t n_max, int64_t budget_us, const struct llama_vocab * stop_vocab, llama_token * out,
        int32_t * status, int32_t * failure);

#ifdef __cplusplus
}
#endif

#endif
