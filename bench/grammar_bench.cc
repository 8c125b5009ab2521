// grammar_bench: constrained-decoding costs with a real vocabulary: grammar compile time, and
// TokenMatcher::FillMask time per generated token over JSON grammars in the shape the JSON
// Schema translation produces. Each document is generated as a model would: at every step the
// mask is computed (timed), then the longest allowed token that continues the target text is
// accepted. Every document starts with a fresh Grammar (cold mask cache, as a new request) and
// is then generated again with the cache warm. Prints one JSON line per grammar and a summary.
//   grammar_bench TOKENIZER_JSON [REPEATS]
// TOKENIZER_JSON: a Hugging Face byte-level BPE tokenizer.json (e.g. Qwen3's).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "common/grammar/grammar.h"
#include "common/grammar/token_matcher.h"
#include "nlohmann/json.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using pagoda::grammar::Grammar;
using pagoda::grammar::TokenMatcher;
using pagoda::grammar::Vocabulary;

constexpr char kCommon[] = R"gbnf(
string ::= "\"" char* "\"" space
char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
integer ::= ("-"? integral-part) space
integral-part ::= [0] | [1-9] [0-9]{0,15}
number ::= ("-"? integral-part) ("." [0-9]+)? ([eE] [-+]? integral-part)? space
boolean ::= ("true" | "false") space
space ::= | " " | "\n" [ \t]{0,20}
)gbnf";

struct Case {
  const char* name;
  std::string gbnf;
  std::string document;
};

std::vector<Case> Cases() {
  const std::string common = kCommon;
  return {
      {"person",
       R"gbnf(root ::= "{" space name-kv "," space age-kv "," space email-kv "," space tags-kv "}" space
name-kv ::= "\"name\"" space ":" space string
age-kv ::= "\"age\"" space ":" space integer
email-kv ::= "\"email\"" space ":" space string
tags-kv ::= "\"tags\"" space ":" space "[" space (string ("," space string)*)? "]" space
)gbnf" + common,
       R"({"name": "Ada Lovelace", "age": 36, "email": "ada@analytical.engine", "tags": ["math", "poetry", "computing", "first programmer"]})"},
      {"order",
       R"gbnf(root ::= "{" space id-kv "," space customer-kv "," space items-kv ("," space note-kv)? "}" space
id-kv ::= "\"id\"" space ":" space integer
customer-kv ::= "\"customer\"" space ":" space customer
customer ::= "{" space "\"name\"" space ":" space string "," space "\"vip\"" space ":" space boolean "," space "\"address\"" space ":" space address "}" space
address ::= "{" space "\"street\"" space ":" space string "," space "\"city\"" space ":" space string "," space "\"zip\"" space ":" space string "}" space
items-kv ::= "\"items\"" space ":" space "[" space (item ("," space item)*)? "]" space
item ::= "{" space "\"sku\"" space ":" space string "," space "\"qty\"" space ":" space integer "," space "\"price\"" space ":" space number "}" space
note-kv ::= "\"note\"" space ":" space string
)gbnf" + common,
       R"({"id": 1042, "customer": {"name": "Grace Hopper", "vip": true, "address": {"street": "1 Compiler Way", "city": "Arlington", "zip": "22201"}}, "items": [{"sku": "COBOL-1959", "qty": 2, "price": 19.99}, {"sku": "A-0", "qty": 1, "price": 5.5}, {"sku": "UNIVAC", "qty": 10, "price": 1200.0}], "note": "Deliver before the \"bug\" report.\nThanks!"})"},
      {"enum-and-nullable",
       R"gbnf(root ::= "{" space "\"status\"" space ":" space status "," space "\"score\"" space ":" space (number | "null" space) "," space "\"labels\"" space ":" space "[" space (label ("," space label)*)? "]" space "}" space
status ::= ("\"pending\"" | "\"running\"" | "\"succeeded\"" | "\"failed\"" | "\"cancelled\"") space
label ::= ("\"red\"" | "\"green\"" | "\"blue\"" | "\"yellow\"" | "\"black\"" | "\"white\"") space
)gbnf" + common,
       R"({"status": "succeeded", "score": 0.875, "labels": ["red", "blue", "white", "green"]})"},
      {"json-object",
       R"gbnf(root ::= object
value ::= object | array | string | number | ("true" | "false" | "null") space
object ::= "{" space ( string ":" space value ("," space string ":" space value)* )? "}" space
array ::= "[" space ( value ("," space value)* )? "]" space
)gbnf" + common,
       R"({"model": "qwen3", "messages": [{"role": "user", "content": "Write a haiku about autumn leaves and the quiet river."}, {"role": "assistant", "content": "Red leaves drift and fall\nthe river hums a slow song\nautumn breathes, then sleeps"}], "temperature": 0.7, "stream": false, "stop": null, "n": 1, "meta": {"tags": ["poetry", "seasons"], "nested": {"deep": [1, 2, [3, 4, {"x": -5e3}]]}}})"},
  };
}

// GPT-2's byte-level alphabet: the printable bytes stand for themselves, the others for
// U+0100 onwards in byte order.
std::map<uint32_t, uint8_t> ByteDecoder() {
  std::map<uint32_t, uint8_t> dec;
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    dec[printable ? static_cast<uint32_t>(b) : next++] = static_cast<uint8_t>(b);
  }
  return dec;
}

