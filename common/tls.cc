#include "common/tls.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pagoda::common {
namespace {

// Reads a PEM file given with `flag`; `marker` is what its content must contain
// ("CERTIFICATE" or "PRIVATE KEY"), so a swapped or garbage file is named at start.
absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path,
                                    const std::string& marker) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", flag, " ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream content;
  content << in.rdbuf();
  std::string pem = content.str();
  if (pem.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, " is empty"));
  if (!absl::StrContains(pem, "-----BEGIN ") || !absl::StrContains(pem, marker)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, " is not a PEM file with a ",
                                                   marker, " (\"-----BEGIN ...", marker,
                                                   "-----\")"));
  }
  return pem;
}

absl::Status CheckCombination(const TlsFiles& f, TlsSide side) {
  if (f.cert.empty() != f.key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-cert and --tls-key go together: got only ",
                     f.cert.empty() ? "--tls-key" : "--tls-cert"));
  }
  if (side == TlsSide::kServer && !f.ca.empty() && f.cert.empty()) {
    return absl::InvalidArgumentError(
        "--tls-ca (require client certificates) needs --tls-cert and --tls-key (the server's "
        "own certificate)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TlsConfig> LoadTlsConfig(const TlsFiles& files, TlsSide side) {
  RETURN_IF_ERROR(CheckCombination(files, side));
  TlsConfig config;
  config.enabled = !files.cert.empty() || !files.ca.empty();
  if (!files.cert.empty()) {
    ASSIGN_OR_RETURN(config.cert_chain, ReadPem("--tls-cert", files.cert, "CERTIFICATE"));
    ASSIGN_OR_RETURN(config.private_key, ReadPem("--tls-key", files.key, "PRIVATE KEY"));
  }
  if (!files.ca.empty()) {
    ASSIGN_OR_RETURN(config.root_certs, ReadPem("--tls-ca", files.ca, "CERTIFICATE"));
  }
  return config;
}

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const TlsConfig& config) {
  if (!config.enabled) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      config.root_certs.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = config.root_certs;
  options.pem_key_cert_pairs.push_back({config.private_key, config.cert_chain});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const TlsConfig& config) {
  if (!config.enabled) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = config.root_certs;  // empty: gRPC's default roots
  options.pem_private_key = config.private_key;
  options.pem_cert_chain = config.cert_chain;
  return grpc::SslCredentials(options);
}

std::string DescribeTls(const TlsConfig& config, TlsSide side) {
  if (!config.enabled) return "plaintext";
  if (side == TlsSide::kServer) return config.root_certs.empty() ? "TLS" : "mutual TLS";
  return config.cert_chain.empty() ? "TLS" : "TLS with a client certificate";
}

}  // namespace pagoda::common
