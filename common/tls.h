// TLS for Pagoda's gRPC endpoints: PEM files named on the command line (--tls-cert,
// --tls-key, --tls-ca) turned into gRPC server or channel credentials. One place, so the
// scheduler, the worker, pagoda-cli and pagoda-bench agree on what the flags mean.
//
// Meaning of the flags:
//  * server (the scheduler): --tls-cert and --tls-key together turn TLS on; --tls-ca as well
//    makes it mutual: every client (API clients and workers alike) must present a certificate
//    signed by that CA, or its handshake fails. --tls-ca alone, or one of cert/key alone, is an
//    error. None of the three: plaintext.
//  * client (worker, CLI, bench): any of the flags turns TLS on; --tls-ca is the root that
//    verifies the server (the system's roots when absent); --tls-cert and --tls-key together
//    are the client certificate for a server that requires one.
//
// Contract: LoadTlsConfig reads every file once, up front; its errors name the flag, the file
// and what was wrong (unreadable, empty, not PEM, half-specified pair), so a misconfigured
// process exits at start instead of failing every handshake later. A key that does not match
// its certificate is only found by gRPC when the server starts (or at the first handshake).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace pagoda::common {

// File paths as given on the command line; empty = flag not given.
struct TlsFiles {
  std::string cert;  // --tls-cert: PEM certificate chain (leaf first)
  std::string key;   // --tls-key: PEM private key of `cert`
  std::string ca;    // --tls-ca: PEM root certificate(s) that verify the peer
};

enum class TlsSide { kServer, kClient };

// The PEM contents. `enabled` false means plaintext (every string empty).
struct TlsConfig {
  bool enabled = false;
  std::string cert_chain;  // empty on a client without a client certificate
  std::string private_key;
  std::string root_certs;  // server: required client CA (mTLS); client: server CA (empty = system)
};

// Checks the combination of flags for `side` and reads the files.
absl::StatusOr<TlsConfig> LoadTlsConfig(const TlsFiles& files, TlsSide side);

// Insecure credentials when !config.enabled.
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const TlsConfig& config);
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const TlsConfig& config);

// "plaintext", "TLS" or "mutual TLS" (server side) / "TLS with a client certificate" (client
// side), for log lines.
std::string DescribeTls(const TlsConfig& config, TlsSide side);

}  // namespace pagoda::common
