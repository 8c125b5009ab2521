// ResponseStore: the stored responses of the Responses API (POST /v1/responses with "store"), in
// an embedded SQLite database: a file (--responses-db), which keeps them across restarts, or a
// private in-memory database when no path is given.
//
// Each row is one response and stands alone: its owner (the tenant that made it), its creation
// time, its conversation (every input item the model saw: the conversation and output of the
// response it continued, then the request's own input; instructions are not part of it, as on
// OpenAI) and the response object as it was answered. Continuing a response needs its row alone,
// so deleting or evicting an earlier response never breaks a later one. The response's output
// items are indexed by their ids too, for "item_reference" input items.
//
// Limits (StoreLimits): rows, bytes (the conversation's and the response's JSON text) and age.
// Put evicts the oldest rows until the new one fits; a row older than max_age is invisible and
// goes at the next Put. A response larger than max_bytes alone is not kept (Put says so).
//
// Owners: every lookup names the owner, and a row of another owner is "not found", never a
// different answer, so a tenant cannot even learn that another tenant's id exists.
//
// Hostile or foreign files: Open refuses a file that is not an SQLite database or whose tables
// are not this schema, naming the path; a row whose JSON does not parse reads as not found (and
// is logged), never as a crash.
//
// Threads: thread-safe (one connection behind one mutex). Calls are short: a file database runs
// in WAL mode with synchronous=NORMAL (a commit does not wait for the disk).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

struct sqlite3;

namespace pagoda::scheduler::http {

struct StoreLimits {
  int64_t max_rows = 10000;
  int64_t max_bytes = int64_t{1} << 30;
  int64_t max_age_s = 30 * 24 * 3600;  // 0 = no age limit
};

// One stored response.
struct StoredResponse {
  nlohmann::ordered_json conversation;  // array of input items
  nlohmann::ordered_json response;      // the response object
};

class ResponseStore {
 public:
  // Opens (creating when needed) the database at `path`; empty: in memory.
  static absl::StatusOr<std::unique_ptr<ResponseStore>> Open(const std::string& path,
                                                             StoreLimits limits);
  ~ResponseStore();
  ResponseStore(const ResponseStore&) = delete;
  ResponseStore& operator=(const ResponseStore&) = delete;

  // Stores response `id` of `owner` made at `now` (Unix seconds), with its output items indexed
  // by their "id". Replaces a row of the same id. FAILED_PRECONDITION when it alone exceeds
  // max_bytes; INTERNAL for a database failure.
  absl::Status Put(std::string_view id, std::string_view owner, int64_t now,
                   const StoredResponse& stored);
  // Response `id` of `owner`; nullopt when absent, deleted, expired or another owner's.
  std::optional<StoredResponse> Get(std::string_view id, std::string_view owner, int64_t now);
  // Deletes response `id` of `owner`; false when Get would not have found it.
  bool Delete(std::string_view id, std::string_view owner, int64_t now);
  // The output item `item_id` of a response of `owner`; nullopt as for Get.
  std::optional<nlohmann::ordered_json> Item(std::string_view item_id, std::string_view owner,
                                             int64_t now);

  // What is kept now (tests, logs).
  int64_t rows();
  int64_t bytes();

 private:
  ResponseStore(sqlite3* db, StoreLimits limits) : db_(db), limits_(limits) {}
  // Runs `sql` (no results); INTERNAL naming `what` on failure.
  absl::Status Exec(const char* sql, const char* what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops rows older than max_age and the oldest ones until `incoming` more bytes and one more
  // row fit, keeping rows_ and bytes_ exact.
  absl::Status MakeRoom(int64_t incoming, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Recount() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t Oldest(int64_t now) const;  // rows created before this are expired

  absl::Mutex mu_;
  sqlite3* const db_;  // owned; closed by the destructor
  const StoreLimits limits_;
  int64_t rows_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// The owner of what a request stores: the API key's tenant when it has one, else a digest of
// the key (so the database never holds a key); "" when the server has no keys.
std::string StoreOwner(std::string_view key, std::string_view tenant);

}  // namespace pagoda::scheduler::http
