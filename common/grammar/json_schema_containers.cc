// See json_schema_compiler.h.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/grammar/gbnf_text.h"
#include "common/grammar/json_schema_compiler.h"
#include "common/grammar/regex.h"
#include "common/status_macros.h"

namespace pagoda::grammar::internal {
namespace {

bool ValidUtf8(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (internal::DecodeUtf8(s, &pos) < 0) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<Compiler::Piece> Compiler::String(const Json& s, const std::string& path) {
  int64_t min_len = Count(s, "minLength", 0);
  int64_t explicit_max = Count(s, "maxLength", kUnbounded);
  if (explicit_max > options_.max_repetition) explicit_max = options_.max_repetition;
  int64_t max_len = Count(s, "maxLength",
                          options_.max_string_length < 0 ? kUnbounded : options_.max_string_length);
  if (min_len > options_.max_repetition) {
    return ErrorAt(
        Child(path, "minLength"),
        absl::StrFormat("minLength exceeds max_repetition (%d)", options_.max_repetition));
  }
  if (max_len > options_.max_repetition) max_len = options_.max_repetition;
  std::string quote = "\"\\\"\"";
  bool has_length = s.contains("minLength") || s.contains("maxLength");
  if (s.contains("format")) {
    std::string format = s["format"].get<std::string>();
    static const std::set<std::string> kFormats = {"date", "time",  "date-time",
                                                   "uuid", "email", "ipv4"};
    if (!kFormats.contains(format)) {
      return ErrorAt(Child(path, "format"),
                     absl::StrCat("format \"", format, "\" is not supported"));
    }
    if (s.contains("pattern")) {
      return ErrorAt(Child(path, "pattern"), "pattern next to format is not supported");
    }
    if (has_length) {
      auto [lo, hi] = FormatLengths(format);
      if (lo < min_len || (explicit_max != kUnbounded && (hi == kUnbounded || hi > explicit_max))) {
        return ErrorAt(Child(path, "format"),
                       absl::StrCat("format \"", format,
                                    "\" together with minLength/maxLength is not supported"));
      }
    }
    return Piece{quote + " " + UseFormat(format) + " " + quote, kTrue};
  }
  if (s.contains("pattern")) {
    RegexOptions ro;
    ro.search = true;
    ro.json_string = true;
    ro.max_repetition = options_.max_repetition;
    ro.min_length = static_cast<int32_t>(min_len);
    ro.max_length = static_cast<int32_t>(explicit_max);
    std::string helpers;
    std::string pattern = s["pattern"].get<std::string>();
    if (!ValidUtf8(pattern)) return ErrorAt(Child(path, "pattern"), "invalid UTF-8");
    auto expr = RegexToGbnf(pattern, "re", &helpers, ro);
    if (!expr.ok()) return ErrorAt(Child(path, "pattern"), std::string(expr.status().message()));
    RETURN_IF_ERROR(Budget(Child(path, "pattern"), static_cast<int64_t>(pattern.size())));
    return Piece{quote + " " + Group(*expr) + " " + quote, kTrue};
  }
  if (max_len != kUnbounded) RETURN_IF_ERROR(Budget(path, max_len));
  RETURN_IF_ERROR(Budget(path, min_len));
  return Piece{quote + " " + Repeat(Use("json-char"), min_len, max_len) + " " + quote, kTrue};
}

absl::StatusOr<Compiler::Piece> Compiler::Array(const Json& s, const std::string& path) {
  std::vector<Piece> prefix;
  std::optional<Piece> item;  // nullopt: no items after the prefix
  bool tuple_items = s.contains("items") && s["items"].is_array();
  if (tuple_items && s.contains("prefixItems")) {
    return ErrorAt(Child(path, "items"), "items as an array next to prefixItems");
  }
  std::string prefix_key = tuple_items ? "items" : "prefixItems";
  std::string item_key = tuple_items ? "additionalItems" : "items";
  ++consumed_;
  if (s.contains(prefix_key)) {
    const Json& list = s[prefix_key];
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = Compile(list[i], Child(Child(path, prefix_key), i), depth_ + 1);
      if (!p.ok()) return p.status();
      prefix.push_back(*p);
    }
  }
  if (!s.contains(item_key) || (s[item_key].is_boolean() && s[item_key].get<bool>())) {
    item = Piece{Use("json-value"), kTrue};
  } else if (!s[item_key].is_boolean()) {
    auto p = Compile(s[item_key], Child(path, item_key), depth_ + 1);
    if (!p.ok()) return p.status();
    item = Shared(*std::move(p), Child(path, item_key), "item");  // written twice below
  }
  --consumed_;
  int64_t k = static_cast<int64_t>(prefix.size());
  int64_t lo = Count(s, "minItems", 0);
  int64_t hi = Count(s, "maxItems", kUnbounded);
  if (!s.contains("maxItems") && options_.max_unbounded_items >= 0) {
    hi = std::max<int64_t>(options_.max_unbounded_items, std::min(lo, k));
  }
  if (!item) hi = hi == kUnbounded ? k : std::min(hi, k);
  if (hi != kUnbounded && lo > hi) {
    return ErrorAt(Child(path, "minItems"),
                   "minItems exceeds the number of items prefixItems/items allow");
  }
  if (lo > options_.max_repetition) {
    return ErrorAt(Child(path, "minItems"), absl::StrFormat("minItems exceeds max_repetition (%d)",
                                                            options_.max_repetition));
  }
  if (hi > options_.max_repetition) hi = options_.max_repetition;
  if (hi != kUnbounded && hi < k) {
    prefix.resize(static_cast<size_t>(hi));
    k = hi;
  }
  std::string ws = Ws();
  std::string sep = "\",\"" + ws;
  std::vector<int> reqs;
  std::string body;
  if (k == 0) {
    if (hi != 0) {
      int64_t more_lo = std::max<int64_t>(lo - 1, 0);
      int64_t more_hi = hi == kUnbounded ? kUnbounded : hi - 1;
      RETURN_IF_ERROR(Budget(path, std::max(more_lo, more_hi)));
      body = item->text + ws + Repeat("( " + sep + item->text + ws + ")", more_lo, more_hi);
      if (lo == 0) {
        body = "( " + body + " )?";
      } else {
        reqs.push_back(item->req);
      }
    }
  } else {
    // Items after the prefix, once all k prefix items are present.
    std::string tail;
    if (item && (hi == kUnbounded || hi > k)) {
      int64_t more_lo = std::max<int64_t>(lo - k, 0);
      int64_t more_hi = hi == kUnbounded ? kUnbounded : hi - k;
      RETURN_IF_ERROR(Budget(path, std::max(more_lo, more_hi)));
      tail = Repeat("( " + sep + item->text + ws + ")", more_lo, more_hi);
      if (more_lo > 0) reqs.push_back(item->req);
    }
    // Innermost first: prefix item j (1-based) is required when j <= minItems.
    std::string inner = tail;
    for (int64_t j = k; j >= 1; --j) {
      std::string element = Cat(prefix[j - 1].text + ws, inner);
      if (j <= lo) reqs.push_back(prefix[j - 1].req);
      if (j == 1) {
        inner = j <= lo ? element : "( " + element + " )?";
      } else {
        std::string with_sep = sep + element;
        inner = j <= lo ? with_sep : "( " + with_sep + " )?";
      }
    }
    body = inner;
  }
  return Piece{Cat("\"[\"" + ws + body, "\"]\""), And(reqs)};
}

std::string Compiler::KeyNotIn(const std::vector<std::string>& names, const std::string& base) {
  struct TrieNode {
    std::map<uint32_t, int> children;
    bool terminal = false;
  };
  std::vector<TrieNode> trie(1);
  for (const auto& name : names) {
    int node = 0;
    size_t pos = 0;
    while (pos < name.size()) {
      auto c = static_cast<uint32_t>(internal::DecodeUtf8(name, &pos));
      auto it = trie[node].children.find(c);
      if (it == trie[node].children.end()) {
        trie.push_back({});
        int fresh = static_cast<int>(trie.size()) - 1;
        trie[node].children[c] = fresh;
        node = fresh;
      } else {
        node = it->second;
      }
    }
    trie[node].terminal = true;
  }
  std::string quote = "\"\\\"\"";
  std::string any_rest = Repeat(Use("json-char"), 0, kUnbounded) + " " + quote;
  std::vector<std::string> node_names(trie.size());
  for (size_t i = 0; i < trie.size(); ++i) node_names[i] = UniqueName(base + "-key");
  for (size_t i = 0; i < trie.size(); ++i) {
    const TrieNode& n = trie[i];
    std::vector<std::string> alts;
    if (!n.terminal) alts.push_back(quote);
    CodePointSet others = CodePointSet::All();
    for (const auto& [c, child] : n.children) others = others.Minus(CodePointSet::Of(c));
    alts.push_back(internal::JsonCharGbnf(others) + " " + any_rest);
    for (const auto& [c, child] : n.children) {
      std::string utf8;
      internal::AppendUtf8(c, &utf8);
      std::string spelled = internal::JsonQuote(utf8);
      alts.push_back(GbnfLiteral(spelled.substr(1, spelled.size() - 2)) + " " + node_names[child]);
    }
    AddRule(node_names[i], Alternatives(alts), kTrue, "");
  }
  return quote + " " + node_names[0];
}

absl::StatusOr<Compiler::Piece> Compiler::Object(const Json& s, const std::string& path) {
  std::string ws = Ws();
  std::vector<Slot> slots;
  std::vector<std::string> names;
  std::set<std::string> required;
  if (s.contains("required")) {
    for (const auto& r : s["required"]) required.insert(r.get<std::string>());
  }
  bool has_properties = s.contains("properties");
  const Json* additional =
      s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
  bool closed = additional ? additional->is_boolean() && !additional->get<bool>() : has_properties;
  ++consumed_;
  auto member = [&](const std::string& name, const Piece& value) {
    return GbnfLiteral(internal::JsonQuote(name)) + ws + "\":\"" + ws + value.text;
  };
  std::optional<Piece> extra_value;
  if (!additional || (additional->is_boolean() && additional->get<bool>())) {
    extra_value = Piece{"json-value", kTrue};  // the rule is added where it is used
  } else if (!additional->is_boolean()) {
    auto p = Compile(*additional, Child(path, "additionalProperties"), depth_ + 1);
    if (!p.ok()) return p.status();
    extra_value = *p;
  }
  if (has_properties) {
    for (const auto& [name, schema] : s["properties"].items()) {
      if (!ValidUtf8(name)) return ErrorAt(Child(path, "properties"), "invalid UTF-8 in a name");
      auto p = Compile(schema, Child(Child(path, "properties"), name), depth_ + 1);
      if (!p.ok()) return p.status();
      bool req = required.contains(name);
      slots.push_back(
          {member(name, *p), req ? p->req : kTrue, req ? Slot::kRequired : Slot::kOptional});
      names.push_back(name);
    }
  }
  for (const auto& name : required) {  // required names that properties does not declare
    if (std::find(names.begin(), names.end(), name) != names.end()) continue;
    if (!ValidUtf8(name)) return ErrorAt(Child(path, "required"), "invalid UTF-8 in a name");
    if (!extra_value) {
      return ErrorAt(Child(path, "required"),
                     absl::StrCat("required property \"", name,
                                  "\" is not in properties and additionalProperties is false"));
    }
    if (extra_value->text == "json-value") Use("json-value");
    slots.push_back({member(name, *extra_value), extra_value->req, Slot::kRequired});
    names.push_back(name);
  }
  --consumed_;
  if (!closed && extra_value) {
    if (extra_value->text == "json-value") Use("json-value");
    std::string key = KeyNotIn(names, UniqueName("obj"));
    slots.push_back({key + ws + "\":\"" + ws + extra_value->text, kTrue, Slot::kRepeated});
  }
  std::vector<int> reqs;
  for (const auto& slot : slots) reqs.push_back(slot.req);

  std::string sep = options_.max_whitespace > 0 ? "ws \",\" ws " : "\",\" ";
  auto form = [&](const Slot& slot) {
    switch (slot.kind) {
      case Slot::kRequired:
        return sep + slot.member;
      case Slot::kOptional:
        return "( " + sep + slot.member + " )?";
      case Slot::kRepeated:
        return Repeat("( " + sep + slot.member + " )", 0,
                      options_.max_unbounded_items < 0 ? kUnbounded : options_.max_unbounded_items);
    }
    return std::string();
  };
  std::string body;
  auto first_required = std::find_if(slots.begin(), slots.end(),
                                     [](const Slot& slot) { return slot.kind == Slot::kRequired; });
  if (first_required != slots.end()) {
    // Optional members before the first required one end with a comma; the rest start
    // with one.
    for (auto it = slots.begin(); it != first_required; ++it) {
      body += "( " + it->member + " " + sep + ")? ";
    }
    body += first_required->member;
    for (auto it = first_required + 1; it != slots.end(); ++it) body += " " + form(*it);
  } else if (!slots.empty()) {
    // All optional: the first member present, then the rest (rest-i rules keep it linear).
    std::string base = UniqueName("obj");
    std::vector<std::string> rest(slots.size() + 1);
    for (size_t i = slots.size(); i-- > 1;) {
      std::string body_i = form(slots[i]);
      if (!rest[i + 1].empty()) body_i += " " + rest[i + 1];
      rest[i] = UniqueName(base + "-rest");
      AddRule(rest[i], body_i, kTrue, path);
    }
    std::vector<std::string> alts;
    for (size_t i = 0; i < slots.size(); ++i) {
      std::string a = slots[i].member;
      if (slots[i].kind == Slot::kRepeated) a += " " + form(slots[i]);
      if (!rest[i + 1].empty()) a += " " + rest[i + 1];
      alts.push_back(a);
    }
    body = "( " + Alternatives(alts) + " )?";
  }
  std::string text = "\"{\"" + ws + (body.empty() ? "" : body + ws) + "\"}\"";
  return Piece{text, And(reqs)};
}

}  // namespace pagoda::grammar::internal
