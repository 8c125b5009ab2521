// Tenants at the front ends: the name rule, --tenant-weights, --api-key-file with tenants, the
// policy flags' values, and the retry-after of a predicted-wait refusal. Every refusal names
// the file, the line and what was wrong.
#include "scheduler/service/tenants.h"

#include <gtest/gtest.h>

#include "absl/strings/cord.h"
#include "scheduler/service/generation_service.h"
#include "tests/support/status_assertions.h"

namespace pagoda::scheduler {
namespace {

void ExpectInvalid(const absl::Status& status, const std::string& message) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find(message), std::string::npos) << status;
}

TEST(TenantsTest, NamesAreOneTo64BytesOfASafeAlphabet) {
  for (const char* good : {"default", "a", "team-a", "org:team.prod_1", "A-Z.0:9_"}) {
    EXPECT_OK(CheckTenantName(good, "tenant")) << good;
  }
  EXPECT_OK(CheckTenantName(std::string(64, 'x'), "tenant"));
  ExpectInvalid(CheckTenantName("", "tenant"),
                "tenant must be 1 to 64 bytes of [A-Za-z0-9._:-]; got 0 bytes");
  ExpectInvalid(CheckTenantName(std::string(65, 'x'), "tenant"), "got 65 bytes");
  ExpectInvalid(CheckTenantName("team a", "the X-Pagoda-Tenant header"),
                "the X-Pagoda-Tenant header must be 1 to 64 bytes of [A-Za-z0-9._:-]; got byte "
                "0x20 at offset 4");
  ExpectInvalid(CheckTenantName("t\xc3\xa9", "tenant"), "byte 0xc3 at offset 1");
  ExpectInvalid(CheckTenantName("a\"b", "tenant"), "byte 0x22 at offset 1");
}

TEST(TenantsTest, WeightsFileWithCommentsAndBlankLines) {
  absl::StatusOr<absl::flat_hash_map<std::string, double>> w = ParseTenantWeights(
      "# fair share\n\nteam-a 3\n  team-b\t0.5   # half\r\nbatch 1e-3\n", "w.txt");
  ASSERT_OK(w);
  EXPECT_EQ(w->size(), 3u);
  EXPECT_EQ(w->at("team-a"), 3);
  EXPECT_EQ(w->at("team-b"), 0.5);
  EXPECT_EQ(w->at("batch"), 1e-3);
  ASSERT_OK(ParseTenantWeights("", "w.txt")) << "an empty file names no tenant";
}

TEST(TenantsTest, WeightsFileRefusesBadLinesByNumber) {
  ExpectInvalid(ParseTenantWeights("a 1\nb\n", "w.txt").status(),
                "--tenant-weights w.txt line 2: expected \"TENANT WEIGHT\", got 1 fields");
  ExpectInvalid(ParseTenantWeights("a 1 2\n", "w.txt").status(), "line 1: expected");
  ExpectInvalid(ParseTenantWeights("a 0\n", "w.txt").status(),
                "line 1: the weight of tenant a must be a finite number > 0, got \"0\"");
  ExpectInvalid(ParseTenantWeights("a -2\n", "w.txt").status(), "got \"-2\"");
  ExpectInvalid(ParseTenantWeights("a inf\n", "w.txt").status(), "got \"inf\"");
  ExpectInvalid(ParseTenantWeights("a heavy\n", "w.txt").status(), "got \"heavy\"");
  ExpectInvalid(ParseTenantWeights("\n\nbad/name 1\n", "w.txt").status(),
                "--tenant-weights w.txt line 3: the tenant name must be 1 to 64 bytes");
  ExpectInvalid(ParseTenantWeights("a 1\na 2\n", "w.txt").status(),
                "line 2: tenant a is named a second time");
}

TEST(TenantsTest, ApiKeyFileOfOneKeyReadsAsBefore) {
  for (const char* text : {"sesame", "sesame\n", "  sesame \r\n\n"}) {
    absl::StatusOr<std::vector<ApiKey>> keys = ParseApiKeys(text, "k.txt");
    ASSERT_OK(keys);
    ASSERT_EQ(keys->size(), 1u);
    EXPECT_EQ(keys->at(0).key, "sesame");
    EXPECT_EQ(keys->at(0).tenant, "");
  }
}

