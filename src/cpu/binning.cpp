#include "cpu/binning.hpp"

#include <algorithm>

namespace pmkit::cpu {

std::vector<std::size_t> balanced_slabs(const std::vector<std::size_t>& plane_start, int min_width,
                                        int max_chunks) {
  const int planes = static_cast<int>(plane_start.size()) - 1;
  const std::size_t n = plane_start.back();
  int chunks = std::min(planes / std::max(min_width, 1), max_chunks);
  if (chunks > 1 && chunks % 2 == 1) --chunks;  // parity colouring needs an even count on a ring
  if (chunks < 2) chunks = 1;
  std::vector<int> bound(chunks + 1);
  bound[0] = 0;
  bound[chunks] = planes;
  for (int k = 1; k < chunks; ++k) {
    const std::size_t target = n * static_cast<std::size_t>(k) / chunks;
    int p = static_cast<int>(std::lower_bound(plane_start.begin(), plane_start.end(), target) -
                             plane_start.begin());
    p = std::max(p, bound[k - 1] + min_width);
    p = std::min(p, planes - (chunks - k) * min_width);
    bound[k] = p;
  }
  std::vector<std::size_t> begin(chunks + 1);
  for (int k = 0; k <= chunks; ++k) begin[k] = plane_start[bound[k]];
  return begin;
}

}  // namespace pmkit::cpu
