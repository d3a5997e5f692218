// Aligned host storage for tensors.
//
// Every allocation is 64-byte aligned: the CPU kernels load 64 bytes at a
// time, and a row that starts mid-line makes every load straddle two lines,
// which costs real bandwidth in the memory-bound kernels. Allocations of
// 2 MiB and more are 2 MiB aligned and advised to use transparent huge pages
// (weights are streamed in full on every forward pass; 4 KiB pages would
// cost a TLB miss every 4 KiB and a page fault per page at load).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <new>
#include <vector>

namespace octet {

inline constexpr size_t kTensorAlignment = 64;
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

template <typename T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U>&) {}  // NOLINT(runtime/explicit)

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePageBytes) {
      return static_cast<T*>(
          ::operator new (bytes, std::align_val_t{kTensorAlignment}));
    }
    void* p = ::operator new (bytes, std::align_val_t{kHugePageBytes});
    // Advice only: without transparent huge pages this is a no-op.
    (void)madvise(p, bytes, MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    ::operator delete (
        p, std::align_val_t{n * sizeof(T) < kHugePageBytes ? kTensorAlignment
                                                           : kHugePageBytes});
  }
  template <typename U>
  bool operator==(const AlignedAllocator<U>&) const {
    return true;
  }
};

// A std::vector whose data() is 64-byte aligned.
template <typename T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace octet
