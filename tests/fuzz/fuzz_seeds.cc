// pagoda-fuzz-seeds DIR [--no-model]: writes the generated seed inputs of the fuzz targets
// into DIR/gguf_reader/ and DIR/validation/ (deterministic; existing files are replaced).
//
// GGUF seeds are never committed (GGUF files stay out of git): scripts/fuzz.sh runs this into
// its working corpus each time, the random-weight model (~14 KB, a complete llama GGUF with
// its tokenizer) included. The validation seeds are also committed under tests/fuzz/corpus/;
// regenerate them with `build-asan/bin/pagoda-fuzz-seeds tests/fuzz/corpus --no-model`.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "modelgen/gguf_writer.h"
#include "modelgen/random_model.h"
#include "pagoda/v1/generation.pb.h"
#include "scheduler/text/vocab.h"
#include "tests/fuzz/fuzz_support.h"

namespace pagoda::fuzz {
namespace {

namespace fs = std::filesystem;
namespace v1 = pagoda::v1;
using common::GgmlType;

absl::Status WriteSeed(const fs::path& dir, const std::string& name, const std::string& bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", (dir / name).string()));
  return absl::OkStatus();
}

// Every metadata value type and array kind, and one tensor of each storage family.
absl::StatusOr<std::string> AllTypesGguf() {
  modelgen::GgufWriter w;
  w.AddUint8("u8", 200);
  w.AddInt8("i8", -100);
  w.AddUint16("u16", 60000);
  w.AddInt16("i16", -30000);
  w.AddUint32("u32", 4000000000u);
  w.AddInt32("i32", -2000000000);
  w.AddUint64("u64", ~uint64_t{0});
  w.AddInt64("i64", std::numeric_limits<int64_t>::min());
  w.AddFloat32("f32", std::nanf(""));
  w.AddFloat64("f64", -2.25);
  w.AddBool("b", true);
  w.AddString("general.architecture", "llama");
  w.AddStringArray("strs", {"a", "", "\xE2\x96\x81x"});
  const float floats[] = {1.0f, -2.0f};
  w.AddFloat32Array("floats", floats);
  const int32_t ints[] = {-1, 7};
  w.AddInt32Array("ints", ints);
  const uint32_t uints[] = {1, 2};
  w.AddUint32Array("uints", uints);
  const float data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  RETURN_IF_ERROR(w.AddFloatTensor("t.f32", {4, 2}, GgmlType::F32, data));
  RETURN_IF_ERROR(w.AddFloatTensor("t.f16", {8}, GgmlType::F16, data));
  RETURN_IF_ERROR(w.AddTensor("t.q4_0", {32}, GgmlType::Q4_0, std::vector<std::byte>(18)));
  return w.Serialize();
}

// A four-token llama vocabulary with every tokenizer key (too small for a Tokenizer, which
// needs the 256 byte tokens, but it reaches each ReadGgufVocab check in a few mutations).
std::string SmallVocabGguf() {
  modelgen::GgufWriter w;
  w.AddString("tokenizer.ggml.model", "llama");
  w.AddStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>",
                                             "\xE2\x96\x81"
                                             "a"});
  const float scores[] = {0, 0, 0, -1};
  w.AddFloat32Array("tokenizer.ggml.scores", scores);
  const int32_t types[] = {2, 3, 3, 1};
  w.AddInt32Array("tokenizer.ggml.token_type", types);
  w.AddUint32("tokenizer.ggml.bos_token_id", 1);
  w.AddUint32("tokenizer.ggml.eos_token_id", 2);
  w.AddInt32("tokenizer.ggml.unknown_token_id", 0);
  w.AddBool("tokenizer.ggml.add_bos_token", true);
  w.AddBool("tokenizer.ggml.add_space_prefix", false);
  return w.Serialize();
}

