#include "worker/tp_group.h"

#include <utility>

#include "base/status_macros.h"
#include "parallel/staged_communicator.h"
#ifdef OCTET_HAVE_NCCL
#include "parallel/nccl_communicator.h"
#endif

namespace octet {

absl::Status CheckTpTransport(const Backend& backend, bool nccl) {
  if (!nccl || backend.kind() == DeviceKind::kCuda) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "transport nccl needs CUDA ranks, and this rank runs on " +
      backend.Describe());
}

absl::StatusOr<std::unique_ptr<Communicator>> JoinTpGroup(
    KeyValueStore& store, Backend& backend, const TpGroup& group) {
  OCTET_RETURN_IF_ERROR(CheckTpTransport(backend, group.nccl));
  if (group.nccl) {
#ifdef OCTET_HAVE_NCCL
    return NewNcclCommunicator(
        store, group.rank, group.size,
        {.group = group.name,
         .device = group.cuda_device,
         .stream = static_cast<cudaStream_t>(backend.cuda_stream()),
         .timeout = group.timeout});
#else
    return absl::UnimplementedError(
        "this program was built without NCCL (transport nccl)");
#endif
  }
  OCTET_ASSIGN_OR_RETURN(
      std::unique_ptr<Communicator> comm,
      NewCpuCommunicator(store, group.rank, group.size, group.transport,
                         group.name, group.timeout, group.collective_host));
  if (backend.kind() == DeviceKind::kCpu) return comm;
  return NewStagedCommunicator(backend, std::move(comm));
}

}  // namespace octet
