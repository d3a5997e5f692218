// Internal: the plain C interface between the programs and the SentencePiece
// module (liboctet_sentencepiece.so, built from sentencepiece_bridge.cc).
// See sentencepiece_bridge.h for why SentencePiece is a module, and
// sentencepiece_loader.cc for how it is loaded: in a link namespace of its
// own, with its own C and C++ runtimes. So the two sides share no heap, no
// exceptions and no C++ types, and this interface follows three rules:
//
//  - only C types cross it: pointers to bytes and ints with their sizes;
//  - what one side allocates, the same side frees: the module hands results
//    out through the caller's sink callbacks, which copy them before they
//    return, and a processor is destroyed by the module's `destroy`;
//  - no exception crosses it: the module catches every exception at its
//    entry points and reports it as an error, and the caller's sinks must
//    not throw.
//
// Nothing here may include a C++ standard header (or SentencePiece's or
// abseil's): both sides build from this file alone.
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// Bumped whenever anything below changes; the loader refuses a module whose
// OctetSentencePieceApi() reports another version.
#define OCTET_SP_ABI_VERSION 2

// A sink receives the bytes (or ids) of one result; `data` lives only for
// the call, so the sink copies what it keeps. `ctx` is the caller's.
typedef void (*OctetSpBytesSink)(void* ctx, const char* data, size_t size);
typedef void (*OctetSpIdsSink)(void* ctx, const int* ids, size_t count);

// A loaded model, owned by the module; free it with OctetSpApi::destroy.
// Its const functions may be called from several threads at once.
typedef struct OctetSpProcessor OctetSpProcessor;

// A byte string that the caller owns for the length of one call.
typedef struct OctetSpString {
  const char* data;
  size_t size;
} OctetSpString;

typedef struct OctetSpTrainArgs {
  const OctetSpString* sentences;
  size_t sentence_count;
  int vocab_size;
  // Filler pieces appended so the vocabulary has exactly vocab_size pieces.
  const OctetSpString* user_defined_symbols;
  size_t user_defined_symbol_count;
} OctetSpTrainArgs;

// Every function that can fail returns 1 on success and 0 on failure, when
// it has sent the reason to `error` (once).
typedef struct OctetSpApi {
  int version;  // OCTET_SP_ABI_VERSION of the module's build
  // A processor for the bytes of a tokenizer.model; NULL on failure.
  OctetSpProcessor* (*load)(OctetSpString serialized, OctetSpBytesSink error,
                            void* ctx);
  void (*destroy)(OctetSpProcessor* processor);
  // The ids of `text`, sent to `ids` in one call.
  int (*encode)(const OctetSpProcessor* processor, OctetSpString text,
                OctetSpIdsSink ids, OctetSpBytesSink error, void* ctx);
  // The text of `ids`, sent to `text` in one call.
  int (*decode)(const OctetSpProcessor* processor, const int* ids, size_t count,
                OctetSpBytesSink text, OctetSpBytesSink error, void* ctx);
  int (*piece_size)(const OctetSpProcessor* processor);
  int (*bos_id)(const OctetSpProcessor* processor);  // -1 when none
  int (*eos_id)(const OctetSpProcessor* processor);
  // Trains a Llama-style BPE model (sentencepiece_bridge.h: TrainBpe); the
  // serialized model is sent to `model` in one call.
  int (*train_bpe)(const OctetSpTrainArgs* args, OctetSpBytesSink model,
                   OctetSpBytesSink error, void* ctx);
} OctetSpApi;

// The module's one exported symbol.
const OctetSpApi* OctetSentencePieceApi(void);

#ifdef __cplusplus
}  // extern "C"
#endif
