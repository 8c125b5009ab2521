// ResponseStore: the Responses API's stored responses in SQLite: owners never see each other's
// rows, limits evict the oldest first, a file survives a reopen, foreign files are refused.
#include "scheduler/http/response_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/status_assertions.h"

namespace pagoda::scheduler::http {
namespace {

using json = nlohmann::ordered_json;

StoredResponse Response(const std::string& id, const std::string& text) {
  return StoredResponse{
      .conversation = json::array({{{"role", "user"}, {"content", "q " + id}}}),
      .response = {{"id", id},
                   {"object", "response"},
                   {"output", json::array({{{"id", "msg_" + id},
                                            {"type", "message"},
                                            {"content", json::array({{{"type", "output_text"},
                                                                      {"text", text}}})}}})}}};
}

StoreLimits Limits(int64_t rows, int64_t bytes, int64_t age_s) {
  return StoreLimits{.max_rows = rows, .max_bytes = bytes, .max_age_s = age_s};
}
constexpr int64_t kNoLimit = int64_t{1} << 40;

std::unique_ptr<ResponseStore> Open(const std::string& path,
                                    StoreLimits limits = Limits(kNoLimit, kNoLimit, 0)) {
  absl::StatusOr<std::unique_ptr<ResponseStore>> store = ResponseStore::Open(path, limits);
  EXPECT_OK(store);
  return store.ok() ? *std::move(store) : nullptr;
}

class TempFile {
 public:
  explicit TempFile(const std::string& name)
      : path_((std::filesystem::temp_directory_path() /
               (name + "-" + std::to_string(::getpid()) + ".db"))
                  .string()) {
    Remove();
  }
  ~TempFile() { Remove(); }
  const std::string& path() const { return path_; }

 private:
  void Remove() {
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path_ + suffix).c_str());
  }
  std::string path_;
};

TEST(ResponseStoreTest, PutGetDeleteAndItemsPerOwner) {
  std::unique_ptr<ResponseStore> store = Open("");
  ASSERT_OK(store->Put("resp_1", "alice", 100, Response("resp_1", "hello")));
  std::optional<StoredResponse> got = store->Get("resp_1", "alice", 100);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->response, Response("resp_1", "hello").response);
  EXPECT_EQ(got->conversation, Response("resp_1", "hello").conversation);
  EXPECT_FALSE(store->Get("resp_1", "bob", 100)) << "another owner's response is not found";
  EXPECT_FALSE(store->Get("resp_2", "alice", 100));
  std::optional<json> item = store->Item("msg_resp_1", "alice", 100);
  ASSERT_TRUE(item);
  EXPECT_EQ((*item)["content"][0]["text"], "hello");
  EXPECT_FALSE(store->Item("msg_resp_1", "bob", 100));
  EXPECT_FALSE(store->Delete("resp_1", "bob", 100)) << "nor can it be deleted";
  EXPECT_EQ(store->rows(), 1);
  EXPECT_TRUE(store->Delete("resp_1", "alice", 100));
  EXPECT_FALSE(store->Get("resp_1", "alice", 100));
  EXPECT_FALSE(store->Item("msg_resp_1", "alice", 100)) << "items go with their response";
  EXPECT_FALSE(store->Delete("resp_1", "alice", 100));
  EXPECT_EQ(store->rows(), 0);
  EXPECT_EQ(store->bytes(), 0);
}

TEST(ResponseStoreTest, RowAndByteLimitsEvictTheOldestFirst) {
  std::unique_ptr<ResponseStore> store = Open("", Limits(3, kNoLimit, 0));
  for (int i = 0; i < 5; ++i) {
    const std::string id = "resp_" + std::to_string(i);
    ASSERT_OK(store->Put(id, "o", 100 + i, Response(id, "t")));
  }
  EXPECT_EQ(store->rows(), 3);
  EXPECT_FALSE(store->Get("resp_0", "o", 200));
  EXPECT_FALSE(store->Get("resp_1", "o", 200));
  EXPECT_TRUE(store->Get("resp_4", "o", 200));

  const int64_t one = Response("resp_0", std::string(1000, 'x')).response.dump().size();
  store = Open("", Limits(kNoLimit, 3 * one + 500, 0));
  for (int i = 0; i < 6; ++i) {
    const std::string id = "resp_" + std::to_string(i);
    ASSERT_OK(store->Put(id, "o", 100, Response(id, std::string(1000, 'x'))));
    EXPECT_LE(store->bytes(), 3 * one + 500);
  }
  EXPECT_TRUE(store->Get("resp_5", "o", 100));
  EXPECT_FALSE(store->Get("resp_0", "o", 100));
  // A response larger than the whole budget is refused, and nothing is evicted for it.
  const int64_t rows = store->rows();
  absl::Status s = store->Put("big", "o", 100, Response("big", std::string(10 * one, 'y')));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("--responses-max-bytes"), std::string::npos) << s;
  EXPECT_EQ(store->rows(), rows);
}

