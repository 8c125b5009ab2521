#include "scheduler/text/tool_call_format.h"

#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/grammar/gbnf_text.h"
#include "nlohmann/json.hpp"

namespace pagoda::scheduler::text {
namespace {

// absl::string_view is not std::string_view in this Abseil build.
absl::string_view View(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool Contains(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

bool IsRuleNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

// `text` as a GBNF literal, quotes included.
std::string Literal(std::string_view text) { return grammar::GbnfLiteral(text); }

}  // namespace

std::string_view ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kNone:
      return "none";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kMistral:
      return "mistral";
  }
  return "none";
}

ToolCallFormat DetectToolCallFormat(std::string_view chat_template) {
  if (Contains(chat_template, "[TOOL_CALLS]")) return ToolCallFormat::kMistral;
  if (Contains(chat_template, "<tool_call>")) {
    return Contains(chat_template, "<function=") ? ToolCallFormat::kNone : ToolCallFormat::kHermes;
  }
  if (Contains(chat_template, "<|python_tag|>") ||
      (Contains(chat_template, "ipython") && Contains(chat_template, "parameters"))) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kNone;
}

absl::StatusOr<std::optional<ToolCallFormat>> ParseToolCallFormatFlag(std::string_view value) {
  if (value == "auto") return std::optional<ToolCallFormat>();
  if (value == "none") return ToolCallFormat::kNone;
  if (value == "llama3_json" || value == "llama3") return ToolCallFormat::kLlama3Json;
  if (value == "hermes" || value == "qwen" || value == "qwen3") return ToolCallFormat::kHermes;
  if (value == "mistral") return ToolCallFormat::kMistral;
  return absl::InvalidArgumentError(
      absl::StrCat("tool-call format \"", View(value),
                   "\" is not one of auto, none, llama3_json (llama3), hermes (qwen, qwen3), "
                   "mistral"));
}

bool PromptOpensReasoning(std::string_view rendered_prompt) {
  const size_t open = rendered_prompt.rfind("<think>");
  if (open == std::string_view::npos) return false;
  const size_t close = rendered_prompt.rfind("</think>");
  return close == std::string_view::npos || close < open;
}

const ToolCallSyntax& SyntaxOf(ToolCallFormat format) {
  static const ToolCallSyntax kNoneSyntax;
  static const ToolCallSyntax kLlama3 = [] {
    ToolCallSyntax s;
    s.format = ToolCallFormat::kLlama3Json;
    s.separator = "; ";
    s.arguments_key = "parameters";
    s.bare_json_at_start = true;
    s.optional_tag = "<|python_tag|>";
    s.special_markers = {"<|python_tag|>"};
    return s;
  }();
  static const ToolCallSyntax kHermesSyntax = [] {
    ToolCallSyntax s;
    s.format = ToolCallFormat::kHermes;
    s.call_open = "<tool_call>\n";
    s.call_close = "\n</tool_call>";
    s.separator = "\n";
    s.arguments_key = "arguments";
    return s;
  }();
  static const ToolCallSyntax kMistralSyntax = [] {
    ToolCallSyntax s;
    s.format = ToolCallFormat::kMistral;
    s.section_open = "[TOOL_CALLS][";
    s.section_close = "]";
    s.separator = ", ";
    s.arguments_key = "arguments";
    s.special_markers = {"[TOOL_CALLS]"};
    return s;
  }();
  switch (format) {
    case ToolCallFormat::kNone:
      return kNoneSyntax;
    case ToolCallFormat::kLlama3Json:
      return kLlama3;
    case ToolCallFormat::kHermes:
      return kHermesSyntax;
    case ToolCallFormat::kMistral:
      return kMistralSyntax;
  }
  return kNoneSyntax;
}

absl::StatusOr<std::string> PrefixGbnfRules(std::string_view gbnf, std::string_view prefix) {
  if (prefix.empty()) return absl::InvalidArgumentError("GBNF rule prefix is empty");
  for (const char c : prefix) {
    if (!IsRuleNameChar(c)) {
      return absl::InvalidArgumentError(absl::StrCat("GBNF rule prefix \"", View(prefix),
                                                     "\" has a character outside [A-Za-z0-9_-]"));
    }
  }
  std::string out;
  out.reserve(gbnf.size() + gbnf.size() / 4);
  absl::flat_hash_set<std::string> defined;
  std::vector<std::pair<std::string, size_t>> referenced;  // name, line
  size_t line = 1;
  size_t i = 0;
  // Copies a "..." literal or a [...] class starting at gbnf[i] (the opener), escapes included.
  auto copy_quoted = [&](char close) -> absl::Status {
    const size_t start = i;
    const size_t start_line = line;
    out += gbnf[i++];
    while (i < gbnf.size()) {
      const char c = gbnf[i];
      if (c == '\\' && i + 1 < gbnf.size()) {
        out.append(gbnf.substr(i, 2));
        i += 2;
        continue;
      }
      if (c == '\n') ++line;
      out += c;
      ++i;
      if (c == close) return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("GBNF ", close == '"' ? "literal" : "character class", " opened on line ",
                     start_line, " (offset ", start, ") is not closed"));
  };
  while (i < gbnf.size()) {
    const char c = gbnf[i];
    if (c == '"' || c == '[') {
      if (absl::Status s = copy_quoted(c == '"' ? '"' : ']'); !s.ok()) return s;
    } else if (c == '#') {  // a comment: to the end of the line
      while (i < gbnf.size() && gbnf[i] != '\n') out += gbnf[i++];
    } else if (c == '{') {  // a repetition count: digits, not rule names
      while (i < gbnf.size() && gbnf[i] != '}') out += gbnf[i++];
      if (i == gbnf.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("GBNF repetition count on line ", line, " is not closed"));
      }
      out += gbnf[i++];
    } else if (IsRuleNameChar(c)) {
      size_t end = i;
      while (end < gbnf.size() && IsRuleNameChar(gbnf[end])) ++end;
      std::string name(gbnf.substr(i, end - i));
      // A definition when "::=" follows (after blanks).
      size_t next = end;
      while (next < gbnf.size() && (gbnf[next] == ' ' || gbnf[next] == '\t')) ++next;
      if (gbnf.substr(next, 3) == "::=") {
        defined.insert(name);
      } else {
        referenced.emplace_back(name, line);
      }
      absl::StrAppend(&out, View(prefix), name);
      i = end;
    } else {
      if (c == '\n') ++line;
      out += c;
      ++i;
    }
  }
  if (!defined.contains("root")) {
    return absl::InvalidArgumentError("GBNF grammar has no root rule");
  }
  for (const auto& [name, at] : referenced) {
    if (!defined.contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("GBNF rule \"", name, "\" used on line ", at, " is not defined"));
    }
  }
  if (!out.empty() && out.back() != '\n') out += '\n';
  return out;
}

