// Packing into the panel layout of bf16_panels.h, and reading it back.
#include "kernels/cpu/bf16_panels.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace octet {
namespace {

// The width of the panel that holds output column (weight row) `row`.
int64_t PanelWidth(int64_t n, int64_t row) {
  const int64_t c0 = row / kBf16PanelColumns * kBf16PanelColumns;
  return std::min(kBf16PanelColumns, (n + 15) / 16 * 16 - c0);
}

// Where W[row][col] lies in the panels of a weight of n x k in k_blocks
// blocks (bf16_panels.h): its panel's start, its block's pairs in that
// panel, then its pair and its half.
int64_t PanelIndex(int64_t n, int64_t k, int64_t k_blocks, int64_t row,
                   int64_t col) {
  const int64_t kb = k / k_blocks, kb_pad = kb + kb % 2;
  const int64_t c0 = row / kBf16PanelColumns * kBf16PanelColumns;
  const int64_t width = PanelWidth(n, row);
  const int64_t block = col / kb, t = col % kb;
  return c0 * k_blocks * kb_pad + block * kb_pad * width +
         ((t / 2) * width + (row - c0)) * 2 + t % 2;
}

}  // namespace

int64_t Bf16PanelElements(int64_t n, int64_t k, int64_t k_blocks) {
  if (n <= 0 || k <= 0 || k_blocks <= 0) return 0;
  const int64_t kb = k / k_blocks;
  return (n + 15) / 16 * 16 * k_blocks * (kb + kb % 2);
}

absl::Status PackBf16Panels(const Bf16* w, int64_t n, int64_t k,
                            int64_t k_blocks, Bf16* panels) {
  if (n < 0 || k < 0 || k_blocks < 1 || k % k_blocks != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("PackBf16Panels: a ", n, " x ", k, " weight in ", k_blocks,
                     " K blocks (k_blocks must divide K)"));
  }
  const int64_t elements = Bf16PanelElements(n, k, k_blocks);
  if (elements == 0) return absl::OkStatus();
  if (w == nullptr || panels == nullptr) {
    return absl::InvalidArgumentError("PackBf16Panels: null operand");
  }
  // Zero first: the padding (columns past n, a block's odd last pair).
  std::memset(panels, 0, elements * sizeof(Bf16));
  // Row by row (read in order), a block's pairs a panel's width apart.
  const int64_t kb = k / k_blocks;
  for (int64_t row = 0; row < n; ++row) {
    const int64_t pair_stride = 2 * PanelWidth(n, row);
    for (int64_t j = 0; j < k_blocks; ++j) {
      Bf16* out = panels + PanelIndex(n, k, k_blocks, row, j * kb);
      const Bf16* in = w + row * k + j * kb;
      for (int64_t t = 0; t < kb; ++t) {
        out[(t / 2) * pair_stride + t % 2] = in[t];
      }
    }
  }
  return absl::OkStatus();
}

Bf16 Bf16PanelAt(const Bf16* panels, int64_t n, int64_t k, int64_t k_blocks,
                 int64_t row, int64_t col) {
  return panels[PanelIndex(n, k, k_blocks, row, col)];
}

}  // namespace octet
