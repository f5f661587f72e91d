#pragma once
// TLS and mTLS for frostd's gRPC port (server.tls), with certificate rotation that never drops a stream and
// never installs a bad certificate.
//
// gRPC's FileWatcherCertificateProvider re-reads PEM files on a timer and hands new handshakes whatever it
// finds there. It is pointed, not at the operator's files, but at validated copies in a private staging
// directory: TlsReloader reads the configured files at start (refusing to start on a bad pair) and again every
// server.tls.reload_interval_s and on SIGHUP, checks the new pair (PEM parses, the key matches the
// certificate, the certificate is inside its validity period, the client CA bundle parses), and only then
// replaces the staged copies. A bad new certificate is logged and counted, and the staged pair keeps serving.
// Live connections keep the session they negotiated: rotation affects new handshakes only.
#include <grpcpp/security/server_credentials.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/server_config.h"

namespace frost::server {

// Checks one identity: `cert_pem` (a chain, leaf first) and `key_pem`. INVALID_ARGUMENT naming `cert_field` /
// `key_field` and what is wrong (unparsable, key does not match, not yet valid, expired) at `now_unix`.
absl::Status verify_identity(const std::string& cert_pem, const std::string& key_pem, const std::string& cert_field,
                             const std::string& key_field, int64_t now_unix);
// Checks a CA bundle: at least one certificate, all parsable.
absl::Status verify_ca_bundle(const std::string& pem, const std::string& field);

class TlsReloader {
 public:
  // Reads and verifies the configured files, stages them and starts the reload thread. INVALID_ARGUMENT
  // naming the field when a file is unreadable or its content is refused.
  static absl::StatusOr<std::unique_ptr<TlsReloader>> create(const TlsSection& cfg);
  ~TlsReloader();

  // Credentials for ServerBuilder::AddListeningPort, reading the staged copies.
  std::shared_ptr<grpc::ServerCredentials> credentials() const;
  // Re-reads the configured files now (SIGHUP). OK when they are unchanged or the new ones were staged; the
  // refusal (also logged) otherwise — the staged pair keeps serving then.
  absl::Status reload();

  // The identity being served now (what credentials() reads), for the HTTPS /metrics endpoint
  // (server/metrics_https.h); `generation` grows by one with every staged change.
  struct Staged {
    std::string cert, key, ca;
    bool require_client_cert = false;
    uint64_t generation = 0;
  };
  Staged staged() const;
  uint64_t generation() const { return generation_.load(); }

  int64_t reloads() const { return reloads_.load(); }
  int64_t reload_failures() const { return reload_failures_.load(); }

 private:
  explicit TlsReloader(const TlsSection& cfg) : cfg_(cfg) {}
  absl::Status stage(const std::string& cert, const std::string& key, const std::string& ca);

  TlsSection cfg_;
  std::string dir_;  // private staging directory (mode 0700), removed at destruction
  mutable absl::Mutex mu_;  // one reload at a time
  std::string staged_cert_ ABSL_GUARDED_BY(mu_), staged_key_ ABSL_GUARDED_BY(mu_), staged_ca_ ABSL_GUARDED_BY(mu_);
  std::string last_refusal_ ABSL_GUARDED_BY(mu_);  // logged once per distinct refusal
  std::atomic<int64_t> reloads_{0}, reload_failures_{0};
  std::atomic<uint64_t> generation_{0};
  std::thread thread_;
  absl::Mutex stop_mu_;
  absl::CondVar stop_cv_;
  bool stop_ ABSL_GUARDED_BY(stop_mu_) = false;
};

}  // namespace frost::server
