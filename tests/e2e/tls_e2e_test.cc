// End-to-end TLS: a CA, a server certificate (SAN 127.0.0.1 and localhost) and a client
// certificate are made with the openssl command for each test, then the scheduler serves the
// API and the worker link over TLS (and mutual TLS with --tls-ca): generations are the golden
// ones, and clients or workers without the right credentials are refused.
//
// Needs the openssl command (Debian package `openssl`, installed by scripts/install-deps.sh);
// the tests skip with a message without it.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/e2e/trained_model.h"
#include "tests/support/status_assertions.h"

namespace pagoda::testing {
namespace {

namespace v1 = pagoda::v1;

std::optional<std::string> FindInPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (const auto& dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Writes, into `dir`: ca.pem/ca.key (the CA), other-ca.pem/.key (a CA nobody trusts),
// server.pem/.key (signed by ca, for 127.0.0.1 and localhost) and client.pem/.key (signed by
// ca, for client authentication). P-256 keys: fast to make.
bool MakeCertificates(const std::string& openssl, const std::string& dir, std::string* error) {
  const std::string script = absl::StrCat("set -e\ncd '", dir, "'\nO='", openssl, "'\n", R"(
ca() {
  "$O" req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -keyout "$1.key" -out "$1.pem" -subj "/CN=$1" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}
leaf() {  # name, extensions
  "$O" req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$1.key" -out "$1.csr" -subj "/CN=$1"
  printf "$2" > "$1.ext"
  "$O" x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
    -extfile "$1.ext" -out "$1.pem"
}
ca ca
ca other-ca
leaf server 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n'
leaf client 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n'
)");
  std::ofstream(dir + "/make-certs.sh") << script;
  ChildProcess make({"/bin/sh", dir + "/make-certs.sh"}, dir + "/make-certs.log");
  if (!make.Start() || make.Wait(absl::Seconds(60)) != 0) {
    *error = "making the test certificates failed:\n" + make.Log();
    return false;
  }
  return true;
}

std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const std::string& dir,
                                                            const std::string& ca,
                                                            bool with_client_cert) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ReadFile(absl::StrCat(dir, "/", ca, ".pem"));
  if (with_client_cert) {
    options.pem_cert_chain = ReadFile(dir + "/client.pem");
    options.pem_private_key = ReadFile(dir + "/client.key");
  }
  return grpc::SslCredentials(options);
}

// GetModelInfo over `credentials`; its status.
grpc::Status CallInfo(const std::string& address,
                      std::shared_ptr<grpc::ChannelCredentials> credentials) {
  auto stub = v1::Generation::NewStub(grpc::CreateChannel(address, credentials));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ModelInfo info;
  return stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info);
}

class TlsE2eTest : public TrainedModelTest {
 protected:
  void SetUp() override {
    TrainedModelTest::SetUp();
    if (IsSkipped()) return;
    const std::optional<std::string> openssl = FindInPath("openssl");
    if (!openssl) GTEST_SKIP() << "the openssl command is not installed (Debian: openssl)";
    dir_ = MakeTempDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::string error;
    ASSERT_TRUE(MakeCertificates(*openssl, dir_, &error)) << error;
  }

  std::string Pem(const std::string& name) const { return absl::StrCat(dir_, "/", name); }

  void StartTlsCluster(bool mutual) {
    ClusterOptions options;
    options.model = *model_;
    options.scheduler_flags = {"--tls-cert", Pem("server.pem"), "--tls-key", Pem("server.key")};
    options.worker_flags = {"--tls-ca", Pem("ca.pem"), "--threads", "1"};
    if (mutual) {
      options.scheduler_flags.insert(options.scheduler_flags.end(), {"--tls-ca", Pem("ca.pem")});
      options.worker_flags.insert(options.worker_flags.end(), {"--tls-cert", Pem("client.pem"),
                                                               "--tls-key", Pem("client.key")});
    }
    options.credentials = ClientCredentials(dir_, "ca", /*with_client_cert=*/mutual);
    std::string error;
    cluster_ = Cluster::Start(options, &error);
    ASSERT_NE(cluster_, nullptr) << error;
  }

