// The C side of llama_cpp_native_shim.h: catches every C++ exception, so
// that nothing unwinds into Python's C frames.
#include "llama_cpp_native_shim.h"

#include "common.h"
#include "json-schema-to-grammar.h"
#include "log.h"
#include "speculative.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

static char * copy_string(const std::string & text) {
    char * out = static_cast<char *>(std::malloc(text.size() + 1));
    if (out != nullptr) {
        std::memcpy(out, text.c_str(), text.size() + 1);
    }
    return out;
}

extern "C" char * llama_cpp_native_json_schema_to_grammar(const char * schema_json, char ** error) {
    try {
        // force_gbnf: always GBNF (never an llguidance grammar), which is what llama_sampler_init_grammar reads
        return copy_string(json_schema_to_grammar(common_json::parse(schema_json), true));
    } catch (const std::exception & e) {
        if (error != nullptr) {
            *error = copy_string(e.what());
        }
    } catch (...) {
        if (error != nullptr) {
            *error = copy_string("unknown error in the JSON schema converter");
        }
    }
    return nullptr;
}

extern "C" void llama_cpp_native_free(char * text) {
    std::free(text);
}

extern "C" void llama_cpp_native_common_log_verbosity(int32_t level) {
    common_log_set_verbosity_thold(level);
}

extern "C" void llama_cpp_native_log_discard(enum ggml_log_level, const char *, void *) {}

extern "C" bool llama_cpp_native_abort_gate_check(void * gate) {
    const auto * g = static_cast<const struct llama_cpp_native_abort_gate *>(gate);
    return g->enabled != 0 && g->callback(g->callback_data);
}

static void set_error(char ** error, const char * what) {
    if (error != nullptr) {
        *error = copy_string(what);
    }
}

// Runs body, turning any C++ exception into *error and the value `failed`.
template <typename T, typename F>
static T guarded(char ** error, T failed, F && body) {
    try {
        return body();
    } catch (const std::exception & e) {
        set_error(error, e.what());
    } catch (...) {
        set_error(error, "unknown error in llama.cpp's speculative decoding");
    }
    return failed;
}

struct llama_cpp_native_spec {
    common_speculative * spec = nullptr;
    std::vector<llama_tokens> history;  // per sequence: the tokens in the target's memory
    common_batch batch;                 // mirror of the last target batch, for _process
    std::vector<llama_tokens> drafts;   // per sequence: the result of the last _draft_many

    ~llama_cpp_native_spec() { common_speculative_free(spec); }
};

extern "C" struct llama_cpp_native_spec * llama_cpp_native_spec_init(
        const struct llama_cpp_native_spec_params * p, char ** error) {
    return guarded<llama_cpp_native_spec *>(error, nullptr, [&]() -> llama_cpp_native_spec * {
        if (p->type <= COMMON_SPECULATIVE_TYPE_NONE || p->type >= COMMON_SPECULATIVE_TYPE_COUNT) {
            set_error(error, "unknown speculative type");
            return nullptr;
        }
        common_params_speculative params;
        params.types = { static_cast<common_speculative_type>(p->type) };
        params.draft.n_max = p->draft_n_max;
        params.draft.n_min = p->draft_n_min;
        params.draft.p_min = p->draft_p_min;
        params.draft.backend_sampling = p->draft_backend_sampling;
        params.draft.ctx_tgt = p->ctx_tgt;
        params.draft.ctx_dft = p->ctx_dft;
        common_params_speculative_ngram_map ngram;
        ngram.size_n = static_cast<uint16_t>(p->ngram_size_n);
        ngram.size_m = static_cast<uint16_t>(p->ngram_size_m);
        ngram.min_hits = static_cast<uint16_t>(p->ngram_min_hits);
        params.ngram_simple = ngram;
        params.ngram_map_k = ngram;
        params.ngram_map_k4v = ngram;
        params.ngram_mod.n_match = p->ngram_mod_n_match;
        params.ngram_mod.n_max = p->ngram_mod_n_max;
        params.ngram_mod.n_min = p->ngram_mod_n_min;
        if (p->lookup_cache_static != nullptr) {
            params.ngram_cache.lookup_cache_static = p->lookup_cache_static;
        }
        if (p->lookup_cache_dynamic != nullptr) {
            params.ngram_cache.lookup_cache_dynamic = p->lookup_cache_dynamic;
        }
        auto * out = new llama_cpp_native_spec();
        out->spec = common_speculative_init(params, p->n_seq);
        if (out->spec == nullptr) {
            delete out;
            set_error(error, "llama.cpp could not initialize this speculative type (is a draft context missing?)");
            return nullptr;
        }
        out->history.resize(p->n_seq);
        out->drafts.resize(p->n_seq);
        out->batch = common_batch(p->ctx_tgt);
        return out;
    });
}

