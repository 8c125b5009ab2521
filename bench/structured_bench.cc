// structured_bench: structured-output costs over a corpus of JSON Schemas with a real
// vocabulary (bench/structured.sh runs it with Qwen3's).
//
//  * Compile: per schema, JsonSchemaToGbnf (the scheduler's translation, default options as
//    ConstraintCompiler uses them) and Grammar::FromGbnf (run by the scheduler and again by the
//    worker), each timed over --compile_repeats runs.
//  * Masks: per schema, --walks random walks of at most --max_tokens tokens, as a random-weight
//    model samples: at every step TokenMatcher::FillMask (timed), then a uniformly drawn allowed
//    token (seeded; an end token, when allowed, is taken with probability --end_probability),
//    then Accept (timed). The first pass runs on a freshly compiled Grammar (a cold mask cache,
//    as a new request's); the walks are then replayed token for token with the cache warm.
//    The per-state walks that token_matcher.cc shares between grammars of one process stay
//    warm from schema to schema, as in a worker that has served other requests.
//  * Finish rate: walks that ended with an end token (the grammar complete or accepting).
//
// The vocabulary is built as the scheduler builds it: tokenizer.json -> GGUF tokenizer metadata
// (pagoda-make-model's import) -> Tokenizer -> TokenBytes for every id, control and
// user-defined tokens excluded, EndOfGenerationIds as the end tokens.
//
//   structured_bench --tokenizer_json PATH --corpus tests/e2e/structured/schemas.json
//       [--walks 3] [--max_tokens 256] [--compile_repeats 5] [--seed 1] [--json OUT.json]
// The corpus: {"schemas": [{"name": ..., "bounded": bool, "schema": {...}}, ...]}, or an array
// of schemas. Prints one JSON line per schema and a "summary" line.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/gguf_reader.h"
#include "common/grammar/grammar.h"
#include "common/grammar/json_schema.h"
#include "common/grammar/token_matcher.h"
#include "modelgen/gguf_writer.h"
#include "nlohmann/json.hpp"
#include "scheduler/text/gguf_vocab.h"
#include "scheduler/text/tokenizer.h"
#include "tools/hf_tokenizer/hf_tokenizer.h"

ABSL_FLAG(std::string, tokenizer_json, "", "a Hugging Face byte-level BPE tokenizer.json");
ABSL_FLAG(std::string, tokenizer_config, "",
          "its tokenizer_config.json (special tokens); default: beside tokenizer.json");
ABSL_FLAG(std::string, corpus, "tests/e2e/structured/schemas.json", "the JSON Schema corpus");
ABSL_FLAG(int32_t, walks, 3, "random walks per schema");
ABSL_FLAG(int32_t, max_tokens, 256, "tokens per walk at most");
ABSL_FLAG(int32_t, compile_repeats, 5, "compilations per schema");
ABSL_FLAG(double, end_probability, 0.5, "chance of taking an end token when one is allowed");
ABSL_FLAG(uint64_t, seed, 1, "seed of the walks");
ABSL_FLAG(std::string, json, "", "also write the summary and per-schema results to FILE");
ABSL_FLAG(std::string, dump_vocab, "",
          "write the vocabulary to FILE (a line per id: hex of its bytes, then x when excluded) "
          "to compare with another decoding of tokenizer.json");

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::ordered_json;
using pagoda::grammar::Grammar;
using pagoda::grammar::TokenMatcher;
using pagoda::grammar::Vocabulary;

double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(v.size() - 1, i)];
}

struct Loaded {
  std::shared_ptr<const Vocabulary> vocab;
  std::vector<int32_t> ends;
};

// tokenizer.json -> HfTokenizer -> GGUF bytes -> Tokenizer, as pagoda-make-model and the
// scheduler do, then the worker's Vocabulary from TokenBytes and special_ids.
Loaded LoadVocabulary(const std::string& tokenizer_json, std::string config) {
  if (config.empty()) {
    const size_t slash = tokenizer_json.rfind('/');
    config = (slash == std::string::npos ? std::string() : tokenizer_json.substr(0, slash + 1)) +
             "tokenizer_config.json";
    if (!std::ifstream(config)) config.clear();
  }
  auto imported = pagoda::tools::ImportHfTokenizerFiles(tokenizer_json, config);
  if (!imported.ok()) {
    std::fprintf(stderr, "structured_bench: %s\n", imported.status().ToString().c_str());
    std::exit(1);
  }
  pagoda::modelgen::GgufWriter w;
  pagoda::tools::AddHfTokenizerMetadata(*imported, w);
  auto file = pagoda::common::GgufFile::FromBytes(w.Serialize());
  if (!file.ok()) {
    std::fprintf(stderr, "structured_bench: %s\n", file.status().ToString().c_str());
    std::exit(1);
  }
  auto tokenizer = pagoda::scheduler::text::LoadGgufTokenizer(**file);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "structured_bench: %s\n", tokenizer.status().ToString().c_str());
    std::exit(1);
  }
  const int32_t n = tokenizer->vocab_size();
  std::vector<std::string> bytes(n);
  std::vector<bool> excluded(n, false);
  for (int32_t id = 0; id < n; ++id) bytes[id] = tokenizer->TokenBytes(id);
  for (int32_t id : tokenizer->special_ids()) excluded[id] = true;
  return {Vocabulary::Create(std::move(bytes), std::move(excluded)),
          tokenizer->EndOfGenerationIds()};
}

