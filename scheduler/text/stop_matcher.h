// StopMatcher: finds stop strings in streamed text, across token boundaries.
//
// Text goes in as the detokenizer releases it; what comes out is safe to send: it holds back
// the longest tail that could still be the start of a stop string. On a match it returns the
// text before the match and reports which string matched; the match and what follows are
// never sent. Held-back text always starts at a UTF-8 character boundary (stop strings are
// valid UTF-8, so a tail equal to a stop's prefix starts with a lead byte).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pagoda::scheduler::text {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string text;  // safe to send now
    bool matched = false;
    std::string stop;  // the stop string that matched
  };
  Result Push(std::string_view text);
  // End of generation without a match: everything held back.
  std::string Flush();

 private:
  std::vector<std::string> stops_;
  std::string held_;
};

}  // namespace pagoda::scheduler::text