absl::StatusOr<std::string> ToolCallRootGbnf(ToolCallFormat format, std::span<const ToolRule> tools,
                                             bool parallel) {
  if (format == ToolCallFormat::kNone) {
    return absl::InvalidArgumentError("a tool-call grammar needs a tool-call format, not none");
  }
  if (tools.empty()) return absl::InvalidArgumentError("a tool-call grammar needs a tool");
  const ToolCallSyntax& syntax = SyntaxOf(format);
  std::string out;
  // root: the section around the calls and the separator between them.
  const std::string repeat =
      parallel ? absl::StrCat(" (", Literal(syntax.separator), " call)*") : std::string();
  out += "root ::= ";
  if (!syntax.section_open.empty()) absl::StrAppend(&out, Literal(syntax.section_open), " ");
  absl::StrAppend(&out, "call", repeat);
  if (!syntax.section_close.empty()) absl::StrAppend(&out, " ", Literal(syntax.section_close));
  out += "\n";
  // call: one tool's call, with its per-call markers.
  out += "call ::= ";
  if (!syntax.call_open.empty()) absl::StrAppend(&out, Literal(syntax.call_open), " ");
  out += "(";
  for (size_t i = 0; i < tools.size(); ++i) absl::StrAppend(&out, i ? " | " : "", "call-", i);
  out += ")";
  if (!syntax.call_close.empty()) absl::StrAppend(&out, " ", Literal(syntax.call_close));
  out += "\n";
  // call-<i>: {"name": "<name>", "<key>": <arguments>} as the templates write it.
  for (size_t i = 0; i < tools.size(); ++i) {
    if (tools[i].arguments_rule.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tool \"", tools[i].name, "\" has no arguments rule"));
    }
    for (const char c : tools[i].arguments_rule) {
      if (!IsRuleNameChar(c)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tool \"", tools[i].name, "\": arguments rule \"", tools[i].arguments_rule,
                         "\" is not a GBNF rule name"));
      }
    }
    const std::string name = nlohmann::json(tools[i].name)
                                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    const std::string head =
        absl::StrCat("{\"name\": ", name, ", \"", View(syntax.arguments_key), "\": ");
    absl::StrAppend(&out, "call-", i, " ::= ", Literal(head), " ", tools[i].arguments_rule, " ",
                    Literal("}"), "\n");
  }
  return out;
}

absl::StatusOr<std::string> ToolCallGbnf(ToolCallFormat format, std::span<const ToolGrammar> tools,
                                         bool parallel) {
  std::vector<ToolRule> rules;
  std::string argument_rules;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string prefix = absl::StrCat("t", i, "-");
    absl::StatusOr<std::string> renamed = PrefixGbnfRules(tools[i].arguments_gbnf, prefix);
    if (!renamed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("arguments grammar of tool \"", tools[i].name,
                                                     "\": ", renamed.status().message()));
    }
    absl::StrAppend(&argument_rules, *renamed);
    rules.push_back({tools[i].name, absl::StrCat(prefix, "root")});
  }
  absl::StatusOr<std::string> root = ToolCallRootGbnf(format, rules, parallel);
  if (!root.ok()) return root.status();
  return absl::StrCat(*root, argument_rules);
}

}  // namespace pagoda::scheduler::text
