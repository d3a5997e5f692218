// Packing into the panel layouts of panels.h, and reading them back.
#include "kernels/cpu/panels.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/panel_layout.h"

namespace octet {
namespace {

using cpu_internal::Bf16PanelLayout;
using cpu_internal::E4m3PanelLayout;

int64_t PaddedBlock(int64_t k, int64_t k_blocks, int64_t step) {
  return (k / k_blocks + step - 1) / step * step;
}

// The width of the panel that holds output column (weight row) `row`.
int64_t PanelWidth(int64_t n, int64_t row) {
  const int64_t c0 = row / kPanelColumns * kPanelColumns;
  return std::min(kPanelColumns, (n + 15) / 16 * 16 - c0);
}

// Where W[row][col] lies in the panels of a weight of n x k in k_blocks
// blocks (panels.h): its panel's start, its block's start in that panel,
// then its column and its K value within the block.
template <typename Layout>
int64_t PanelIndex(int64_t n, int64_t k, int64_t k_blocks, int64_t row,
                   int64_t col) {
  const int64_t kb = k / k_blocks;
  const int64_t kb_pad = PaddedBlock(k, k_blocks, Layout::kStep);
  const int64_t c0 = row / kPanelColumns * kPanelColumns;
  const int64_t width = PanelWidth(n, row);
  return c0 * k_blocks * kb_pad + (col / kb) * kb_pad * width +
         Layout::Column(row - c0) + Layout::Offset(col % kb, width);
}

int64_t Elements(int64_t n, int64_t k, int64_t k_blocks, int64_t step) {
  if (n <= 0 || k <= 0 || k_blocks <= 0) return 0;
  return (n + 15) / 16 * 16 * k_blocks * PaddedBlock(k, k_blocks, step);
}

// visit(i, p) for every value of rows [row0, row1) of W: i its index in W
// [n][k] row-major, p in the panels; row by row of W, so W is read or
// written in order.
template <typename Layout, typename Visit>
void ForEachValue(int64_t n, int64_t k, int64_t k_blocks, int64_t row0,
                  int64_t row1, Visit visit) {
  const int64_t kb = k / k_blocks;
  for (int64_t row = row0; row < row1; ++row) {
    const int64_t width = PanelWidth(n, row);
    for (int64_t j = 0; j < k_blocks; ++j) {
      const int64_t p = PanelIndex<Layout>(n, k, k_blocks, row, j * kb);
      for (int64_t t = 0; t < kb; ++t) {
        visit(row * k + j * kb + t, p + Layout::Offset(t, width));
      }
    }
  }
}

template <typename Layout, typename T>
absl::Status Pack(const T* w, int64_t n, int64_t k, int64_t k_blocks, T* panels,
                  int threads, const char* what) {
  if (n < 0 || k < 0 || k_blocks < 1 || k % k_blocks != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a ", n, " x ", k, " weight in ", k_blocks,
                     " K blocks (k_blocks must divide K)"));
  }
  const int64_t elements = Elements(n, k, k_blocks, Layout::kStep);
  if (elements == 0) return absl::OkStatus();
  if (w == nullptr || panels == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": null operand"));
  }
  // Panel by panel, a panel's values (its K blocks one after the other)
  // in one range of `panels` that one thread writes alone: zero first (the
  // padding: columns past n, the end of a block), then the values.
  const int64_t kb_pad = PaddedBlock(k, k_blocks, Layout::kStep);
  const int64_t count = (n + kPanelColumns - 1) / kPanelColumns;
#pragma omp parallel for schedule(static) \
    num_threads(threads) if (threads > 1 && count > 1)
  for (int64_t panel = 0; panel < count; ++panel) {
    const int64_t c0 = panel * kPanelColumns;
    std::memset(panels + c0 * k_blocks * kb_pad, 0,
                PanelWidth(n, c0) * k_blocks * kb_pad * sizeof(T));
    ForEachValue<Layout>(n, k, k_blocks, c0, std::min(n, c0 + kPanelColumns),
                         [&](int64_t i, int64_t p) { panels[p] = w[i]; });
  }
  return absl::OkStatus();
}

}  // namespace

int64_t Bf16PanelElements(int64_t n, int64_t k, int64_t k_blocks) {
  return Elements(n, k, k_blocks, Bf16PanelLayout::kStep);
}

int64_t E4m3PanelBytes(int64_t n, int64_t k, int64_t k_blocks) {
  return Elements(n, k, k_blocks, E4m3PanelLayout::kStep);
}

absl::Status PackBf16Panels(const Bf16* w, int64_t n, int64_t k,
                            int64_t k_blocks, Bf16* panels, int threads) {
  return Pack<Bf16PanelLayout>(w, n, k, k_blocks, panels, threads,
                               "PackBf16Panels");
}

absl::Status PackE4m3Panels(const uint8_t* w, int64_t n, int64_t k,
                            int64_t k_blocks, uint8_t* panels, int threads) {
  return Pack<E4m3PanelLayout>(w, n, k, k_blocks, panels, threads,
                               "PackE4m3Panels");
}

void UnpackBf16Panels(const Bf16* panels, int64_t n, int64_t k,
                      int64_t k_blocks, Bf16* w) {
  ForEachValue<Bf16PanelLayout>(
      n, k, k_blocks, 0, n, [&](int64_t i, int64_t p) { w[i] = panels[p]; });
}

void UnpackE4m3Panels(const uint8_t* panels, int64_t n, int64_t k,
                      int64_t k_blocks, uint8_t* w) {
  ForEachValue<E4m3PanelLayout>(
      n, k, k_blocks, 0, n, [&](int64_t i, int64_t p) { w[i] = panels[p]; });
}

Bf16 Bf16PanelAt(const Bf16* panels, int64_t n, int64_t k, int64_t k_blocks,
                 int64_t row, int64_t col) {
  return panels[PanelIndex<Bf16PanelLayout>(n, k, k_blocks, row, col)];
}

uint8_t E4m3PanelAt(const uint8_t* panels, int64_t n, int64_t k,
                    int64_t k_blocks, int64_t row, int64_t col) {
  return panels[PanelIndex<E4m3PanelLayout>(n, k, k_blocks, row, col)];
}

}  // namespace octet
