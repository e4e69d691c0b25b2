// The C side of llama_cpp_native_shim.h: catches every C++ exception, so
// that nothing unwinds into Python's C frames.
#include "llama_cpp_native_shim.h"

#include "json-schema-to-grammar.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

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
