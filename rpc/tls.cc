// Reading and checking PEM files with OpenSSL (the library gRPC itself uses
// here), and the gRPC credentials they make. See tls.h.
#include "rpc/tls.h"

#include <grpcpp/server_builder.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace octet {
namespace {

// A PEM file is a few KiB; anything this large is some other file.
constexpr std::uintmax_t kMaxPemBytes = 1 << 20;

using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free)>;
using X509Ptr = std::unique_ptr<X509, decltype(&X509_free)>;
using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

// "--flag PATH: ", the start of every message about that file.
std::string About(absl::string_view flag, const std::string& path) {
  return absl::StrCat("--", flag, " ", path, ": ");
}

// The file's bytes: an error for a missing, unreadable, non-regular or
// oversized file.
absl::StatusOr<std::string> ReadSmallFile(absl::string_view flag,
                                          const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status =
      std::filesystem::status(path, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat(About(flag, path), "cannot read it: ", error.message()));
  }
  if (!std::filesystem::is_regular_file(status)) {
    return absl::InvalidArgumentError(
        absl::StrCat(About(flag, path), "is not a file"));
  }
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  if (error || size > kMaxPemBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        About(flag, path), "is over 1 MiB or unreadable: not a PEM file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) {
    return absl::InvalidArgumentError(absl::StrCat(
        About(flag, path), "cannot read it: ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat(About(flag, path), "cannot read it"));
  }
  return text.str();
}

// No passphrase prompt, ever: an encrypted key is an error.
int NoPassphrase(char*, int, int, void*) { return 0; }

BioPtr MemoryBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())),
                &BIO_free);
}

// Every certificate in `pem`, in order; empty when there is none. An error
// when a CERTIFICATE block does not parse.
absl::StatusOr<std::vector<X509Ptr>> ParseCertificates(absl::string_view flag,
                                                       const std::string& path,
                                                       const std::string& pem) {
  BioPtr bio = MemoryBio(pem);
  std::vector<X509Ptr> certs;
  ERR_clear_error();
  while (X509* x =
             PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)) {
    certs.emplace_back(x, &X509_free);
  }
  // The loop ends at the end of the text (no more BEGIN lines), or at a
  // block that does not parse.
  const unsigned long last = ERR_peek_last_error();
  ERR_clear_error();
  if (ERR_GET_LIB(last) != ERR_LIB_PEM ||
      ERR_GET_REASON(last) != PEM_R_NO_START_LINE) {
    const char* reason = ERR_reason_error_string(last);
    return absl::InvalidArgumentError(
        absl::StrCat(About(flag, path), "certificate ", certs.size() + 1,
                     " does not parse (",
                     reason == nullptr ? "unknown reason" : reason, ")"));
  }
  return certs;
}

std::string SubjectOf(X509* cert) {
  char name[256] = {};
  X509_NAME_oneline(X509_get_subject_name(cert), name, sizeof(name) - 1);
  return name;
}

// An error when a certificate in `certs` has expired.
absl::Status CheckNotExpired(absl::string_view flag, const std::string& path,
                             const std::vector<X509Ptr>& certs) {
  for (size_t i = 0; i < certs.size(); ++i) {
    if (X509_cmp_current_time(X509_get0_notAfter(certs[i].get())) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(About(flag, path), "certificate ", i + 1, " (",
                       SubjectOf(certs[i].get()), ") has expired"));
    }
  }
  return absl::OkStatus();
}

// An error when `leaf`'s extended key usage does not allow `role`.
absl::Status CheckRole(absl::string_view flag, const std::string& path,
                       X509* leaf, TlsRole role) {
  const bool server = role != TlsRole::kClient;
  const bool client = role != TlsRole::kServer;
  if (server && X509_check_purpose(leaf, X509_PURPOSE_SSL_SERVER, 0) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        About(flag, path),
        "the certificate may not identify a TLS server (its extended key "
        "usage lacks serverAuth)"));
  }
  if (client && X509_check_purpose(leaf, X509_PURPOSE_SSL_CLIENT, 0) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        About(flag, path),
        "the certificate may not identify a TLS client (its extended key "
        "usage lacks clientAuth)"));
  }
  return absl::OkStatus();
}

