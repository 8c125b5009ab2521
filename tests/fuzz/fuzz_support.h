// Shared pieces of the libFuzzer targets: fixed tokenizers and the failure path.
//
// Contract:
//  * A fuzz target reports a broken invariant through FuzzFail(), which prints what was wrong
//    and aborts, so libFuzzer saves the input as a crash artifact.
//  * The tokenizers are built once (first use) and live for the whole process; the synthetic one
//    is deterministic and always present, the trained one only where the test model is found
//    ($PAGODA_TEST_MODELS, default ../shared/models relative to the source tree).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "scheduler/text/tokenizer.h"

namespace pagoda::fuzz {

// Prints "<target>: invariant broken: <what>" to stderr and aborts.
[[noreturn]] void FuzzFail(std::string_view what);

// A SyntheticVocab tokenizer of kSyntheticFuzzVocab pieces (seed 7).
inline constexpr int kSyntheticFuzzVocab = 512;
const scheduler::text::Tokenizer& SyntheticTokenizer();

// The tokenizer of stories260K-f32.gguf, or nullptr when the test model is absent.
const scheduler::text::Tokenizer* TestModelTokenizer();

// A small byte-level BPE vocabulary: the 256 byte pieces, merges spelling a few English words
// (with and without a leading space), "é", "中" and "😀", then "<|endoftext|>" (control, EOS)
// and "<think>" (user-defined).
scheduler::text::Vocab ByteLevelFuzzVocab(scheduler::text::PreTokenizerKind pre);

// Tokenizer::Create(ByteLevelFuzzVocab(pre)), built once per pre-tokenizer.
const scheduler::text::Tokenizer& ByteLevelTokenizer(scheduler::text::PreTokenizerKind pre);

// The fuzzer's input as a string_view.
inline std::string_view AsText(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

// What Decode(Encode(text)) gives back: `text` with every "▁" (U+2581) read as a space.
std::string SpaceMarkersAsSpaces(std::string_view text);

// Streams `ids` (any values) through a StreamingDetokenizer: every piece it returns is
// well-formed UTF-8, at most kMaxUtf8IncompleteLength bytes are held, and the whole equals
// SanitizeUtf8 of the concatenated TokenBytes.
void CheckStreaming(const scheduler::text::Tokenizer& tokenizer, std::span<const int32_t> ids);

// Checks Encode/Decode invariants of `tokenizer` on `text` (any bytes): BOS first when add_bos
// (EOS last when add_eos), every other id in the vocabulary and never a control, unknown or
// unused token (byte-level BPE: only normal ones), Decode(ids) == SpaceMarkersAsSpaces(text)
// (SentencePiece, where "▁" is a mergeable piece, see tokenizer.h) or the normalized text
// (byte-level BPE), and streaming the ids through a StreamingDetokenizer yields well-formed UTF-8
// equal to SanitizeUtf8 of the concatenated token bytes. With special-token parsing (byte-level
// BPE without a normalizer): Decode(ids, render_special) == text.
void CheckRoundTrip(const scheduler::text::Tokenizer& tokenizer, std::string_view text);

}  // namespace pagoda::fuzz