// A byte-level BPE tokenizer (tests/fuzz's small vocabulary) with every gpt2 tokenizer key.
std::string ByteLevelVocabGguf() {
  const scheduler::text::Vocab v = ByteLevelFuzzVocab(scheduler::text::PreTokenizerKind::kLlama3);
  modelgen::GgufWriter w;
  w.AddString("tokenizer.ggml.model", "gpt2");
  w.AddString("tokenizer.ggml.pre", "llama-bpe");
  w.AddStringArray("tokenizer.ggml.tokens", v.pieces);
  std::vector<int32_t> types;
  for (auto t : v.types) types.push_back(static_cast<int32_t>(t));
  w.AddInt32Array("tokenizer.ggml.token_type", types);
  w.AddStringArray("tokenizer.ggml.merges", v.merges);
  w.AddUint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.eos_id));
  w.AddUint32("tokenizer.ggml.eot_token_id", static_cast<uint32_t>(v.eos_id));
  w.AddInt32("tokenizer.ggml.eom_token_id", -1);
  w.AddUint32("tokenizer.ggml.padding_token_id", 0xFFFFFFFF);
  w.AddBool("tokenizer.ggml.add_bos_token", false);
  w.AddBool("tokenizer.ggml.add_eos_token", false);
  w.AddString("tokenizer.chat_template", "{{ messages }}");
  return w.Serialize();
}

// Every llama.* key ReadModelConfig reads, with a [dim, vocab] token embedding.
absl::StatusOr<std::string> SmallConfigGguf() {
  modelgen::GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddString("general.name", "tiny");
  w.AddUint32("llama.context_length", 16);
  w.AddUint32("llama.embedding_length", 4);
  w.AddUint32("llama.block_count", 1);
  w.AddUint32("llama.feed_forward_length", 8);
  w.AddUint32("llama.attention.head_count", 2);
  w.AddUint32("llama.attention.head_count_kv", 1);
  w.AddUint32("llama.attention.key_length", 2);
  w.AddUint32("llama.attention.value_length", 2);
  w.AddUint32("llama.rope.dimension_count", 2);
  w.AddFloat32("llama.rope.freq_base", 10000.0f);
  w.AddFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  const float embedding[16] = {};
  RETURN_IF_ERROR(w.AddFloatTensor("token_embd.weight", {4, 4}, GgmlType::F32, embedding));
  return w.Serialize();
}

// Raw little-endian pieces, for headers the writer would refuse to produce.
template <typename T>
void Put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

std::string Header(uint64_t tensors, uint64_t kvs) {
  std::string s = "GGUF";
  Put<uint32_t>(s, 3);
  Put<uint64_t>(s, tensors);
  Put<uint64_t>(s, kvs);
  return s;
}

// One metadata key "k" holding an array of `count` elements of `elem` type, then `tail`.
std::string ArrayKv(uint32_t elem, uint64_t count, const std::string& tail) {
  std::string s = Header(0, 1);
  Put<uint64_t>(s, 1);
  s += "k";
  Put<uint32_t>(s, 9);
  Put<uint32_t>(s, elem);
  Put<uint64_t>(s, count);
  return s + tail;
}

absl::Status WriteGgufSeeds(const fs::path& dir, bool with_model) {
  ASSIGN_OR_RETURN(std::string all_types, AllTypesGguf());
  RETURN_IF_ERROR(WriteSeed(dir, "all_types.bin", all_types));
  RETURN_IF_ERROR(WriteSeed(dir, "truncated.bin", all_types.substr(0, all_types.size() / 2)));
  RETURN_IF_ERROR(WriteSeed(dir, "small_vocab.bin", SmallVocabGguf()));
  RETURN_IF_ERROR(WriteSeed(dir, "byte_level_vocab.bin", ByteLevelVocabGguf()));
  ASSIGN_OR_RETURN(std::string config, SmallConfigGguf());
  RETURN_IF_ERROR(WriteSeed(dir, "small_config.bin", config));
  RETURN_IF_ERROR(WriteSeed(dir, "empty_v3.bin", Header(0, 0)));
  RETURN_IF_ERROR(WriteSeed(dir, "huge_counts.bin", Header(~uint64_t{0}, ~uint64_t{0})));
  RETURN_IF_ERROR(WriteSeed(dir, "huge_array.bin", ArrayKv(8, uint64_t{1} << 60, "abcdefgh")));
  RETURN_IF_ERROR(WriteSeed(dir, "nested_array.bin", ArrayKv(9, 1, std::string(12, '\0'))));
  if (!with_model) return absl::OkStatus();
  modelgen::RandomModelOptions o;
  o.n_layers = 1;
  o.dim = 8;
  o.n_heads = 2;
  o.n_kv_heads = 1;
  o.ffn_dim = 16;
  o.vocab_size = 300;
  o.context_length = 64;
  o.dtype = GgmlType::F16;
  o.tie_output = true;
  ASSIGN_OR_RETURN(modelgen::GgufWriter model, modelgen::BuildRandomModel(o));
  return WriteSeed(dir, "model_f16.bin", model.Serialize());
}