// The private key in `pem`: an error for none, an encrypted one, or one
// that does not parse.
absl::StatusOr<KeyPtr> ParseKey(absl::string_view flag, const std::string& path,
                                const std::string& pem) {
  if (absl::StrContains(pem, "ENCRYPTED")) {
    return absl::InvalidArgumentError(absl::StrCat(
        About(flag, path), "the key is encrypted; octet needs it unencrypted"));
  }
  BioPtr bio = MemoryBio(pem);
  ERR_clear_error();
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr),
             &EVP_PKEY_free);
  const unsigned long error = ERR_peek_last_error();
  ERR_clear_error();
  if (key == nullptr && !absl::StrContains(pem, "PRIVATE KEY-----")) {
    return absl::InvalidArgumentError(
        absl::StrCat(About(flag, path), "holds no PEM private key"));
  }
  if (key == nullptr) {
    const char* reason = ERR_reason_error_string(error);
    return absl::InvalidArgumentError(
        absl::StrCat(About(flag, path), "its private key does not parse (",
                     reason == nullptr ? "unknown reason" : reason, ")"));
  }
  return key;
}

}  // namespace

absl::StatusOr<std::string> ReadTlsCertificates(absl::string_view flag,
                                                const std::string& path) {
  absl::StatusOr<std::string> pem = ReadSmallFile(flag, path);
  if (!pem.ok()) return pem.status();
  absl::StatusOr<std::vector<X509Ptr>> certs =
      ParseCertificates(flag, path, *pem);
  if (!certs.ok()) return certs.status();
  if (certs->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(About(flag, path), "holds no PEM certificate"));
  }
  if (absl::Status s = CheckNotExpired(flag, path, *certs); !s.ok()) return s;
  return pem;
}

absl::Status ReadTlsIdentity(absl::string_view cert_flag,
                             const std::string& cert_path,
                             absl::string_view key_flag,
                             const std::string& key_path, TlsRole role,
                             TlsConfig& out) {
  if (cert_path.empty() != key_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", cert_path.empty() ? key_flag : cert_flag,
                     " needs --", cert_path.empty() ? cert_flag : key_flag,
                     " too (a certificate and its key)"));
  }
  if (cert_path.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> chain = ReadTlsCertificates(cert_flag, cert_path);
  if (!chain.ok()) return chain.status();
  absl::StatusOr<std::vector<X509Ptr>> certs =
      ParseCertificates(cert_flag, cert_path, *chain);
  if (!certs.ok()) return certs.status();
  X509* leaf = certs->front().get();
  if (absl::Status s = CheckRole(cert_flag, cert_path, leaf, role); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::string> key_pem = ReadSmallFile(key_flag, key_path);
  if (!key_pem.ok()) return key_pem.status();
  absl::StatusOr<KeyPtr> key = ParseKey(key_flag, key_path, *key_pem);
  if (!key.ok()) return key.status();
  ERR_clear_error();
  const bool matches = X509_check_private_key(leaf, key->get()) == 1;
  ERR_clear_error();
  if (!matches) {
    return absl::InvalidArgumentError(absl::StrCat(About(key_flag, key_path),
                                                   "is not the key of --",
                                                   cert_flag, " ", cert_path));
  }
  out.cert_chain = *std::move(chain);
  out.private_key = *std::move(key_pem);
  return absl::OkStatus();
}

std::shared_ptr<grpc::ServerCredentials> TlsServerCredentials(
    const TlsConfig& tls) {
  if (tls.cert_chain.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      tls.ca.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = tls.ca;
  options.pem_key_cert_pairs.push_back({tls.private_key, tls.cert_chain});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> TlsChannelCredentials(
    const TlsConfig& tls) {
  if (tls.ca.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = tls.ca;
  options.pem_private_key = tls.private_key;
  options.pem_cert_chain = tls.cert_chain;
  return grpc::SslCredentials(options);
}

absl::StatusOr<std::unique_ptr<HealthOnlyServer>> HealthOnlyServer::Start(
    int port) {
  std::unique_ptr<HealthOnlyServer> h(new HealthOnlyServer());
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(absl::StrCat("0.0.0.0:", port),
                           grpc::InsecureServerCredentials(), &bound);
  builder.RegisterCallbackGenericService(&h->unknown_);
  h->server_ = builder.BuildAndStart();
  if (h->server_ == nullptr || bound == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve health checks on port ", port));
  }
  return h;
}

HealthOnlyServer::~HealthOnlyServer() {
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
}

}  // namespace octet