TEST(TenantsTest, ApiKeysMayNameTheirTenant) {
  absl::StatusOr<std::vector<ApiKey>> keys =
      ParseApiKeys("# keys\nk1 tenant=team-a\n\nk2\nk3\ttenant=batch\n", "k.txt");
  ASSERT_OK(keys);
  ASSERT_EQ(keys->size(), 3u);
  EXPECT_EQ(keys->at(0).key, "k1");
  EXPECT_EQ(keys->at(0).tenant, "team-a");
  EXPECT_EQ(keys->at(1).key, "k2");
  EXPECT_EQ(keys->at(1).tenant, "");
  EXPECT_EQ(keys->at(2).tenant, "batch");
}

TEST(TenantsTest, ApiKeyFileRefusesBadLinesByNumber) {
  ExpectInvalid(ParseApiKeys("", "k.txt").status(), "--api-key-file k.txt holds no key");
  ExpectInvalid(ParseApiKeys("# only a comment\n", "k.txt").status(), "holds no key");
  ExpectInvalid(ParseApiKeys("k1\nk1 tenant=a\n", "k.txt").status(),
                "--api-key-file k.txt line 2: this key is given a second time");
  const absl::Status split = ParseApiKeys("k1 secret-part\n", "k.txt").status();
  ExpectInvalid(split, "line 1: the field after the key must be tenant=NAME");
  EXPECT_EQ(split.message().find("secret-part"), std::string::npos) << "never echoed";
  ExpectInvalid(ParseApiKeys("k1 tenant=\n", "k.txt").status(),
                "line 1: the tenant name must be 1 to 64 bytes of [A-Za-z0-9._:-]; got 0 bytes");
  ExpectInvalid(ParseApiKeys("k1 tenant=a b\n", "k.txt").status(),
                "line 1: expected \"KEY\" or \"KEY tenant=NAME\", got 3 fields");
}

TEST(TenantsTest, PolicyFlagValues) {
  EXPECT_EQ(*ParseFairness("vtc"), Fairness::kVtc);
  EXPECT_EQ(*ParseFairness("none"), Fairness::kNone);
  ExpectInvalid(ParseFairness("fifo").status(), "--fairness must be vtc or none, got \"fifo\"");
  EXPECT_EQ(*ParsePreemptionMode("auto"), PreemptionMode::kAuto);
  EXPECT_EQ(*ParsePreemptionMode("recompute"), PreemptionMode::kRecompute);
  EXPECT_EQ(*ParsePreemptionMode("swap"), PreemptionMode::kSwap);
  ExpectInvalid(ParsePreemptionMode("Swap").status(),
                "--preemption-mode must be auto, recompute or swap, got \"Swap\"");
}

// Only a RESOURCE_EXHAUSTED carrying the core's payload has a retry-after.
TEST(TenantsTest, RetryAfterComesFromThePredictedWaitPayload) {
  absl::Status refused = absl::ResourceExhaustedError("predicted wait too long");
  EXPECT_FALSE(RetryAfterSeconds(refused)) << "a full queue has none";
  refused.SetPayload(kRetryAfterPayload, absl::Cord("7"));
  EXPECT_EQ(RetryAfterSeconds(refused), 7);
  refused.SetPayload(kRetryAfterPayload, absl::Cord("0"));
  EXPECT_FALSE(RetryAfterSeconds(refused)) << "at least 1 second";
  refused.SetPayload(kRetryAfterPayload, absl::Cord("soon"));
  EXPECT_FALSE(RetryAfterSeconds(refused));
  absl::Status other = absl::UnavailableError("draining");
  other.SetPayload(kRetryAfterPayload, absl::Cord("7"));
  EXPECT_FALSE(RetryAfterSeconds(other)) << "RESOURCE_EXHAUSTED only";
}

}  // namespace
}  // namespace pagoda::scheduler
