// The shared token of a worker group on the wire: every internal call
// between hosts (coordinator → worker, worker → rendezvous store) carries
// "authorization: Bearer TOKEN" when the group has a token, and the
// receiving side refuses calls without it (UNAUTHENTICATED). The token is
// only as secret as the link: TLS (rpc/tls.h) keeps it from the
// network, plaintext does not. Spawned workers on private Unix sockets
// take calls without one; the loopback store of their group still has one,
// a fresh random one per group.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <random>
#include <string>

#include "absl/strings/str_format.h"

namespace octet {

// A fresh token: 128 bits from the system's random device, in hex.
inline std::string NewBearerToken() {
  std::random_device random;
  std::string token;
  for (int i = 0; i < 4; ++i) {
    absl::StrAppendFormat(&token, "%08x", static_cast<uint32_t>(random()));
  }
  return token;
}

// Adds the token to a call (nothing for an empty token).
inline void AddBearerToken(const std::string& token,
                           grpc::ClientContext& context) {
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
}

// OK when the group has no token or the call carries it; UNAUTHENTICATED
// otherwise. Compares in time independent of where the values differ.
inline grpc::Status CheckBearerToken(const std::string& token,
                                     const grpc::ServerContext& context) {
  if (token.empty()) return grpc::Status::OK;
  const std::string expected = "Bearer " + token;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it != metadata.end() && it->second.size() == expected.size()) {
    unsigned char differ = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      differ |= static_cast<unsigned char>(it->second.data()[i] ^ expected[i]);
    }
    if (differ == 0) return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "this call needs the worker group's token");
}

}  // namespace octet