bool DecodeToken(const std::string& piece, const std::map<uint32_t, uint8_t>& dec,
                 std::string* out) {
  out->clear();
  for (size_t i = 0; i < piece.size();) {
    const auto c = static_cast<uint8_t>(piece[i]);
    uint32_t cp;
    int len;
    if (c < 0x80) {
      cp = c, len = 1;
    } else if ((c & 0xE0) == 0xC0) {
      cp = c & 0x1F, len = 2;
    } else {
      cp = c & 0x0F, len = 3;
    }
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(piece[i + k]) & 0x3F);
    auto it = dec.find(cp);
    if (it == dec.end()) return false;
    out->push_back(static_cast<char>(it->second));
    i += len;
  }
  return true;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

bool Bit(const std::vector<uint32_t>& m, int32_t t) { return (m[t >> 5] >> (t & 31)) & 1; }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TOKENIZER_JSON [REPEATS]\n", argv[0]);
    return 2;
  }
  const int repeats = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  std::ifstream in(argv[1], std::ios::binary);
  const auto tok = nlohmann::json::parse(in);
  const auto& vocab_json = tok["model"]["vocab"];
  int32_t size = 0;
  for (const auto& [piece, id] : vocab_json.items()) size = std::max(size, id.get<int32_t>() + 1);
  for (const auto& added : tok["added_tokens"])
    size = std::max(size, added["id"].get<int32_t>() + 1);
  std::vector<std::string> bytes(size);
  std::vector<bool> excluded(size, false);
  const auto dec = ByteDecoder();
  for (const auto& [piece, id] : vocab_json.items()) {
    if (!DecodeToken(piece, dec, &bytes[id.get<int32_t>()])) excluded[id.get<int32_t>()] = true;
  }
  std::vector<int32_t> ends;
  for (const auto& added : tok["added_tokens"]) {
    const int32_t id = added["id"].get<int32_t>();
    excluded[id] = true;
    bytes[id].clear();
    if (added["content"] == "<|im_end|>" || added["content"] == "<|endoftext|>") ends.push_back(id);
  }
  auto t0 = Clock::now();
  auto vocab = Vocabulary::Create(bytes, excluded);
  const double vocab_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("{\"vocab\": %d, \"vocab_build_ms\": %.1f}\n", size, vocab_ms);

  std::vector<double> all_cold, all_warm, compiles;
  for (const Case& c : Cases()) {
    std::vector<double> cold, warm;
    size_t tokens = 0;
    for (int r = 0; r < repeats; ++r) {
      t0 = Clock::now();
      auto g = Grammar::FromGbnf(c.gbnf);
      compiles.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (!g.ok()) {
        std::fprintf(stderr, "%s: %s\n", c.name, g.status().ToString().c_str());
        return 1;
      }
      // Held across both passes, so the second finds the cache the first filled.
      auto constraint = pagoda::grammar::CompiledConstraint::Get(*g, vocab);
      for (int pass = 0; pass < 2; ++pass) {
        TokenMatcher tm(*g, vocab, ends);
        std::vector<uint32_t> mask(vocab->mask_words());
        size_t pos = 0;
        tokens = 0;
        while (true) {
          const auto start = Clock::now();
          tm.FillMask(mask);
          const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
          (pass == 0 ? cold : warm).push_back(us);
          if (pos == c.document.size()) break;
          // The longest allowed token that continues the document.
          int32_t best = -1;
          for (int32_t t = 0; t < vocab->size(); ++t) {
            if (!Bit(mask, t)) continue;
            const std::string& b = vocab->token_bytes(t);
            if (b.empty() || c.document.compare(pos, b.size(), b) != 0) continue;
            if (best < 0 || b.size() > vocab->token_bytes(best).size()) best = t;
          }
          if (best < 0 || !tm.Accept(best)) {
            std::fprintf(stderr, "%s: stuck at byte %zu\n", c.name, pos);
            return 1;
          }
          pos += vocab->token_bytes(best).size();
          ++tokens;
        }
        if (std::getenv("GRAMMAR_BENCH_VERBOSE")) {
          auto st = pagoda::grammar::CompiledConstraint::Get(*g, vocab)->stats();
          std::fprintf(stderr, "%s pass %d: hits %ld misses %ld entries %ld\n", c.name, pass,
                       static_cast<long>(st.hits), static_cast<long>(st.misses),
                       static_cast<long>(st.entries));
        }
        if (!tm.matcher().Accepting()) {
          std::fprintf(stderr, "%s: document not accepted\n", c.name);
          return 1;
        }
      }
    }
    std::printf(
        "{\"grammar\": \"%s\", \"tokens\": %zu, \"cold_p50_us\": %.1f, \"cold_p99_us\": %.1f, "
        "\"cold_max_us\": %.1f, \"warm_p50_us\": %.1f, \"warm_p99_us\": %.1f}\n",
        c.name, tokens, Percentile(cold, 0.5), Percentile(cold, 0.99), Percentile(cold, 1.0),
        Percentile(warm, 0.5), Percentile(warm, 0.99));
    all_cold.insert(all_cold.end(), cold.begin(), cold.end());
    all_warm.insert(all_warm.end(), warm.begin(), warm.end());
  }
  std::printf(
      "{\"summary\": true, \"masks\": %zu, \"cold_p50_us\": %.1f, \"cold_p99_us\": %.1f, "
      "\"warm_p50_us\": %.1f, \"warm_p99_us\": %.1f, \"compile_p50_ms\": %.2f, "
      "\"compile_max_ms\": %.2f}\n",
      all_cold.size(), Percentile(all_cold, 0.5), Percentile(all_cold, 0.99),
      Percentile(all_warm, 0.5), Percentile(all_warm, 0.99), Percentile(compiles, 0.5),
      Percentile(compiles, 1.0));
  return 0;
}