TEST(ResponseStoreTest, OldResponsesExpire) {
  std::unique_ptr<ResponseStore> store = Open("", Limits(kNoLimit, kNoLimit, 60));
  ASSERT_OK(store->Put("resp_old", "o", 1000, Response("resp_old", "t")));
  EXPECT_TRUE(store->Get("resp_old", "o", 1060));
  EXPECT_FALSE(store->Get("resp_old", "o", 1061)) << "invisible once past the age";
  EXPECT_FALSE(store->Item("msg_resp_old", "o", 1061));
  ASSERT_OK(store->Put("resp_new", "o", 1061, Response("resp_new", "t")));
  EXPECT_EQ(store->rows(), 1) << "and gone at the next Put";
}

TEST(ResponseStoreTest, AFileKeepsResponsesAcrossReopens) {
  TempFile file("pagoda-store-test");
  {
    std::unique_ptr<ResponseStore> store = Open(file.path());
    ASSERT_OK(store->Put("resp_1", "o", 100, Response("resp_1", "kept")));
  }
  std::unique_ptr<ResponseStore> store = Open(file.path());
  EXPECT_EQ(store->rows(), 1);
  std::optional<StoredResponse> got = store->Get("resp_1", "o", 100);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->response["output"][0]["content"][0]["text"], "kept");
  EXPECT_TRUE(store->Item("msg_resp_1", "o", 100));
}

TEST(ResponseStoreTest, RefusesForeignFilesAndSurvivesBadRows) {
  TempFile text("pagoda-store-text");
  std::ofstream(text.path()) << "this is not a database, but it is long enough to look like one "
                                "to a reader that does not check its header at all...........";
  absl::StatusOr<std::unique_ptr<ResponseStore>> store =
      ResponseStore::Open(text.path(), StoreLimits());
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(text.path()), std::string::npos) << store.status();

  TempFile other("pagoda-store-other");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(other.path().c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE responses (name TEXT)", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  store = ResponseStore::Open(other.path(), StoreLimits());
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("not Pagoda's"), std::string::npos) << store.status();

  // A row whose JSON was damaged on disk reads as not found.
  TempFile damaged("pagoda-store-damaged");
  {
    std::unique_ptr<ResponseStore> ok = Open(damaged.path());
    ASSERT_OK(ok->Put("resp_1", "o", 100, Response("resp_1", "t")));
  }
  ASSERT_EQ(sqlite3_open(damaged.path().c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE responses SET response = '{oops'", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  std::unique_ptr<ResponseStore> reopened = Open(damaged.path());
  EXPECT_FALSE(reopened->Get("resp_1", "o", 100));
}

TEST(ResponseStoreTest, OwnersAreTenantsOrKeyDigests) {
  EXPECT_EQ(StoreOwner("", ""), "");
  EXPECT_EQ(StoreOwner("k1", "acme"), "tenant:acme");
  EXPECT_EQ(StoreOwner("k2", "acme"), "tenant:acme") << "keys of one tenant share its responses";
  const std::string owner = StoreOwner("secret-key", "");
  EXPECT_EQ(owner.find("secret-key"), std::string::npos) << "the key itself is never stored";
  EXPECT_EQ(owner.size(), 4 + 64u) << owner;
  EXPECT_EQ(owner, StoreOwner("secret-key", "")) << "stable across calls and restarts";
  EXPECT_NE(owner, StoreOwner("secret-kez", ""));
  // SHA-256("abc"), FIPS 180-2's example.
  EXPECT_EQ(StoreOwner("abc", ""),
            "key:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace pagoda::scheduler::http