struct Entry {
  std::string name;
  bool bounded = false;
  ordered_json schema;
};

std::vector<Entry> ReadCorpus(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const ordered_json doc = ordered_json::parse(in, nullptr, false);
  if (doc.is_discarded()) {
    std::fprintf(stderr, "structured_bench: cannot read the corpus %s as JSON\n", path.c_str());
    std::exit(1);
  }
  std::vector<Entry> out;
  const ordered_json& list = doc.is_object() && doc.contains("schemas") ? doc["schemas"] : doc;
  for (size_t i = 0; i < list.size(); ++i) {
    const ordered_json& e = list[i];
    if (e.is_object() && e.contains("schema")) {
      out.push_back(
          {e.value("name", "schema-" + std::to_string(i)), e.value("bounded", false), e["schema"]});
    } else {
      out.push_back({"schema-" + std::to_string(i), false, e});
    }
  }
  return out;
}

struct Stats {
  std::vector<double> cold, warm, accept, translate_ms, fromgbnf_ms, compile_ms;
  int walks = 0, finished = 0, tokens = 0;
  int bounded_walks = 0, bounded_finished = 0;
};

ordered_json Summary(const Stats& s) {
  ordered_json j;
  j["masks"] = s.cold.size();
  j["mask_cold_p50_us"] = Percentile(s.cold, 0.5);
  j["mask_cold_p99_us"] = Percentile(s.cold, 0.99);
  j["mask_cold_max_us"] = Percentile(s.cold, 1.0);
  j["mask_warm_p50_us"] = Percentile(s.warm, 0.5);
  j["mask_warm_p99_us"] = Percentile(s.warm, 0.99);
  j["mask_warm_max_us"] = Percentile(s.warm, 1.0);
  j["accept_p50_us"] = Percentile(s.accept, 0.5);
  j["accept_p99_us"] = Percentile(s.accept, 0.99);
  j["translate_p50_ms"] = Percentile(s.translate_ms, 0.5);
  j["translate_p99_ms"] = Percentile(s.translate_ms, 0.99);
  j["from_gbnf_p50_ms"] = Percentile(s.fromgbnf_ms, 0.5);
  j["from_gbnf_p99_ms"] = Percentile(s.fromgbnf_ms, 0.99);
  j["compile_p50_ms"] = Percentile(s.compile_ms, 0.5);
  j["compile_p99_ms"] = Percentile(s.compile_ms, 0.99);
  j["compile_max_ms"] = Percentile(s.compile_ms, 1.0);
  j["walks"] = s.walks;
  j["tokens"] = s.tokens;
  j["finish_rate"] = s.walks ? static_cast<double>(s.finished) / s.walks : 0.0;
  j["bounded_finish_rate"] =
      s.bounded_walks ? static_cast<double>(s.bounded_finished) / s.bounded_walks : 0.0;
  return j;
}

