// TLS flag handling without a network: which combinations are accepted on each side, and
// errors that name the flag, the file and what was wrong. (The handshakes themselves are
// tested end to end in tests/e2e/tls_e2e_test.cc, with real certificates.)
#include "common/tls.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "tests/support/status_assertions.h"

namespace pagoda::common {
namespace {

constexpr char kCert[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
constexpr char kKey[] = "-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n";

// Files of their own for each test process: ctest runs the tests of this binary in parallel, and
// a shared path would be rewritten (or truncated) under another test's feet.
std::string WriteFile(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + "/pagoda-tls-test-" + std::to_string(getpid()) +
                           "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                           "-" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

void ExpectError(const TlsFiles& files, TlsSide side, const std::string& message) {
  absl::StatusOr<TlsConfig> config = LoadTlsConfig(files, side);
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find(message), std::string::npos) << config.status();
}

TEST(TlsTest, NoFlagsMeanPlaintext) {
  for (TlsSide side : {TlsSide::kServer, TlsSide::kClient}) {
    absl::StatusOr<TlsConfig> config = LoadTlsConfig({}, side);
    ASSERT_OK(config);
    EXPECT_FALSE(config->enabled);
    EXPECT_EQ(DescribeTls(*config, side), "plaintext");
  }
}

TEST(TlsTest, ServerNeedsCertAndKeyAndMayRequireClientCertificates) {
  const std::string cert = WriteFile("cert.pem", kCert), key = WriteFile("key.pem", kKey);
  absl::StatusOr<TlsConfig> config = LoadTlsConfig({cert, key, ""}, TlsSide::kServer);
  ASSERT_OK(config);
  EXPECT_TRUE(config->enabled);
  EXPECT_EQ(config->cert_chain, kCert);
  EXPECT_EQ(config->private_key, kKey);
  EXPECT_EQ(DescribeTls(*config, TlsSide::kServer), "TLS");
  config = LoadTlsConfig({cert, key, cert}, TlsSide::kServer);
  ASSERT_OK(config);
  EXPECT_EQ(config->root_certs, kCert);
  EXPECT_EQ(DescribeTls(*config, TlsSide::kServer), "mutual TLS");

  ExpectError({cert, "", ""}, TlsSide::kServer,
              "--tls-cert and --tls-key go together: got only --tls-cert");
  ExpectError({"", key, ""}, TlsSide::kServer, "got only --tls-key");
  ExpectError({"", "", cert}, TlsSide::kServer, "--tls-ca (require client certificates) needs");
}

TEST(TlsTest, ClientNeedsOnlyACaAndMayPresentACertificate) {
  const std::string cert = WriteFile("cert.pem", kCert), key = WriteFile("key.pem", kKey);
  absl::StatusOr<TlsConfig> config = LoadTlsConfig({"", "", cert}, TlsSide::kClient);
  ASSERT_OK(config);
  EXPECT_TRUE(config->enabled);
  EXPECT_EQ(DescribeTls(*config, TlsSide::kClient), "TLS");
  config = LoadTlsConfig({cert, key, cert}, TlsSide::kClient);
  ASSERT_OK(config);
  EXPECT_EQ(DescribeTls(*config, TlsSide::kClient), "TLS with a client certificate");
  // A client certificate without --tls-ca verifies the server with the system's roots.
  config = LoadTlsConfig({cert, key, ""}, TlsSide::kClient);
  ASSERT_OK(config);
  EXPECT_TRUE(config->root_certs.empty());
  ExpectError({"", key, cert}, TlsSide::kClient, "go together");
}

TEST(TlsTest, UnreadableEmptyOrNonPemFilesAreNamed) {
  const std::string cert = WriteFile("cert.pem", kCert), key = WriteFile("key.pem", kKey);
  ExpectError({"", "", "/nonexistent/ca.pem"}, TlsSide::kClient,
              "cannot read --tls-ca /nonexistent/ca.pem: No such file or directory");
  const std::string empty = WriteFile("empty.pem", "");
  ExpectError({cert, empty, ""}, TlsSide::kServer, "--tls-key " + empty + " is empty");
  // Swapped files: the key where the certificate goes.
  ExpectError({key, cert, ""}, TlsSide::kServer, "is not a PEM file with a CERTIFICATE");
  ExpectError({cert, cert, ""}, TlsSide::kServer, "is not a PEM file with a PRIVATE KEY");
}

}  // namespace
}  // namespace pagoda::common