  // The first golden cases, generated through the cluster's TLS client.
  void ExpectGoldenGenerations(int cases) {
    const auto golden = LoadGolden(*golden_)["cases"];
    for (int i = 0; i < cases && i < static_cast<int>(golden.size()); ++i) {
      const auto& c = golden[i];
      SCOPED_TRACE(c["prompt"].get<std::string>());
      Generation g = cluster_->Generate(TextRequest(c["prompt"], c["max_tokens"]));
      ASSERT_OK(g.status) << cluster_->Logs();
      EXPECT_EQ(g.tokens, c["expected_token_ids"].get<std::vector<int32_t>>());
      EXPECT_EQ(g.text, c["expected_text"].get<std::string>());
    }
  }

  // Starts a worker with `flags` and expects it not to attach within a few seconds (it keeps
  // retrying: a failed handshake looks like an unreachable scheduler).
  void ExpectWorkerCannotAttach(const std::vector<std::string>& flags, const std::string& name) {
    std::vector<std::string> args = {BinDir() + "/pagoda-worker",
                                     "--scheduler",
                                     cluster_->address(),
                                     "--model",
                                     *model_,
                                     "--threads",
                                     "1",
                                     "--name",
                                     name};
    args.insert(args.end(), flags.begin(), flags.end());
    ChildProcess worker(args, Pem(name + ".log"));
    ASSERT_TRUE(worker.Start());
    // Loading the model takes well under a second; then it tries, and retries, to attach.
    const absl::Time until = absl::Now() + absl::Seconds(3);
    while (absl::Now() < until) {
      ASSERT_EQ(cluster_->Status().workers_size(), 1) << name << " attached:\n" << worker.Log();
      absl::SleepFor(absl::Milliseconds(100));
    }
    EXPECT_TRUE(worker.Running()) << worker.Log();
    EXPECT_NE(worker.Log().find("retrying"), std::string::npos) << worker.Log();
  }

  std::string dir_;
};

// TLS on the API and the link: golden generations over TLS, from the test's client and from
// pagoda-cli; a plaintext client, a client trusting another CA and a plaintext worker are
// refused.
TEST_F(TlsE2eTest, ServesTheApiAndTheLinkOverTls) {
  ASSERT_NO_FATAL_FAILURE(StartTlsCluster(/*mutual=*/false));
  ExpectGoldenGenerations(3);
  EXPECT_NE(cluster_->scheduler().Log().find("(TLS)"), std::string::npos) << cluster_->Logs();

  const grpc::Status plaintext = CallInfo(cluster_->address(), grpc::InsecureChannelCredentials());
  EXPECT_EQ(plaintext.error_code(), grpc::StatusCode::UNAVAILABLE) << plaintext.error_message();
  const grpc::Status wrong_ca =
      CallInfo(cluster_->address(), ClientCredentials(dir_, "other-ca", false));
  EXPECT_EQ(wrong_ca.error_code(), grpc::StatusCode::UNAVAILABLE) << wrong_ca.error_message();

  const auto c = LoadGolden(*golden_)["cases"][0];
  ChildProcess cli({BinDir() + "/pagoda-cli", "generate", "--server", cluster_->address(),
                    "--tls-ca", Pem("ca.pem"), "--prompt", c["prompt"].get<std::string>(),
                    "--max-tokens", std::to_string(c["max_tokens"].get<int>())},
                   Pem("cli.log"));
  ASSERT_TRUE(cli.Start());
  EXPECT_EQ(cli.Wait(absl::Seconds(30)), 0) << cli.Log();
  EXPECT_NE(cli.Log().find(c["expected_text"].get<std::string>()), std::string::npos) << cli.Log();

  ExpectWorkerCannotAttach({}, "plaintext-worker");
  ExpectWorkerCannotAttach({"--tls-ca", Pem("other-ca.pem")}, "wrong-ca-worker");
}

