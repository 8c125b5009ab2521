#include "scheduler/text/stop_matcher.h"

#include <gtest/gtest.h>

namespace pagoda::scheduler::text {
namespace {

// Feeds `pieces` one at a time; returns what was sent and the stop matched ("" if none).
std::pair<std::string, std::string> Feed(std::vector<std::string> stops,
                                         const std::vector<std::string>& pieces) {
  StopMatcher m(std::move(stops));
  std::string sent;
  for (const std::string& p : pieces) {
    StopMatcher::Result r = m.Push(p);
    sent += r.text;
    if (r.matched) return {sent, r.stop};
  }
  return {sent + m.Flush(), ""};
}

TEST(StopMatcherTest, NoStopsPassesThrough) {
  EXPECT_EQ(Feed({}, {"a", "b"}), std::make_pair(std::string("ab"), std::string()));
}

TEST(StopMatcherTest, MatchAcrossPiecesIsNotSent) {
  EXPECT_EQ(Feed({"The end"}, {"It was fun. The", " e", "nd of it"}),
            std::make_pair(std::string("It was fun. "), std::string("The end")));
}

TEST(StopMatcherTest, HoldsOnlyWhatCouldStillMatch) {
  StopMatcher m({"xyz"});
  EXPECT_EQ(m.Push("abx").text, "ab");
  EXPECT_EQ(m.Push("q").text, "xq") << "the held x was not a stop after all";
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, EarliestOfSeveralStopsWins) {
  EXPECT_EQ(Feed({"dog", "cat"}, {"a cat and a dog"}),
            std::make_pair(std::string("a "), std::string("cat")));
}

TEST(StopMatcherTest, MultiByteStopStrings) {
  EXPECT_EQ(Feed({"ünd"}, {"a \xc3", "\xbc", "nd b"}),
            std::make_pair(std::string("a "), std::string("ünd")));
  EXPECT_EQ(Feed({"日本"}, {"x日", "y"}), std::make_pair(std::string("x日y"), std::string()));
}

}  // namespace
}  // namespace pagoda::scheduler::text
