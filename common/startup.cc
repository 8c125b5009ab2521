#include "common/startup.h"

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "common/flags.h"
#include "common/link_token.h"
#include "common/log.h"
#include "common/signals.h"

// The help texts speak for both binaries: the scheduler is the TLS server, the worker a client.
ABSL_FLAG(std::string, log_level, "info", "debug, info, warning or error");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain (with --tls-key). pagoda-scheduler: serve the API and the "
          "worker link over TLS (empty = plaintext); pagoda-worker: the client certificate for "
          "a scheduler that requires one (its --tls-ca)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate(s). pagoda-scheduler: clients and workers must present a "
          "certificate signed by it (mutual TLS; needs --tls-cert and --tls-key); "
          "pagoda-worker: verify the scheduler with it and attach over TLS (empty, with no "
          "--tls-cert either: plaintext)");
ABSL_FLAG(std::string, link_token_file, "",
          "file holding the worker link's token. pagoda-scheduler: workers must present it to "
          "attach (empty: no authentication); pagoda-worker: the token to present");

namespace pagoda::common {

absl::Status StartProcess(int argc, char** argv, const char* usage) {
  BlockTerminationSignals();
  absl::SetProgramUsageMessage(usage);
  ParseFlags(argc, argv);
  LogLevel level;
  if (!ParseLogLevel(absl::GetFlag(FLAGS_log_level), &level)) {
    return absl::InvalidArgumentError("--log-level must be debug, info, warning or error");
  }
  SetLogLevel(level);
  return absl::OkStatus();
}

absl::StatusOr<TlsConfig> LoadTlsFromFlags(TlsSide side) {
  return LoadTlsConfig(
      {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key), absl::GetFlag(FLAGS_tls_ca)},
      side);
}

absl::StatusOr<std::string> LoadLinkTokenFromFlags() {
  const std::string path = absl::GetFlag(FLAGS_link_token_file);
  if (path.empty()) return std::string();
  return ReadLinkTokenFile(path);
}

}  // namespace pagoda::common
