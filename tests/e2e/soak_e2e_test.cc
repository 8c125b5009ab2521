// End-to-end soak: several thousand requests in waves against one scheduler and two CPU
// workers with small KV arenas (so that sequences are preempted too), a fifth of them cancelled
// by the client at a random time, a fifth once a random number of tokens arrived, a fifth with
// a short random deadline. Every stream ends with OK, CANCELLED or DEADLINE_EXCEEDED as its plan
// allows; every page pool is free after every wave; and the resident memory of the scheduler
// and of the workers does not grow between the end of the warm-up waves and the end of the
// last wave.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/e2e/cluster.h"
#include "tests/e2e/stream_driver.h"

namespace pagoda::testing {
namespace {

namespace v1 = pagoda::v1;

constexpr int kWaves = 24;
constexpr int kWarmupWaves = 4;  // RSS is compared from the end of these to the end
constexpr int kPerWave = 250;
constexpr int kVocab = 600;
// Resident memory may grow by at most this between the end of the warm-up and the end. The
// scheduler's grows a few MiB over the 20 measured waves as allocator caches fill, and levels
// off ~7 MiB above the warm-up level (measured over 150 waves); a leak of 2 KiB per request (a
// fraction of a sequence's state) would cross the bound.
constexpr int64_t kRssGrowthBoundKiB = 16 * 1024;

enum class Fate { kComplete, kCancelAtTime, kCancelAtToken, kDeadline };

struct Planned {
  StreamPlan plan;
  Fate fate = Fate::kComplete;
};

std::vector<Planned> MakeWave(std::mt19937& rng, int wave) {
  std::uniform_int_distribution<int32_t> token(3, kVocab - 1);
  std::uniform_int_distribution<int> prompt_len(2, 40), max_tokens(1, 48), fate(0, 9);
  // Deadlines shorter than most requests take even on a fast, idle machine (the stored-type CPU
  // kernels finish many requests of a wave in under 0.1 s), so that a good share of them is hit:
  // in the queue, in prefill and in decode.
  std::uniform_int_distribution<int> cancel_ms(0, 400), cancel_tokens(1, 12), deadline_ms(1, 80);
  std::vector<Planned> out(kPerWave);
  for (int i = 0; i < kPerWave; ++i) {
    Planned& p = out[i];
    v1::GenerateRequest& r = p.plan.request;
    r.mutable_token_ids()->add_ids(1);
    for (int t = prompt_len(rng); t > 1; --t) r.mutable_token_ids()->add_ids(token(rng));
    r.set_max_tokens(max_tokens(rng));
    r.set_ignore_eos(i % 2 == 0);
    if (i % 3 == 0) {
      r.mutable_sampling()->set_temperature(0.8f);
      r.mutable_sampling()->set_top_k(20);
      r.mutable_sampling()->set_seed(rng());
    }
    r.set_request_id(absl::StrCat("soak-", wave, "-", i));
    p.plan.deadline = absl::Seconds(60);
    switch (const int f = fate(rng); f) {
      case 0:
      case 1:
        p.fate = Fate::kCancelAtTime;
        p.plan.cancel_after = absl::Milliseconds(cancel_ms(rng));
        break;
      case 2:
      case 3:
        p.fate = Fate::kCancelAtToken;
        p.plan.cancel_after_tokens = cancel_tokens(rng);
        break;
      case 4:
      case 5:
        p.fate = Fate::kDeadline;
        p.plan.deadline = absl::Milliseconds(deadline_ms(rng));
        break;
      default:
        p.fate = Fate::kComplete;
    }
  }
  return out;
}

// Checks one stream's end against its plan; counts outcomes. Returns false (with a failure)
// for an end its plan does not allow.
bool CheckStream(const Planned& p, const StreamResult& r, std::map<std::string, int>& counts) {
  const uint32_t max_tokens = p.plan.request.max_tokens();
  switch (r.status.error_code()) {
    case grpc::StatusCode::OK:
      ++counts["ok"];
      // A completed stream is whole, whatever its plan (a cancel may come too late).
      if (!r.finished || r.finished->usage().completion_tokens() != r.tokens.size() ||
          r.tokens.size() > max_tokens ||
          (r.tokens.empty() && r.finished->reason() != v1::FINISH_REASON_EOS) ||
          (p.plan.request.ignore_eos() && r.tokens.size() != max_tokens)) {
        ADD_FAILURE() << p.plan.request.request_id() << ": OK with " << r.tokens.size()
                      << " tokens of " << max_tokens << ", finished "
                      << (r.finished ? r.finished->DebugString() : "missing");
        return false;
      }
      return true;
    case grpc::StatusCode::CANCELLED:
      ++counts["cancelled"];
      if (p.fate == Fate::kCancelAtTime || p.fate == Fate::kCancelAtToken) return true;
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      ++counts["deadline"];
      if (p.fate == Fate::kDeadline) return true;
      break;
    default:
      break;
  }
  ADD_FAILURE() << p.plan.request.request_id() << ": unexpected status "
                << static_cast<int>(r.status.error_code()) << " \"" << r.status.error_message()
                << "\" for plan " << static_cast<int>(p.fate);
  return false;
}

struct Memory {
  int64_t scheduler = 0;
  int64_t worker0 = 0;
  int64_t worker1 = 0;
};

Memory Measure(Cluster& c) {
  return {ResidentKiB(c.scheduler().pid()), ResidentKiB(c.worker(0).pid()),
          ResidentKiB(c.worker(1).pid())};
}

TEST(SoakE2eTest, CancellationsAndDeadlinesLeakNothing) {
  const std::string dir = MakeTempDir("soak");
  std::string error;
  ASSERT_TRUE(MakeRandomModel(
      dir + "/model.gguf",
      {"--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ffn-dim", "128",
       "--vocab", std::to_string(kVocab), "--context", "256", "--seed", "13"},
      &error))
      << error;
  ClusterOptions options;
  options.model = dir + "/model.gguf";
  options.workers = 2;
  options.scheduler_flags = {"--max-queued-requests", "4096", "--max-running",       "128",
                             "--max-batch-tokens",    "1024", "--max-prefill-chunk", "64",
                             "--worker-timeout",      "30",   "--log-level",         "warning"};
  // 128 pages of 8 tokens per worker: the ~125 sequences of up to 88 tokens a worker gets per
  // wave do not fit, so the scheduler preempts and recomputes (hundreds of times), and
  // cancellations and deadlines hit preempted sequences too.
  options.worker_flags = {"--threads", "1", "--kv-pages", "128", "--page-size", "8"};
  std::unique_ptr<Cluster> cluster = Cluster::Start(options, &error);
  ASSERT_NE(cluster, nullptr) << error;
  auto stubs = MakeStubs(cluster->address(), 4);
  std::vector<v1::Generation::Stub*> stub_ptrs;
  for (auto& s : stubs) stub_ptrs.push_back(s.get());

  std::mt19937 rng(2024);
  std::map<std::string, int> counts;
  Memory warm, end;
  int bad = 0;
  const absl::Time start = absl::Now();
  for (int wave = 0; wave < kWaves; ++wave) {
    const std::vector<Planned> planned = MakeWave(rng, wave);
    std::vector<StreamPlan> plans;
    for (const Planned& p : planned) plans.push_back(p.plan);
    const std::vector<StreamResult> results = RunStreams(stub_ptrs, plans);
    for (size_t i = 0; i < results.size() && bad < 10; ++i) {
      bad += !CheckStream(planned[i], results[i], counts);
    }
    ASSERT_TRUE(cluster->WaitIdleAndFree(absl::Seconds(20)))
        << "wave " << wave << ": pools not free\n"
        << cluster->Status().DebugString();
    ASSERT_EQ(cluster->Status().workers_size(), 2) << cluster->Logs();
    if (wave == kWarmupWaves - 1) warm = Measure(*cluster);
  }
  end = Measure(*cluster);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const v1::ServerStatus status = cluster->Status();
  std::printf(
      "soak: %d requests in %.1f s: %d ok, %d cancelled, %d deadline exceeded; preemptions %d; "
      "RSS KiB after warm-up / at the end: scheduler %d / %d, worker0 %d / %d, worker1 %d / %d\n",
      kWaves * kPerWave, seconds, counts["ok"], counts["cancelled"], counts["deadline"],
      static_cast<int>(status.preemptions_total()), static_cast<int>(warm.scheduler),
      static_cast<int>(end.scheduler), static_cast<int>(warm.worker0),
      static_cast<int>(end.worker0), static_cast<int>(warm.worker1), static_cast<int>(end.worker1));
  RecordProperty("requests", kWaves * kPerWave);
  RecordProperty("scheduler_rss_growth_kib", absl::StrCat(end.scheduler - warm.scheduler));
  RecordProperty("preemptions", absl::StrCat(status.preemptions_total()));

  EXPECT_EQ(bad, 0);
  // Every kind of end happened, many times.
  EXPECT_GT(counts["ok"], kWaves * kPerWave / 4);
  EXPECT_GT(counts["cancelled"], kWaves * kPerWave / 10);
  EXPECT_GT(counts["deadline"], kWaves * kPerWave / 20);
  for (const auto& w : status.workers()) EXPECT_EQ(w.kv_pages_free(), w.kv_pages_total());
  EXPECT_LT(end.scheduler - warm.scheduler, kRssGrowthBoundKiB);
  EXPECT_LT(end.worker0 - warm.worker0, kRssGrowthBoundKiB);
  EXPECT_LT(end.worker1 - warm.worker1, kRssGrowthBoundKiB);
}

}  // namespace
}  // namespace pagoda::testing
