// The rendezvous store: the small key-value store through which the ranks of
// a tensor-parallel group exchange what they need to connect (Gloo's
// addresses, NCCL's unique id). The coordinator serves one over gRPC
// (RendezvousServer); workers reach it with GrpcStore; InMemoryStore serves
// one process (and backs the server).
//
// Keys are set once per group and read by every rank; a Get waits until its
// key is set or the deadline passes, so a rank that never arrives ends in a
// DeadlineExceeded error on the others that names the key, never a hang.
#pragma once

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rpc/tls.h"

namespace octet {

// Thread-safe: any number of threads may call any method at once.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  // Stores `value` under `key` (replacing an earlier value).
  virtual absl::Status Set(const std::string& key,
                           const std::string& value) = 0;
  // The value under `key`, waiting for it until `deadline`.
  virtual absl::StatusOr<std::string> Get(const std::string& key,
                                          absl::Time deadline) = 0;
};

// A store in this process's memory.
class InMemoryStore : public KeyValueStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Time deadline) override;

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

// Serves a store over gRPC (service octet.internal.v1.Rendezvous) until
// destroyed.
class RendezvousServer {
 public:
  // Listens on `address` ("host:port"; port 0 picks a free one) and serves
  // `store`, which must outlive the server. With a `token`, only calls that
  // carry it are served (rpc/bearer_token.h). With `tls` (its
  // cert_chain set: rpc/tls.h), only over TLS, and with `tls.ca` only
  // to clients with a certificate it signed.
  static absl::StatusOr<std::unique_ptr<RendezvousServer>> Start(
      const std::string& address, KeyValueStore* store,
      const std::string& token = "", const TlsConfig& tls = {});
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  // "host:port" with the port actually bound.
  const std::string& address() const { return address_; }

 private:
  struct Impl;
  RendezvousServer(std::unique_ptr<Impl> impl, std::string address);
  std::unique_ptr<Impl> impl_;
  std::string address_;
};

// A client of a RendezvousServer. Waits for the server to come up (until the
// call's deadline) rather than failing at once, since ranks may start before
// the coordinator listens.
class GrpcStore : public KeyValueStore {
 public:
  // `token`: the server's token, if it has one. `tls`: TLS verified by its
  // ca, when set (rpc/tls.h); plaintext otherwise.
  explicit GrpcStore(const std::string& address, std::string token = "",
                     const TlsConfig& tls = {});
  ~GrpcStore() override;
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Time deadline) override;

  // How long a Set waits for an unreachable server.
  static constexpr absl::Duration kSetTimeout = absl::Seconds(30);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  const std::string token_;
};

}  // namespace octet