// Mutual TLS (--tls-ca on the scheduler): clients and workers with a certificate signed by the
// CA are served; without one, a client's calls fail and a worker cannot attach.
TEST_F(TlsE2eTest, MutualTlsRequiresClientCertificates) {
  ASSERT_NO_FATAL_FAILURE(StartTlsCluster(/*mutual=*/true));
  ExpectGoldenGenerations(2);
  EXPECT_NE(cluster_->scheduler().Log().find("(mutual TLS)"), std::string::npos);

  const grpc::Status no_cert = CallInfo(cluster_->address(), ClientCredentials(dir_, "ca", false));
  EXPECT_EQ(no_cert.error_code(), grpc::StatusCode::UNAVAILABLE) << no_cert.error_message();
  const grpc::Status plaintext = CallInfo(cluster_->address(), grpc::InsecureChannelCredentials());
  EXPECT_EQ(plaintext.error_code(), grpc::StatusCode::UNAVAILABLE);
  ExpectWorkerCannotAttach({"--tls-ca", Pem("ca.pem")}, "certless-worker");

  // pagoda-cli and pagoda-bench present the client certificate with --tls-cert/--tls-key.
  const std::vector<std::string> tls = {"--tls-ca",        Pem("ca.pem"), "--tls-cert",
                                        Pem("client.pem"), "--tls-key",   Pem("client.key")};
  std::vector<std::string> cli = {BinDir() + "/pagoda-cli", "info", "--server",
                                  cluster_->address()};
  cli.insert(cli.end(), tls.begin(), tls.end());
  ChildProcess info(cli, Pem("cli.log"));
  ASSERT_TRUE(info.Start());
  EXPECT_EQ(info.Wait(absl::Seconds(30)), 0) << info.Log();
  EXPECT_NE(info.Log().find("\"attached_workers\":1"), std::string::npos) << info.Log();

  std::vector<std::string> bench = {BinDir() + "/pagoda-bench", "--server", cluster_->address(),
                                    "--json", Pem("bench.json")};
  for (const char* flag : {"--num-requests=4", "--concurrency=2", "--input-len=8", "--output-len=4",
                           "--warmup-requests=0", "--progress=false"}) {
    bench.push_back(flag);
  }
  bench.insert(bench.end(), tls.begin(), tls.end());
  ChildProcess run(bench, Pem("bench.log"));
  ASSERT_TRUE(run.Start());
  EXPECT_EQ(run.Wait(absl::Seconds(60)), 0) << run.Log();
  const nlohmann::json report = nlohmann::json::parse(ReadFile(Pem("bench.json")));
  EXPECT_EQ(report["runs"][0]["metrics"]["completed"], 4) << report.dump(1);
}

// Half-specified or unreadable TLS flags stop the binaries at start, saying what is wrong.
TEST_F(TlsE2eTest, BadTlsFlagsFailAtStart) {
  struct Case {
    std::string binary;
    std::vector<std::string> flags;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"pagoda-scheduler",
       {"--tls-cert", Pem("server.pem")},
       "--tls-cert and --tls-key go together"},
      {"pagoda-scheduler",
       {"--tls-ca", Pem("ca.pem")},
       "--tls-ca (require client certificates) needs"},
      {"pagoda-scheduler",
       {"--tls-cert", Pem("missing.pem"), "--tls-key", Pem("server.key")},
       "cannot read --tls-cert " + Pem("missing.pem")},
      {"pagoda-scheduler",
       {"--tls-cert", Pem("server.key"), "--tls-key", Pem("server.key")},
       "is not a PEM file with a CERTIFICATE"},
      {"pagoda-scheduler",
       {"--tls-cert", Pem("server.pem"), "--tls-key", Pem("client.key")},
       "the TLS key does not match the certificate"},
      {"pagoda-worker", {"--tls-key", Pem("client.key")}, "--tls-cert and --tls-key go together"},
      {"pagoda-worker", {"--tls-ca", Pem("missing.pem")}, "cannot read --tls-ca"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.binary, " ", c.flags[0], " ", c.flags[1]));
    std::vector<std::string> args = {BinDir() + "/" + c.binary, "--model", *model_};
    if (c.binary == "pagoda-scheduler") args.insert(args.end(), {"--listen", "127.0.0.1:0"});
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    ChildProcess p(args, Pem("bad-flags.log"));
    ASSERT_TRUE(p.Start());
    EXPECT_EQ(p.Wait(absl::Seconds(30)), 1) << p.Log();
    EXPECT_NE(p.Log().find(c.message), std::string::npos) << p.Log();
  }
}

}  // namespace
}  // namespace pagoda::testing
