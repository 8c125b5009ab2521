// libFuzzer target: arbitrary bytes as a chat template, parsed and rendered over a fixed
// conversation (system, user, an assistant tool call, a tool result, tools). Invariants (see
// chat_template.h): Parse and Render never crash, hang or exhaust memory (the render runs under
// small RenderLimits); every failure is InvalidArgument; a rendered prompt is well-formed UTF-8
// and within the output limit.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "scheduler/text/chat_template.h"
#include "tests/fuzz/fuzz_support.h"

namespace pagoda::fuzz {
namespace {

using scheduler::text::ChatMessage;
using scheduler::text::ChatRenderOptions;
using scheduler::text::ChatTemplate;

std::vector<ChatMessage> Conversation() {
  auto message = [](std::string role, std::string content) {
    ChatMessage m;
    m.role = std::move(role);
    m.content = std::move(content);
    return m;
  };
  std::vector<ChatMessage> messages = {message("system", "Be brief."),
                                       message("user", "Weather in Paris? é 🙂")};
  ChatMessage call = message("assistant", "");
  call.tool_calls = nlohmann::ordered_json::parse(
      R"([{"id": "call12345", "type": "function", "function": {"name": "get_weather",
          "arguments": {"location": "Paris"}}}])");
  messages.push_back(call);
  ChatMessage result = message("tool", "{\"temperature\": 21}");
  result.tool_call_id = "call12345";
  result.name = "get_weather";
  messages.push_back(result);
  messages.push_back(message("assistant", "It is 21 C."));
  return messages;
}

ChatRenderOptions Options(bool add_generation_prompt, scheduler::text::jinja::Dialect dialect) {
  ChatRenderOptions options;
  options.add_generation_prompt = add_generation_prompt;
  options.dialect = dialect;
  options.bos_token = "<s>";
  options.eos_token = "</s>";
  options.tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
          "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}}}])");
  options.now = std::chrono::system_clock::time_point(std::chrono::seconds(1722001500));
  options.limits.max_output_bytes = 64 << 10;
  options.limits.max_steps = 200'000;
  options.limits.max_range = 10'000;
  options.limits.max_call_depth = 50;
  return options;
}

void CheckInvalidArgument(const absl::Status& status, const char* what) {
  if (status.code() != absl::StatusCode::kInvalidArgument) {
    FuzzFail(absl::StrCat(what, " failed with ", status.ToString(), ", not InvalidArgument"));
  }
}

}  // namespace
}  // namespace pagoda::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pagoda::fuzz;  // NOLINT
  static const std::vector<ChatMessage> kMessages = Conversation();
  absl::StatusOr<ChatTemplate> parsed = ChatTemplate::Parse(AsText(data, size));
  if (!parsed.ok()) {
    CheckInvalidArgument(parsed.status(), "Parse");
    return 0;
  }
  // Both dialects: the input's size picks add_generation_prompt and Python or JavaScript.
  const ChatRenderOptions options =
      Options(size % 2 == 0, size % 4 < 2 ? pagoda::scheduler::text::jinja::Dialect::kPython
                                          : pagoda::scheduler::text::jinja::Dialect::kJavaScript);
  absl::StatusOr<std::string> rendered = parsed->Render(kMessages, options);
  if (!rendered.ok()) {
    CheckInvalidArgument(rendered.status(), "Render");
    return 0;
  }
  if (!pagoda::common::IsValidUtf8(*rendered)) FuzzFail("Render produced ill-formed UTF-8");
  if (rendered->size() > options.limits.max_output_bytes) {
    FuzzFail(absl::StrCat("Render produced ", rendered->size(), " bytes, over the limit"));
  }
  return 0;
}
