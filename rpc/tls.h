// TLS for octet's gRPC links: the public API (clients → coordinator), the
// link to remote workers (coordinator → worker) and the rendezvous store
// they reach back (worker → coordinator). Nothing here picks a policy; the
// programs do (docs/serving.md, "TLS"):
//
// - A TlsConfig holds PEM text, read from the files the flags name and
//   checked here once, at start-up, so that a wrong file is one line naming
//   its flag (exit code 2), not a failed handshake later: every certificate
//   parses and has not expired, the key parses, is not encrypted and is the
//   certificate's, and the certificate may serve the role it is given
//   (extended key usage serverAuth / clientAuth).
// - Servers: TLS when `cert_chain` is set; with `ca` too, every client must
//   present a certificate that `ca` signed (mutual TLS).
// - Clients: TLS when `ca` is set (the roots that verify the server, whose
//   certificate must name the host dialled); `cert_chain` and `private_key`,
//   when set, are the client's certificate for servers that ask for one.
// - An empty TlsConfig means plaintext, as before TLS existed: spawned
//   workers on private Unix sockets and their loopback store never use TLS.
//
// Certificates are read once: a renewed certificate takes a restart.
//
// HealthOnlyServer is TLS's companion: probes that cannot do TLS (such as
// Kubernetes') ask grpc.health.v1 there, in plaintext.
#pragma once

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace octet {

struct TlsConfig {
  std::string cert_chain;   // this side's certificate, leaf first (PEM)
  std::string private_key;  // the leaf's key (PEM, unencrypted)
  std::string ca;           // certificates that verify the other side (PEM)
};

// What a certificate will be used for: checked against its extended key
// usage (a certificate without one may do both).
enum class TlsRole { kServer, kClient, kServerAndClient };

// The certificates in the file `path` that flag --`flag` names: at least
// one, every one parsing and not expired. Errors name the flag and the file.
absl::StatusOr<std::string> ReadTlsCertificates(absl::string_view flag,
                                                const std::string& path);

// This side's identity from --`cert_flag` and --`key_flag`: both given or
// neither (then `out`'s cert_chain and private_key stay empty). The leaf
// certificate must allow `role`, and the key must be its key.
absl::Status ReadTlsIdentity(absl::string_view cert_flag,
                             const std::string& cert_path,
                             absl::string_view key_flag,
                             const std::string& key_path, TlsRole role,
                             TlsConfig& out);

// A server's credentials: TLS when `tls.cert_chain` is set, requiring a
// client certificate signed by `tls.ca` when that is set too; plaintext
// otherwise.
std::shared_ptr<grpc::ServerCredentials> TlsServerCredentials(
    const TlsConfig& tls);

// A client's credentials: TLS verified by `tls.ca` (with the client
// certificate, if any) when `tls.ca` is set; plaintext otherwise.
std::shared_ptr<grpc::ChannelCredentials> TlsChannelCredentials(
    const TlsConfig& tls);

// A plaintext gRPC server on every interface at `port` for grpc.health.v1
// (the default health service: call grpc::EnableDefaultHealthCheckService
// first): for probes that cannot speak TLS or present a certificate, such
// as Kubernetes' gRPC probes, while the API takes TLS only. Nothing else is
// served there, except what gRPC adds to every server of the program (the
// coordinator's server reflection, which only describes the public API).
class HealthOnlyServer {
 public:
  // An error when the port cannot be had.
  static absl::StatusOr<std::unique_ptr<HealthOnlyServer>> Start(int port);
  ~HealthOnlyServer();  // stops serving at once
  grpc::HealthCheckServiceInterface* health() {
    return server_->GetHealthCheckService();
  }

 private:
  HealthOnlyServer() = default;
  // UNIMPLEMENTED for any other method; gRPC starts no server without a
  // service of its own.
  grpc::CallbackGenericService unknown_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace octet
