#pragma once
// Helpers shared by the subcommands of the `pmkit` command line: argument parsing,
// the exit-code policy, wall-clock timing.
//
// Every subcommand receives argv with argv[0] = its own name ("demo", "bench", ...).
// Exit codes: 0 success, 1 a failed run (a pmkit::Error, a failed check), 2 bad
// arguments (the usage goes to stderr). A subcommand checks all its arguments before
// any work, so that arguments that cannot run cost nothing.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "pmkit/error.hpp"
#include "pmkit/kernels.hpp"

namespace pmkit::cli {

// Thrown for a bad command line; guarded() turns it into the usage and exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The most particles a plan holds (fewer than 2^32 - 1, in Plan and PairPlan alike).
constexpr std::int64_t kMaxParticles = (std::int64_t(1) << 32) - 2;

// The message of an exception without the "pmkit: " that pmkit::Error puts first
// (the command line names itself already).
inline std::string message_of(const std::exception& e) {
  const std::string m = e.what();
  return m.rfind("pmkit: ", 0) == 0 ? m.substr(7) : m;
}

// Walks argv[1..argc) option by option: `--name value` or `--name=value`. A usage
// error names the option and its value, and for a number gives a valid example.
class ArgReader {
 public:
  ArgReader(int argc, char** argv) : args_(argv + std::min(argc, 1), argv + argc) {}

  // Advances to the next option; false at the end. Anything that does not start
  // with "--" (or is "-h") is a usage error.
  bool next() {
    if (pos_ >= args_.size()) return false;
    std::string a = args_[pos_++];
    inline_value_.reset();
    if (a == "-h") a = "--help";
    if (a.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + a + "'");
    const auto eq = a.find('=');
    if (eq != std::string::npos) {
      inline_value_ = a.substr(eq + 1);
      a.resize(eq);
    }
    name_ = a;
    return true;
  }
  const std::string& name() const { return name_; }
  bool is(const char* option) const { return name_ == option; }

  // The value of the current option.
  std::string value() {
    if (inline_value_) {
      std::string v = *inline_value_;
      inline_value_.reset();
      return v;
    }
    if (pos_ >= args_.size()) throw UsageError(name_ + " needs a value");
    return args_[pos_++];
  }
  // A whole number in [min, max], as digits, 1e6 or 2^20; `example` is a valid value
  // of this option for the error message.
  std::int64_t count(std::int64_t min, std::int64_t max, const char* example) {
    const std::string v = value();
    const std::optional<std::int64_t> n = parse_count(v);
    if (!n) fail(v, "expected a whole number", example);
    if (*n < min) fail(v, "must be at least " + std::to_string(min), example);
    if (*n > max) fail(v, "must be at most " + std::to_string(max), example);
    return *n;
  }
  // A positive finite real number; `example` as for count().
  double positive(const char* example) {
    const std::string v = value();
    std::size_t used = 0;
    double x = 0;
    try {
      x = std::stod(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v.size() || !std::isfinite(x)) fail(v, "expected a number", example);
    if (!(x > 0)) fail(v, "must be positive", example);
    return x;
  }
  // One of the given words.
  std::string choice(const std::vector<std::string>& words) {
    const std::string v = value();
    if (std::find(words.begin(), words.end(), v) != words.end()) return v;
    std::string all;
    for (const auto& w : words) all += (all.empty() ? "" : "|") + w;
    throw UsageError(name_ + " = " + v + ": expected " + all);
  }
  // A kernel by name (Kernel::from_name).
  Kernel kernel() {
    const std::string v = value();
    try {
      return Kernel::from_name(v);
    } catch (const Error& e) {
      throw UsageError(name_ + ": " + message_of(e));
    }
  }
  // Rejects an option this subcommand does not know; also checks that a flag got no
  // "=value".
  [[noreturn]] void unknown() const { throw UsageError("unknown option " + name_); }
  void flag() const {
    if (inline_value_) throw UsageError(name_ + " takes no value");
  }

  // Digits, 1e6 or 2^20; nothing for anything else (a sign, a fraction) or an overflow.
  static std::optional<std::int64_t> parse_count(const std::string& v) {
    const auto digits = [](const std::string& s) -> std::optional<std::int64_t> {
      if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos)
        return std::nullopt;
      return std::stoll(s);
    };
    std::optional<std::int64_t> base, times;
    std::int64_t factor = 10;
    if (const auto p = v.find('^'); p != std::string::npos) {
      base = 1;
      factor = digits(v.substr(0, p)).value_or(-1);
      times = digits(v.substr(p + 1));
    } else if (const auto e = v.find_first_of("eE"); e != std::string::npos) {
      base = digits(v.substr(0, e));
      times = digits(v.substr(e + 1));
    } else {
      return digits(v);
    }
    if (!base || !times || factor < 0) return std::nullopt;
    std::int64_t r = *base;
    for (std::int64_t i = 0; i < *times && r != 0; ++i) {
      if (factor != 0 && r > INT64_MAX / factor) return std::nullopt;
      r *= factor;
    }
    return r;
  }

 private:
  [[noreturn]] void fail(const std::string& v, const std::string& why, const char* example) const {
    throw UsageError(name_ + " = " + v + ": " + why + " (example: " + name_ + " " + example + ")");
  }

  std::vector<std::string> args_;
  std::size_t pos_ = 0;
  std::string name_;
  std::optional<std::string> inline_value_;
};

// Runs a subcommand body with the exit-code policy of the command line. The body
// returns 0 or 1; --help is handled by the body (usage on stdout, return 0).
inline int guarded(const char* command, const char* usage, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::cerr << "pmkit " << command << ": " << e.what() << "\n\n" << usage;
    return 2;
  } catch (const pmkit::Error& e) {
    std::cerr << "pmkit " << command << ": " << message_of(e) << " [" << pmkit::to_string(e.code())
              << "]\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "pmkit " << command << ": not enough memory for these sizes\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "pmkit " << command << ": " << message_of(e) << "\n";
    return 1;
  }
}

// Seconds taken by f(), on the steady clock.
template <class F>
double seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace pmkit::cli
