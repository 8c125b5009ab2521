// tokenizer_bench: encodes a text file with Pagoda's tokenizer built from a Hugging Face
// tokenizer.json (imported through GGUF metadata as the scheduler loads it), the best of
// --repeats runs, and prints one JSON line: {"bytes", "tokens", "seconds", "load_seconds"}.
// bench/tokenizer.sh compares it with transformers.js on the same text.
//   tokenizer_bench TOKENIZER_DIR TEXT_FILE [REPEATS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "common/gguf_reader.h"
#include "modelgen/gguf_writer.h"
#include "scheduler/text/gguf_vocab.h"
#include "tools/hf_tokenizer/hf_tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR TEXT_FILE [REPEATS]\n", argv[0]);
    return 2;
  }
  using Clock = std::chrono::steady_clock;
  const std::string dir = argv[1];
  const int repeats = argc > 3 ? std::max(1, std::atoi(argv[3])) : 3;
  std::ifstream in(argv[2], std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto imported = pagoda::tools::ImportHfTokenizerFiles(dir + "/tokenizer.json",
                                                        dir + "/tokenizer_config.json");
  if (!imported.ok()) {
    std::fprintf(stderr, "%s\n", imported.status().ToString().c_str());
    return 1;
  }
  pagoda::modelgen::GgufWriter w;
  pagoda::tools::AddHfTokenizerMetadata(*imported, w);
  auto file = pagoda::common::GgufFile::FromBytes(w.Serialize());
  const auto t1 = Clock::now();
  auto tokenizer = pagoda::scheduler::text::LoadGgufTokenizer(**file);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  const double load = std::chrono::duration<double>(Clock::now() - t1).count();
  double best = 1e30;
  size_t tokens = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    tokens = tokenizer->Encode(text, false, /*parse_special=*/true).size();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::printf("{\"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.6f, \"load_seconds\": %.3f}\n",
              text.size(), tokens, best, load);
  return 0;
}