absl::Status WriteRequest(const fs::path& dir, const std::string& name,
                          const v1::GenerateRequest& r) {
  return WriteSeed(dir, name, r.SerializeAsString());
}

absl::Status WriteValidationSeeds(const fs::path& dir) {
  v1::GenerateRequest r;
  r.set_text("Once upon a time");
  RETURN_IF_ERROR(WriteRequest(dir, "text.pb", r));
  r.set_max_tokens(200);
  r.mutable_sampling()->set_temperature(0.8f);
  r.mutable_sampling()->set_top_k(40);
  r.mutable_sampling()->set_top_p(0.95f);
  r.mutable_sampling()->set_seed(7);
  r.add_stop_token_ids(2);
  r.set_priority(v1::PRIORITY_HIGH);
  r.set_request_id("client-1");
  r.set_ignore_eos(true);
  r.add_stop("\n\n");
  r.add_stop("The end");
  RETURN_IF_ERROR(WriteRequest(dir, "full.pb", r));
  r.Clear();
  for (int32_t id : {1, 300, 301, 511}) r.mutable_token_ids()->add_ids(id);
  r.set_max_tokens(252);  // exactly fills the fuzz model's 256-token context
  RETURN_IF_ERROR(WriteRequest(dir, "ids_fill_context.pb", r));
  r.mutable_token_ids()->add_ids(512);  // one past the vocabulary
  r.mutable_sampling()->set_top_p(std::nanf(""));
  RETURN_IF_ERROR(WriteRequest(dir, "ids_bad.pb", r));
  r.Clear();
  for (int32_t i = 0; i < 256; ++i) r.mutable_token_ids()->add_ids(300 + i % 200);
  RETURN_IF_ERROR(WriteRequest(dir, "ids_whole_context.pb", r));  // leaves no room
  r.Clear();
  r.set_text(std::string(300, 'a'));
  r.set_request_id(std::string(257, 'r'));
  r.add_stop(std::string(257, 's'));
  RETURN_IF_ERROR(WriteRequest(dir, "long_fields.pb", r));
  r.Clear();
  r.set_text("Once upon a time");
  r.set_max_tokens(16);
  v1::SamplingParams* sp = r.mutable_sampling();
  sp->set_temperature(0.7f);
  sp->set_top_k(40);
  sp->set_min_p(0.05f);
  sp->set_presence_penalty(0.5f);
  sp->set_frequency_penalty(-0.5f);
  sp->set_repetition_penalty(1.2f);
  (*sp->mutable_logit_bias())[300] = 5.0f;
  r.set_logprobs(true);
  r.set_top_logprobs(5);
  RETURN_IF_ERROR(WriteRequest(dir, "sampling.pb", r));
  return absl::OkStatus();
}

}  // namespace
}  // namespace pagoda::fuzz

int main(int argc, char** argv) {
  if (argc != 2 && !(argc == 3 && std::string(argv[2]) == "--no-model")) {
    std::fprintf(stderr, "usage: %s DIR [--no-model]\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  absl::Status s = pagoda::fuzz::WriteGgufSeeds(dir / "gguf_reader", argc == 2);
  if (s.ok()) s = pagoda::fuzz::WriteValidationSeeds(dir / "validation");
  if (!s.ok()) {
    std::fprintf(stderr, "pagoda-fuzz-seeds: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
