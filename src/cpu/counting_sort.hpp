#pragma once
// The CPU counting sort of both plans' binnings (the mesh plan's by row, the pair plan's
// by cell): parallel and stable.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/openmp.hpp"

namespace pmkit::cpu {

// f(t, lo, hi) for each of `shares` contiguous shares [lo, hi) of [0, n), in parallel;
// taken share by share, so that a team smaller than asked still does them all.
template <class F>
void for_each_share(std::size_t n, int shares, F&& f) {
#pragma omp parallel num_threads(shares)
  for (int t = detail::openmp_thread_id(); t < shares; t += detail::openmp_team_size())
    f(t, n * t / shares, n * (t + 1) / shares);
}

// Sorts items [0, n) by key: key_of(i, key) sets item i's key (< keys), or returns false
// to reject the item. In `shares` parallel shares, each share's keys are counted, then
// placed at offsets that put share t's items of a key after those of shares < t: the
// serial counting sort's order (by index within a key), whatever the share count.
// place(i, slot) puts item i at its sorted slot. `key` (n entries) and `count` (keys *
// shares) are scratch. Returns the smallest rejected index, with nothing placed; or n,
// with every item placed and, if asked, start[k] the first slot of key k (start[keys] = n).
template <class KeyOf, class Place>
std::size_t counting_sort(std::size_t n, std::size_t keys, int shares, KeyOf&& key_of, Place&& place,
                          std::vector<std::uint32_t>& key, std::vector<std::uint32_t>& count,
                          std::vector<std::uint32_t>* start = nullptr) {
  key.resize(n);
  count.assign(keys * static_cast<std::size_t>(shares), 0u);
  std::vector<std::size_t> first_bad(shares, n);
  for_each_share(n, shares, [&](int t, std::size_t lo, std::size_t hi) {
    std::uint32_t* c = count.data() + keys * t;
    for (std::size_t i = lo; i < hi; ++i) {
      if (!key_of(i, key[i])) {
        first_bad[t] = i;
        break;
      }
      ++c[key[i]];
    }
  });
  const std::size_t bad = *std::min_element(first_bad.begin(), first_bad.end());
  if (bad < n) return bad;
  if (start) start->resize(keys + 1);
  std::uint32_t running = 0;
  for (std::size_t k = 0; k < keys; ++k) {
    if (start) (*start)[k] = running;
    for (int t = 0; t < shares; ++t) {
      const std::uint32_t c = count[keys * t + k];
      count[keys * t + k] = running;
      running += c;
    }
  }
  if (start) (*start)[keys] = running;
  for_each_share(n, shares, [&](int t, std::size_t lo, std::size_t hi) {
    std::uint32_t* offset = count.data() + keys * t;
    for (std::size_t i = lo; i < hi; ++i) place(i, offset[key[i]]++);
  });
  return n;
}

}  // namespace pmkit::cpu
