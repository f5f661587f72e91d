#include "server/tls.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/common/fs.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"

namespace frost::server {
namespace {

constexpr int64_t kMaxPemBytes = 1 << 20;  // certificate chains and keys are a few KiB

absl::StatusOr<std::string> read_pem_file(const std::string& path, const std::string& field) {
  // Opened non-blocking and checked first: a FIFO, socket or device is refused at once (it used to hang start-up).
  absl::StatusOr<std::string> data = read_file(path, kMaxPemBytes, "1 MiB");
  if (!data.ok())
    return absl::InvalidArgumentError(absl::StrCat(field, ": cannot read \"", path, "\": ", data.status().message()));
  return data;
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;

BioPtr mem_bio(const std::string& s) { return BioPtr(BIO_new_mem_buf(s.data(), static_cast<int>(s.size()))); }

std::string asn1_time(const ASN1_TIME* t) {
  BioPtr b(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(b.get(), t);
  char* data = nullptr;
  const long n = BIO_get_mem_data(b.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string subject_of(X509* x) {
  char buf[256];
  X509_NAME_oneline(X509_get_subject_name(x), buf, sizeof buf);
  return buf;
}

// Every certificate in `pem` (at least one), or INVALID_ARGUMENT naming `field`.
absl::StatusOr<std::vector<X509Ptr>> parse_certs(const std::string& pem, const std::string& field) {
  std::vector<X509Ptr> out;
  BioPtr b = mem_bio(pem);
  while (X509* x = PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr)) out.emplace_back(x);
  ERR_clear_error();  // the read that ended the loop
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": no PEM certificate in it"));
  return out;
}

// Writes `data` to `path` through a temporary file and rename (readers never see half a file).
absl::Status write_atomic(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
  }
  ::chmod(tmp.c_str(), 0600);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace

absl::Status verify_identity(const std::string& cert_pem, const std::string& key_pem, const std::string& cert_field,
                             const std::string& key_field, int64_t now_unix) {
  FROST_ASSIGN_OR_RETURN(std::vector<X509Ptr> chain, parse_certs(cert_pem, cert_field));
  X509* leaf = chain.front().get();
  BioPtr kb = mem_bio(key_pem);
  std::unique_ptr<EVP_PKEY, PkeyFree> key(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (!key)
    return absl::InvalidArgumentError(
        absl::StrCat(key_field, ": no PEM private key in it (encrypted keys are not supported)"));
  if (X509_check_private_key(leaf, key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat(key_field, ": the private key does not match the certificate of ", cert_field, " (",
                     subject_of(leaf), ")"));
  }
  time_t now = static_cast<time_t>(now_unix);
  if (X509_cmp_time(X509_get0_notBefore(leaf), &now) > 0)
    return absl::InvalidArgumentError(absl::StrCat(cert_field, ": the certificate (", subject_of(leaf),
                                                   ") is not valid before ", asn1_time(X509_get0_notBefore(leaf))));
  if (X509_cmp_time(X509_get0_notAfter(leaf), &now) < 0)
    return absl::InvalidArgumentError(absl::StrCat(cert_field, ": the certificate (", subject_of(leaf),
                                                   ") expired on ", asn1_time(X509_get0_notAfter(leaf))));
  return absl::OkStatus();
}

absl::Status verify_ca_bundle(const std::string& pem, const std::string& field) {
  return parse_certs(pem, field).status();
}

absl::StatusOr<std::unique_ptr<TlsReloader>> TlsReloader::create(const TlsSection& cfg) {
  std::unique_ptr<TlsReloader> r(new TlsReloader(cfg));
  const char* tmpdir = std::getenv("TMPDIR");
  std::string tmpl = absl::StrCat(tmpdir && *tmpdir ? tmpdir : "/tmp", "/frostd-tls-XXXXXX");
  if (!::mkdtemp(tmpl.data()))
    return absl::UnavailableError(absl::StrCat("server.tls: cannot create a private directory like ", tmpl,
                                               " for the served certificate (set TMPDIR to a writable directory)"));
  r->dir_ = tmpl;
  {
    absl::MutexLock l(&r->mu_);
    FROST_ASSIGN_OR_RETURN(std::string cert, read_pem_file(cfg.cert_file, "server.tls.cert_file"));
    FROST_ASSIGN_OR_RETURN(std::string key, read_pem_file(cfg.key_file, "server.tls.key_file"));
    std::string ca;
    if (!cfg.client_ca_file.empty()) {
      FROST_ASSIGN_OR_RETURN(ca, read_pem_file(cfg.client_ca_file, "server.tls.client_ca_file"));
      FROST_RETURN_IF_ERROR(verify_ca_bundle(ca, "server.tls.client_ca_file"));
    }
    FROST_RETURN_IF_ERROR(
        verify_identity(cert, key, "server.tls.cert_file", "server.tls.key_file", static_cast<int64_t>(time(nullptr))));
    FROST_RETURN_IF_ERROR(r->stage(cert, key, ca));
  }
  TlsReloader* self = r.get();
  r->thread_ = std::thread([self] {
    pthread_setname_np(pthread_self(), "frost-tls");
    absl::MutexLock l(&self->stop_mu_);
    while (!self->stop_) {
      self->stop_cv_.WaitWithTimeout(&self->stop_mu_, absl::Seconds(self->cfg_.reload_interval_s));
      if (self->stop_) break;
      self->stop_mu_.Unlock();
      (void)self->reload();  // logs its own refusals
      self->stop_mu_.Lock();
    }
  });
  FROST_LOG_INFO("frostd: TLS on gRPC%s%s%s; certificate files re-read every %d s and on SIGHUP",
                 cfg.client_ca_file.empty() ? "" : ", client certificates verified against server.tls.client_ca_file",
                 cfg.require_client_cert ? " and required (mTLS)" : "", cfg.metrics ? "; /metrics over HTTPS with the same certificate" : "",
                 cfg.reload_interval_s);
  return r;
}

TlsReloader::~TlsReloader() {
  {
    absl::MutexLock l(&stop_mu_);
    stop_ = true;
    stop_cv_.Signal();
  }
  if (thread_.joinable()) thread_.join();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

absl::Status TlsReloader::stage(const std::string& cert, const std::string& key, const std::string& ca) {
  // Key first, then the certificate: gRPC's watcher refuses a pair whose key and certificate differ, so a read
  // between the two renames keeps the previous pair for one more refresh.
  FROST_RETURN_IF_ERROR(write_atomic(dir_ + "/key.pem", key));
  FROST_RETURN_IF_ERROR(write_atomic(dir_ + "/cert.pem", cert));
  if (!cfg_.client_ca_file.empty()) FROST_RETURN_IF_ERROR(write_atomic(dir_ + "/ca.pem", ca));
  staged_cert_ = cert;
  staged_key_ = key;
  staged_ca_ = ca;
  generation_.fetch_add(1);
  return absl::OkStatus();
}

TlsReloader::Staged TlsReloader::staged() const {
  absl::MutexLock l(&mu_);
  Staged s;
  s.cert = staged_cert_;
  s.key = staged_key_;
  s.ca = staged_ca_;
  s.require_client_cert = cfg_.require_client_cert;
  s.generation = generation_.load();
  return s;
}

absl::Status TlsReloader::reload() {
  absl::MutexLock l(&mu_);
  auto refuse = [&](const absl::Status& st) {
    reload_failures_.fetch_add(1);
    if (st.ToString() != last_refusal_) {
      last_refusal_ = st.ToString();
      FROST_LOG_ERROR("frostd: server.tls: new certificate files refused, the current certificate keeps serving: %s",
                      std::string(st.message()).c_str());
    }
    return st;
  };
  absl::StatusOr<std::string> cert = read_pem_file(cfg_.cert_file, "server.tls.cert_file");
  if (!cert.ok()) return refuse(cert.status());
  absl::StatusOr<std::string> key = read_pem_file(cfg_.key_file, "server.tls.key_file");
  if (!key.ok()) return refuse(key.status());
  std::string ca;
  if (!cfg_.client_ca_file.empty()) {
    absl::StatusOr<std::string> c = read_pem_file(cfg_.client_ca_file, "server.tls.client_ca_file");
    if (!c.ok()) return refuse(c.status());
    ca = *std::move(c);
  }
  if (*cert == staged_cert_ && *key == staged_key_ && ca == staged_ca_) return absl::OkStatus();
  if (!ca.empty()) {
    if (absl::Status st = verify_ca_bundle(ca, "server.tls.client_ca_file"); !st.ok()) return refuse(st);
  }
  if (absl::Status st = verify_identity(*cert, *key, "server.tls.cert_file", "server.tls.key_file",
                                        static_cast<int64_t>(time(nullptr)));
      !st.ok())
    return refuse(st);
  if (absl::Status st = stage(*cert, *key, ca); !st.ok()) return refuse(st);
  last_refusal_.clear();
  reloads_.fetch_add(1);
  FROST_LOG_INFO("frostd: server.tls: new certificate files staged; new connections use them");
  return absl::OkStatus();
}

std::shared_ptr<grpc::ServerCredentials> TlsReloader::credentials() const {
  const bool with_ca = !cfg_.client_ca_file.empty();
  // Refreshed every second from the staged copies (never from the operator's files directly).
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      dir_ + "/key.pem", dir_ + "/cert.pem", with_ca ? dir_ + "/ca.pem" : "", /*refresh_interval_sec=*/1);
  grpc::experimental::TlsServerCredentialsOptions opts(provider);
  opts.watch_identity_key_cert_pairs();
  if (with_ca) opts.watch_root_certs();
  opts.set_cert_request_type(!with_ca                     ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                             : cfg_.require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                                        : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  return grpc::experimental::TlsServerCredentials(opts);
}

}  // namespace frost::server
