/* C entry points to the parts of llama.cpp that only exist as C++ (in its
 * "common" library), so that the cffi binding can reach them. */
#ifndef LLAMA_CPP_NATIVE_SHIM_H
#define LLAMA_CPP_NATIVE_SHIM_H

#if defined(__GNUC__) && defined(LLAMA_CPP_NATIVE_SHIM_BUILD)
#    define LLAMA_CPP_NATIVE_SHIM_API __attribute__((visibility("default")))
#else
#    define LLAMA_CPP_NATIVE_SHIM_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* GBNF grammar for a JSON schema, by llama.cpp's own converter.  Returns a
 * malloc'ed string, or NULL with *error set to a malloc'ed message.  Free both
 * with llama_cpp_native_free. */
LLAMA_CPP_NATIVE_SHIM_API char * llama_cpp_native_json_schema_to_grammar(const char * schema_json, char ** error);

LLAMA_CPP_NATIVE_SHIM_API void llama_cpp_native_free(char * text);

#ifdef __cplusplus
}
#endif

#endif