extern "C" void llama_cpp_native_spec_free(struct llama_cpp_native_spec * spec) {
    delete spec;
}

extern "C" int32_t llama_cpp_native_spec_n_max(const struct llama_cpp_native_spec * spec) {
    return common_speculative_n_max(spec->spec);
}

static bool valid_seq(const llama_cpp_native_spec * spec, int32_t seq_id, char ** error) {
    if (seq_id < 0 || static_cast<size_t>(seq_id) >= spec->history.size()) {
        set_error(error, "sequence id out of range");
        return false;
    }
    return true;
}

extern "C" bool llama_cpp_native_spec_begin(struct llama_cpp_native_spec * spec, int32_t seq_id,
        const llama_token * tokens, int32_t n_tokens, char ** error) {
    return guarded<bool>(error, false, [&]() {
        if (!valid_seq(spec, seq_id, error)) {
            return false;
        }
        spec->history[seq_id].assign(tokens, tokens + n_tokens);
        common_speculative_begin(spec->spec, seq_id, spec->history[seq_id]);
        return true;
    });
}

extern "C" bool llama_cpp_native_spec_process(struct llama_cpp_native_spec * spec,
        const llama_token * tokens, const llama_pos * pos, const int32_t * seq_ids, const int8_t * outputs,
        int32_t n_tokens, char ** error) {
    return guarded<bool>(error, false, [&]() {
        spec->batch.clear();
        for (int32_t i = 0; i < n_tokens; ++i) {
            spec->batch.add(tokens[i], pos[i], seq_ids[i], outputs[i] != 0);
        }
        if (!common_speculative_process(spec->spec, spec->batch)) {
            set_error(error, "the draft side failed to process the target's batch (see llama.cpp's log)");
            return false;
        }
        return true;
    });
}

extern "C" bool llama_cpp_native_spec_draft_many(struct llama_cpp_native_spec * spec, int32_t n,
        const int32_t * seq_ids, const llama_token * id_last, const int32_t * n_max, llama_token * out,
        int32_t stride, int32_t * counts, char ** error) {
    return guarded<bool>(error, false, [&]() {
        for (int32_t i = 0; i < n; ++i) {
            if (!valid_seq(spec, seq_ids[i], error)) {
                return false;
            }
        }
        for (int32_t i = 0; i < n; ++i) {
            const int32_t seq_id = seq_ids[i];
            const llama_tokens & history = spec->history[seq_id];
            spec->drafts[seq_id].clear();
            common_speculative_get_draft_params(spec->spec, seq_id) = {
                /* .drafting = */ true,
                /* .n_max    = */ n_max[i],
                /* .pos0     = */ static_cast<llama_pos>(history.size()),
                /* .id_last  = */ id_last[i],
                /* .prompt   = */ &history,
                /* .result   = */ &spec->drafts[seq_id],
            };
        }
        common_speculative_draft(spec->spec);  // every drafting sequence at once
        for (int32_t i = 0; i < n; ++i) {
            const llama_tokens & draft = spec->drafts[seq_ids[i]];
            const int32_t count = std::min<int32_t>(static_cast<int32_t>(draft.size()), std::min(n_max[i], stride));
            std::copy(draft.begin(), draft.begin() + std::max(count, 0), out + static_cast<size_t>(i) * stride);
            counts[i] = std::max(count, 0);
        }
        return true;
    });
}

extern "C" bool llama_cpp_native_spec_accept(struct llama_cpp_native_spec * spec, int32_t seq_id,
        int32_t n_accepted, const llama_token * kept, int32_t n_kept, char ** error) {
    return guarded<bool>(error, false, [&]() {
        if (!valid_seq(spec, seq_id, error)) {
            return false;
        }
        common_speculative_accept(spec->spec, seq_id, static_cast<uint16_t>(n_accepted));
        spec->history[seq_id].insert(spec->history[seq_id].end(), kept, kept + n_kept);
        return true;
    });
}

extern "C" void llama_cpp_native_spec_truncate(struct llama_cpp_native_spec * spec, int32_t seq_id,
        int32_t n_tokens) {
    if (seq_id >= 0 && static_cast<size_t>(seq_id) < spec->history.size() && n_tokens >= 0 &&
            static_cast<size_t>(n_tokens) < spec->history[seq_id].size()) {
        spec->history[seq_id].resize(n_tokens);
    }
}
