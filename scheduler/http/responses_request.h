// ParseResponsesRequest: the JSON body of POST /v1/responses (OpenAI's Responses API), as a chat
// request (OpenAiRequest: the generation fields, tools and constraint) plus what the Responses
// API adds: the input items, instructions, the conversation to continue, storage and the
// settings the answer repeats.
//
// Contract: never crashes on any input; refuses with a 400 naming the field (RequestReader):
//  * anything that would change the result and is not served here: built-in tools (web search,
//    file search, computer use, code interpreter, image generation, MCP, ...), background mode,
//    stored prompts, the Conversations API, image, audio and file inputs, include entries,
//    truncation "auto", top_logprobs, reasoning settings, unknown fields;
//  * malformed input items, tools, tool_choice (a function not among the tools) or text.format.
// Ranges shared with the other APIs (temperature, top_p, prompt length, ...) are checked by
// GenerationService::Validate, as for chat. Defaults follow OpenAI: store true, temperature 1,
// max_output_tokens up to the context.
//
// ConversationTurns turns input items into the chat template's messages (see there). The front
// end resolves previous_response_id and item_reference items before calling it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"
#include "scheduler/http/api_error.h"
#include "scheduler/http/openai_request.h"

namespace pagoda::scheduler::http {

struct ResponsesRequest {
  // The generation as a chat request: sampling, max_output_tokens as max_tokens, stream, the
  // tools in the chat form the template renders, tool_choice, parallel_tool_calls, text.format
  // as the constraint. Its messages stay empty: the front end renders the conversation.
  OpenAiRequest chat;
  // This request's input as an array of items (a string input is one user message item).
  nlohmann::ordered_json input = nlohmann::ordered_json::array();
  std::optional<std::string> instructions;
  std::string previous_response_id;  // empty: none
  bool store = true;
  // The settings the response object repeats, in OpenAI's order and defaults: instructions,
  // max_output_tokens, max_tool_calls, metadata, parallel_tool_calls, previous_response_id,
  // reasoning, store, temperature, text, tool_choice, tools, top_p, truncation, user.
  nlohmann::ordered_json echo = nlohmann::ordered_json::object();
};

// Parses `body`; on failure returns the 400 to send.
std::optional<ApiError> ParseResponsesRequest(std::string_view body, ResponsesRequest* out);

// Checks one input item (`where` names it in errors, e.g. "input[2]"): a message {"role",
// "content"} (type "message" optional; content a string or input_text / output_text parts), a
// function_call {"call_id", "name", "arguments"}, a function_call_output {"call_id", "output"},
// a reasoning item, or an item_reference {"id"}.
std::optional<ApiError> CheckInputItem(const nlohmann::ordered_json& item,
                                       const std::string& where);

// The chat turns of `items` (item_reference items resolved), after a system turn holding
// `instructions` when set: a message is a turn of its role with its text parts joined; a
// function_call joins the assistant turn just before it (one turn with content and several
// calls, as a chat model writes them) or starts one (content "", never null); a
// function_call_output is a tool turn naming its call and the call's function; a reasoning item's
// text is the reasoning_content of the assistant turn that follows it. A malformed item is a 400
// naming `param`[i].
std::optional<ApiError> ConversationTurns(const nlohmann::ordered_json& items,
                                          const std::optional<std::string>& instructions,
                                          const std::string& param, std::vector<ChatTurn>* out);

}  // namespace pagoda::scheduler::http
