#include "scheduler/http/response_store.h"

#include <openssl/evp.h>
#include <sqlite3.h>

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace pagoda::scheduler::http {
namespace {

using nlohmann::ordered_json;

// The tables. Items cascade with their response (foreign_keys is turned on per connection).
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS responses (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  owner TEXT NOT NULL,
  created INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  conversation TEXT NOT NULL,
  response TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS items (
  id TEXT PRIMARY KEY,
  response_seq INTEGER NOT NULL REFERENCES responses(seq) ON DELETE CASCADE,
  item TEXT NOT NULL
);
)sql";
// After the tables are known to be Pagoda's.
constexpr const char* kIndexes = R"sql(
CREATE INDEX IF NOT EXISTS items_by_response ON items(response_seq);
CREATE INDEX IF NOT EXISTS responses_by_created ON responses(created);
)sql";

// A prepared statement, finalized when it goes out of scope.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK) stmt_ = nullptr;
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  bool ok() const { return stmt_ != nullptr; }
  Statement& Bind(int i, std::string_view text) {
    sqlite3_bind_text(stmt_, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& Bind(int i, int64_t value) {
    sqlite3_bind_int64(stmt_, i, value);
    return *this;
  }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return stmt_ == nullptr ? SQLITE_ERROR : sqlite3_step(stmt_); }
  int64_t Int(int column) const { return sqlite3_column_int64(stmt_, column); }
  std::string Text(int column) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
    return p == nullptr ? std::string() : std::string(p, sqlite3_column_bytes(stmt_, column));
  }
  std::string Error() const { return sqlite3_errmsg(db_); }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

// `text` parsed; nullopt (logged) when a row holds something that is not JSON.
std::optional<ordered_json> ParseStored(const std::string& text, std::string_view what) {
  ordered_json value = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    PAGODA_LOG(kWarning, "http", "the responses database holds a %s that is not JSON; ignored",
               std::string(what));
    return std::nullopt;
  }
  return value;
}

std::string DumpJson(const ordered_json& value) {
  return value.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

}  // namespace

std::string StoreOwner(std::string_view key, std::string_view tenant) {
  if (!tenant.empty()) return absl::StrCat("tenant:", std::string(tenant));
  if (key.empty()) return "";
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(key.data(), key.size(), digest, &size, EVP_sha256(), nullptr);
  return absl::StrCat("key:", absl::BytesToHexString(
                                  absl::string_view(reinterpret_cast<const char*>(digest), size)));
}

absl::StatusOr<std::unique_ptr<ResponseStore>> ResponseStore::Open(const std::string& path,
                                                                   StoreLimits limits) {
  const std::string name = path.empty() ? ":memory:" : path;
  const std::string what =
      path.empty() ? "the in-memory responses database" : absl::StrCat("--responses-db ", path);
  sqlite3* db = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX;
  if (sqlite3_open_v2(name.c_str(), &db, flags, nullptr) != SQLITE_OK) {
    std::string error = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::InvalidArgumentError(absl::StrCat("cannot open ", what, ": ", error));
  }
  std::unique_ptr<ResponseStore> store(new ResponseStore(db, limits));
  absl::MutexLock lock(&store->mu_);
  // Waits out another connection's write lock (a second process on the file) up to 5 s.
  sqlite3_busy_timeout(db, 5000);
  // A file that is not a database fails at its first read: these statements.
  const char* setup = path.empty() ? "PRAGMA foreign_keys=ON;"
                                   : "PRAGMA foreign_keys=ON; PRAGMA journal_mode=WAL; "
                                     "PRAGMA synchronous=NORMAL;";
  char* error = nullptr;
  if (sqlite3_exec(db, setup, nullptr, nullptr, &error) != SQLITE_OK ||
      sqlite3_exec(db, kSchema, nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error != nullptr ? error : "unknown error";
    sqlite3_free(error);
    return absl::InvalidArgumentError(
        absl::StrCat("cannot use ", what, " as the responses database: ", message));
  }
  // Tables of the same names from something else lack these columns.
  Statement responses(db,
                      "SELECT seq, id, owner, created, bytes, conversation, response FROM "
                      "responses LIMIT 0");
  Statement items(db, "SELECT id, response_seq, item FROM items LIMIT 0");
  if (!responses.ok() || !items.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " holds tables named responses or items that are not Pagoda's: ", responses.Error()));
  }
  if (absl::Status s = store->Exec(kIndexes, "indexing"); !s.ok()) return s;
  if (absl::Status s = store->Recount(); !s.ok()) return s;
  return store;
}

ResponseStore::~ResponseStore() { sqlite3_close(db_); }

absl::Status ResponseStore::Exec(const char* sql, const char* what) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &error) == SQLITE_OK) return absl::OkStatus();
  std::string message = error != nullptr ? error : "unknown error";
  sqlite3_free(error);
  return absl::InternalError(absl::StrCat("responses database: ", what, ": ", message));
}

absl::Status ResponseStore::Recount() {
  Statement count(db_, "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM responses");
  if (count.Step() != SQLITE_ROW) {
    return absl::InternalError(absl::StrCat("responses database: counting: ", count.Error()));
  }
  rows_ = count.Int(0);
  bytes_ = count.Int(1);
  return absl::OkStatus();
}

int64_t ResponseStore::Oldest(int64_t now) const {
  return limits_.max_age_s > 0 ? now - limits_.max_age_s : INT64_MIN;
}

