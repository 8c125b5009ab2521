// Tool-call formats: how a model writes function calls in its output, recognised from its chat
// template or named by a flag, and described once for both the output parser
// (output_parser.h) and the grammar that forces a call (`tool_choice` required or named).
//
// Formats (what the model generates; whitespace between JSON tokens is free when parsing):
//   llama3_json  Llama 3.1-3.3: the whole output is a JSON object
//                  {"name": "f", "parameters": {...}}
//                optionally after <|python_tag|>; several calls are separated by ";".
//   hermes       Hermes 2 Pro, Qwen 2.5, Qwen3 (and QwQ): after optional content, each call is
//                  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//                several calls one after the other (newline-separated).
//   mistral      Mistral 7B v0.3, Nemo, Small: after optional content,
//                  [TOOL_CALLS][{"name": "f", "arguments": {...}}, {...}]
//                The parser also accepts a single object after the marker and the newer
//                [TOOL_CALLS]f[ARGS]{...} form (Mistral Small 3.2, Magistral); the grammar writes
//                the array form.
// The parser reads either argument key ("parameters" or "arguments") in every format; the
// grammar writes the format's own.
//
// Detection, DetectToolCallFormat(template source), first rule that matches wins:
//   1. "[TOOL_CALLS]" in the source                           -> mistral
//   2. "<tool_call>" and "<function=" (Qwen3-Coder's XML parameters, not supported) -> none
//   3. "<tool_call>"                                          -> hermes
//   4. "<|python_tag|>", or "ipython" together with "parameters" (Llama 3.2's template has no
//      python tag but names the ipython role and asks for {"name", "parameters"}) -> llama3_json
//   5. otherwise                                              -> none
// A template that mentions no tools detects as none: the flag (pagoda-scheduler --tool-call-parser)
// overrides.
//
// Special tokens: [TOOL_CALLS] (Mistral) and <|python_tag|> (Llama) are control tokens, which
// the detokenizer does not render; the caller must render the tokens listed in
// ToolCallSyntax::special_markers as their text for the parser to see them (and a grammar that
// contains them must let the matcher produce the token for that text). Qwen's <tool_call> and
// <think> are ordinary added tokens and arrive as text.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pagoda::scheduler::text {

enum class ToolCallFormat { kNone, kLlama3Json, kHermes, kMistral };

// "none", "llama3_json", "hermes", "mistral".
std::string_view ToolCallFormatName(ToolCallFormat format);

// The rules in this header's comment.
ToolCallFormat DetectToolCallFormat(std::string_view chat_template);

// The --tool-call-parser value: "auto" gives nullopt (detect from the template); "none",
// "llama3_json", "hermes", "mistral" their format; also accepted as aliases: "llama3"
// (llama3_json), "qwen" and "qwen3" (hermes). Anything else is InvalidArgument naming the
// accepted values.
absl::StatusOr<std::optional<ToolCallFormat>> ParseToolCallFormatFlag(std::string_view value);

// Whether a rendered prompt leaves the model inside a reasoning block: its last "<think>" comes
// after its last "</think>" (Qwen3 and DeepSeek-R1 templates open the block in the prompt).
// Feeds OutputParser::Options::starts_in_reasoning.
bool PromptOpensReasoning(std::string_view rendered_prompt);

// The markup of one format, as its chat template writes it. The parser matches the trimmed
// markers and allows any whitespace around them; the grammar writes these strings exactly.
struct ToolCallSyntax {
  ToolCallFormat format = ToolCallFormat::kNone;
  std::string_view section_open;   // once before the calls: "[TOOL_CALLS][" (mistral)
  std::string_view section_close;  // once after the calls: "]" (mistral)
  std::string_view call_open;      // before each call: "<tool_call>\n" (hermes)
  std::string_view call_close;     // after each call: "\n</tool_call>" (hermes)
  std::string_view separator;      // between calls: "\n", ", ", "; "
  std::string_view arguments_key;  // "parameters" (llama3_json) or "arguments"
  // Llama: a call may open the output with no marker at all (a bare JSON object there), or
  // follow this optional tag anywhere.
  bool bare_json_at_start = false;
  std::string_view optional_tag;  // "<|python_tag|>" (llama3_json)
  // Markers that are control tokens in the format's vocabularies (see the header's comment).
  std::vector<std::string_view> special_markers;
};

// The syntax of `format` (kNone: every field empty).
const ToolCallSyntax& SyntaxOf(ToolCallFormat format);

// ---- Grammar for "the model must call one of these tools" ----
//
// GBNF as llama.cpp's grammars/README.md defines it: `name ::= body` rules (a body may go on
// over lines inside parentheses or after "|"), "..." literals with backslash escapes, [...]
// classes, `#` comments to the end of the line, repetition ?, *, +, {m}, {m,}, {m,n}. Rule
// names here are [A-Za-z0-9_-]+; the names this code makes use only letters, digits and "-".

// Renames every rule of `gbnf` (definitions and references) to `prefix` + name, leaving
// literals, classes, comments and repetition counts alone. Errors: an unterminated literal or
// class, no `root` rule, a reference to a rule that is not defined, a prefix that is not a
// valid start of a rule name.
absl::StatusOr<std::string> PrefixGbnfRules(std::string_view gbnf, std::string_view prefix);

// A tool whose arguments grammar is already among the rules: `arguments_rule` matches the JSON
// text of its arguments object.
struct ToolRule {
  std::string name;            // the function's name (any text; escaped here)
  std::string arguments_rule;  // a rule name defined elsewhere in the final grammar
};

// `root` and its helper rules (named root, call, call-<i>), without the argument rules: the
// output is one call of one of `tools` (several, separated as the format does, when
// `parallel`), in the format's syntax, and nothing else. InvalidArgument for kNone or no tools.
absl::StatusOr<std::string> ToolCallRootGbnf(ToolCallFormat format, std::span<const ToolRule> tools,
                                             bool parallel);

// A tool with its arguments grammar as JsonSchemaToGbnf writes it: a full GBNF grammar whose
// `root` matches the arguments object.
struct ToolGrammar {
  std::string name;
  std::string arguments_gbnf;
};

// The full grammar: ToolCallRootGbnf plus each tool's arguments grammar with its rules prefixed
// "t<i>-" (so `root` of tool i is `t<i>-root`). Errors as PrefixGbnfRules, naming the tool.
absl::StatusOr<std::string> ToolCallGbnf(ToolCallFormat format, std::span<const ToolGrammar> tools,
                                         bool parallel);

}  // namespace pagoda::scheduler::text