void Append(Stats& all, const Stats& one) {
  auto add = [](std::vector<double>& to, const std::vector<double>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  add(all.cold, one.cold);
  add(all.warm, one.warm);
  add(all.accept, one.accept);
  add(all.translate_ms, one.translate_ms);
  add(all.fromgbnf_ms, one.fromgbnf_ms);
  add(all.compile_ms, one.compile_ms);
  all.walks += one.walks;
  all.finished += one.finished;
  all.tokens += one.tokens;
  all.bounded_walks += one.bounded_walks;
  all.bounded_finished += one.bounded_finished;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string tokenizer_json = absl::GetFlag(FLAGS_tokenizer_json);
  if (tokenizer_json.empty()) {
    std::fprintf(stderr, "usage: structured_bench --tokenizer_json PATH [--corpus FILE]\n");
    return 2;
  }
  auto t0 = Clock::now();
  const Loaded loaded = LoadVocabulary(tokenizer_json, absl::GetFlag(FLAGS_tokenizer_config));
  const auto& vocab = loaded.vocab;
  if (const std::string path = absl::GetFlag(FLAGS_dump_vocab); !path.empty()) {
    std::ofstream out(path);
    static constexpr char kHex[] = "0123456789abcdef";
    for (int32_t id = 0; id < vocab->size(); ++id) {
      std::string line;
      for (unsigned char c : vocab->token_bytes(id)) line += {kHex[c >> 4], kHex[c & 15]};
      out << line << (vocab->excluded(id) ? " x" : "") << "\n";
    }
  }
  const std::vector<Entry> corpus = ReadCorpus(absl::GetFlag(FLAGS_corpus));
  std::printf("{\"vocab\": %d, \"end_tokens\": %zu, \"vocab_load_ms\": %.0f, \"schemas\": %zu}\n",
              vocab->size(), loaded.ends.size(), Us(t0, Clock::now()) / 1000, corpus.size());
  const int walks = std::max(1, absl::GetFlag(FLAGS_walks));
  const int max_tokens = std::max(1, absl::GetFlag(FLAGS_max_tokens));
  const int repeats = std::max(1, absl::GetFlag(FLAGS_compile_repeats));
  const double end_probability = absl::GetFlag(FLAGS_end_probability);
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  auto is_end = [&](int32_t t) {
    return std::find(loaded.ends.begin(), loaded.ends.end(), t) != loaded.ends.end();
  };

  Stats all;
  ordered_json per_schema = ordered_json::array();
  int failed = 0;
  std::vector<uint32_t> mask(vocab->mask_words());
  std::vector<int32_t> allowed_text, allowed_end;
  allowed_text.reserve(vocab->size());
  for (const Entry& e : corpus) {
    Stats s;
    std::shared_ptr<const Grammar> grammar;
    std::string error;
    for (int r = 0; r < repeats; ++r) {
      const auto a = Clock::now();
      auto gbnf = pagoda::grammar::JsonSchemaToGbnf(e.schema);
      const auto b = Clock::now();
      if (!gbnf.ok()) {
        error = gbnf.status().ToString();
        break;
      }
      auto g = Grammar::FromGbnf(*gbnf);
      const auto c = Clock::now();
      if (!g.ok()) {
        error = g.status().ToString();
        break;
      }
      s.translate_ms.push_back(Us(a, b) / 1000);
      s.fromgbnf_ms.push_back(Us(b, c) / 1000);
      s.compile_ms.push_back(Us(a, c) / 1000);
      grammar = *std::move(g);  // the last compilation: nothing cached for it yet
    }
    if (!error.empty()) {
      std::printf("{\"schema\": \"%s\", \"error\": %s}\n", e.name.c_str(),
                  ordered_json(error).dump().c_str());
      ++failed;
      continue;
    }
    // Held across both passes, so the replay finds the cache the first pass filled.
    auto constraint = pagoda::grammar::CompiledConstraint::Get(grammar, vocab);
    std::vector<std::vector<int32_t>> sequences;
    for (int pass = 0; pass < 2; ++pass) {
      for (int w = 0; w < walks; ++w) {
        TokenMatcher tm(constraint, loaded.ends);
        if (pass == 0) sequences.emplace_back();
        std::vector<int32_t>& seq = sequences[w];
        bool ended = false;
        for (int step = 0; step < max_tokens; ++step) {
          const auto a = Clock::now();
          tm.FillMask(mask);
          const auto b = Clock::now();
          (pass == 0 ? s.cold : s.warm).push_back(Us(a, b));
          int32_t pick;
          if (pass == 0) {
            allowed_text.clear();
            allowed_end.clear();
            for (int32_t word = 0; word < vocab->mask_words(); ++word) {
              for (uint32_t bits = mask[word]; bits != 0; bits &= bits - 1) {
                const int32_t t = word * 32 + std::countr_zero(bits);
                (is_end(t) ? allowed_end : allowed_text).push_back(t);
              }
            }
            if (!allowed_end.empty() &&
                (allowed_text.empty() ||
                 std::uniform_real_distribution<>(0, 1)(rng) < end_probability)) {
              pick = allowed_end[rng() % allowed_end.size()];
            } else if (!allowed_text.empty()) {
              pick = allowed_text[rng() % allowed_text.size()];
            } else {
              std::fprintf(stderr, "%s: empty mask\n", e.name.c_str());
              return 1;
            }
            seq.push_back(pick);
          } else {
            if (step >= static_cast<int>(seq.size())) break;
            pick = seq[step];
          }
          const auto c = Clock::now();
          const bool ok = tm.Accept(pick);
          if (pass == 0) s.accept.push_back(Us(c, Clock::now()));
          if (!ok) {
            std::fprintf(stderr, "%s: Accept refused an allowed token %d\n", e.name.c_str(), pick);
            return 1;
          }
          if (tm.Finished()) {
            ended = true;
            break;
          }
        }
        if (pass == 0) {
          ++s.walks;
          s.tokens += static_cast<int>(seq.size());
          s.finished += ended;
          if (e.bounded) {
            ++s.bounded_walks;
            s.bounded_finished += ended;
          }
        }
      }
    }
    ordered_json j = Summary(s);
    j["schema"] = e.name;
    j["bounded"] = e.bounded;
    j["gbnf_bytes"] = grammar->source().size();
    const auto cs = constraint->stats();
    j["cache_entries"] = cs.entries;
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
    per_schema.push_back(std::move(j));
    Append(all, s);
  }
  ordered_json summary = Summary(all);
  summary["summary"] = true;
  summary["schemas"] = corpus.size();
  summary["failed"] = failed;
  summary["vocab"] = vocab->size();
  std::printf("%s\n", summary.dump().c_str());
  if (const std::string out = absl::GetFlag(FLAGS_json); !out.empty()) {
    std::ofstream(out) << ordered_json{{"summary", summary}, {"schemas", per_schema}}.dump(1)
                       << "\n";
  }
  return failed == 0 ? 0 : 1;
}