absl::Status ResponseStore::MakeRoom(int64_t incoming, int64_t now) {
  Statement expire(db_, "DELETE FROM responses WHERE created < ?");
  if (expire.Bind(1, Oldest(now)).Step() != SQLITE_DONE) {
    return absl::InternalError(absl::StrCat("responses database: expiring: ", expire.Error()));
  }
  // rows_ and bytes_ stay exact otherwise: a Put without expiries scans nothing.
  if (sqlite3_changes(db_) > 0) RETURN_IF_ERROR(Recount());
  while (rows_ > 0 && (rows_ + 1 > limits_.max_rows || bytes_ + incoming > limits_.max_bytes)) {
    Statement oldest(db_, "SELECT seq, bytes FROM responses ORDER BY seq LIMIT 1");
    if (oldest.Step() != SQLITE_ROW) break;
    const int64_t seq = oldest.Int(0);
    const int64_t bytes = oldest.Int(1);
    Statement drop(db_, "DELETE FROM responses WHERE seq = ?");
    if (drop.Bind(1, seq).Step() != SQLITE_DONE) {
      return absl::InternalError(absl::StrCat("responses database: evicting: ", drop.Error()));
    }
    rows_ -= 1;
    bytes_ -= bytes;
  }
  return absl::OkStatus();
}

absl::Status ResponseStore::Put(std::string_view id, std::string_view owner, int64_t now,
                                const StoredResponse& stored) {
  const std::string conversation = DumpJson(stored.conversation);
  const std::string response = DumpJson(stored.response);
  const int64_t bytes = static_cast<int64_t>(conversation.size() + response.size());
  if (bytes > limits_.max_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("the response and its conversation take ", bytes,
                     " bytes, more than --responses-max-bytes ", limits_.max_bytes));
  }
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Exec("BEGIN IMMEDIATE", "beginning"); !s.ok()) return s;
  absl::Status status = [&]() -> absl::Status {
    Statement replace(db_, "DELETE FROM responses WHERE id = ?");
    if (replace.Bind(1, id).Step() != SQLITE_DONE) {
      return absl::InternalError(absl::StrCat("responses database: replacing: ", replace.Error()));
    }
    if (sqlite3_changes(db_) > 0) RETURN_IF_ERROR(Recount());
    RETURN_IF_ERROR(MakeRoom(bytes, now));
    Statement insert(db_,
                     "INSERT INTO responses (id, owner, created, bytes, conversation, response) "
                     "VALUES (?, ?, ?, ?, ?, ?)");
    insert.Bind(1, id).Bind(2, owner).Bind(3, now).Bind(4, bytes);
    insert.Bind(5, conversation).Bind(6, response);
    if (insert.Step() != SQLITE_DONE) {
      return absl::InternalError(absl::StrCat("responses database: inserting: ", insert.Error()));
    }
    const int64_t seq = sqlite3_last_insert_rowid(db_);
    auto output = stored.response.find("output");
    if (output != stored.response.end() && output->is_array()) {
      for (const ordered_json& item : *output) {
        auto item_id = item.find("id");
        if (item_id == item.end() || !item_id->is_string()) continue;
        Statement add(db_,
                      "INSERT OR REPLACE INTO items (id, response_seq, item) VALUES (?, ?, ?)");
        add.Bind(1, item_id->get<std::string>()).Bind(2, seq).Bind(3, DumpJson(item));
        if (add.Step() != SQLITE_DONE) {
          return absl::InternalError(absl::StrCat("responses database: items: ", add.Error()));
        }
      }
    }
    rows_ += 1;
    bytes_ += bytes;
    return absl::OkStatus();
  }();
  if (!status.ok()) {
    (void)Exec("ROLLBACK", "rolling back");
    (void)Recount();
    return status;
  }
  return Exec("COMMIT", "committing");
}

std::optional<StoredResponse> ResponseStore::Get(std::string_view id, std::string_view owner,
                                                 int64_t now) {
  absl::MutexLock lock(&mu_);
  Statement get(db_,
                "SELECT conversation, response FROM responses WHERE id = ? AND owner = ? AND "
                "created >= ?");
  get.Bind(1, id).Bind(2, owner).Bind(3, Oldest(now));
  if (get.Step() != SQLITE_ROW) return std::nullopt;
  std::optional<ordered_json> conversation = ParseStored(get.Text(0), "conversation");
  std::optional<ordered_json> response = ParseStored(get.Text(1), "response");
  if (!conversation || !response || !conversation->is_array() || !response->is_object()) {
    return std::nullopt;
  }
  return StoredResponse{.conversation = *std::move(conversation), .response = *std::move(response)};
}

bool ResponseStore::Delete(std::string_view id, std::string_view owner, int64_t now) {
  absl::MutexLock lock(&mu_);
  Statement drop(db_, "DELETE FROM responses WHERE id = ? AND owner = ? AND created >= ?");
  if (drop.Bind(1, id).Bind(2, owner).Bind(3, Oldest(now)).Step() != SQLITE_DONE) return false;
  const bool deleted = sqlite3_changes(db_) > 0;
  if (deleted) (void)Recount();
  return deleted;
}

std::optional<ordered_json> ResponseStore::Item(std::string_view item_id, std::string_view owner,
                                                int64_t now) {
  absl::MutexLock lock(&mu_);
  Statement get(db_,
                "SELECT items.item FROM items JOIN responses ON items.response_seq = responses.seq "
                "WHERE items.id = ? AND responses.owner = ? AND responses.created >= ?");
  get.Bind(1, item_id).Bind(2, owner).Bind(3, Oldest(now));
  if (get.Step() != SQLITE_ROW) return std::nullopt;
  std::optional<ordered_json> item = ParseStored(get.Text(0), "item");
  if (!item || !item->is_object()) return std::nullopt;
  return item;
}

int64_t ResponseStore::rows() {
  absl::MutexLock lock(&mu_);
  return rows_;
}

int64_t ResponseStore::bytes() {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

}  // namespace pagoda::scheduler::http
