#pragma once
// Helpers shared by the subcommands of the `pmkit` command line: argument parsing,
// the exit-code policy, wall-clock timing.
//
// Every subcommand receives argv with argv[0] = its own name ("demo", "bench", ...).
// Exit codes: 0 success, 1 a failed run (a pmkit::Error, a failed check), 2 bad
// arguments (the usage goes to stderr).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "pmkit/error.hpp"

namespace pmkit::cli {

// Thrown for a bad command line; guarded() turns it into the usage and exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Walks argv[1..argc) option by option: `--name value` or `--name=value`.
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
  // An integer in [min, max]: plain digits, 1e6 or 2^21.
  std::int64_t count(std::int64_t min = 1, std::int64_t max = INT64_MAX) {
    const std::string v = value();
    const std::int64_t n = parse_count(v);
    if (n < min) throw UsageError(name_ + " = " + v + ": must be at least " + std::to_string(min));
    if (n > max) throw UsageError(name_ + " = " + v + ": must be at most " + std::to_string(max));
    return n;
  }
  // One of the given words.
  std::string choice(const std::vector<std::string>& words) {
    const std::string v = value();
    if (std::find(words.begin(), words.end(), v) != words.end()) return v;
    std::string all;
    for (const auto& w : words) all += (all.empty() ? "" : "|") + w;
    throw UsageError(name_ + " = " + v + ": expected " + all);
  }
  // Rejects an option this subcommand does not know; also checks that a flag got no
  // "=value".
  [[noreturn]] void unknown() const { throw UsageError("unknown option " + name_); }
  void flag() const {
    if (inline_value_) throw UsageError(name_ + " takes no value");
  }

  static std::int64_t parse_count(const std::string& v) {
    const auto bad = [&]() { return UsageError("'" + v + "' is not a count (examples: 1000000, 1e6, 2^20)"); };
    const auto digits = [&](const std::string& s) -> std::int64_t {
      if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) throw bad();
      return std::stoll(s);
    };
    std::int64_t base = 0, exp = 1;
    if (auto p = v.find('^'); p != std::string::npos) {
      base = digits(v.substr(0, p));
      exp = digits(v.substr(p + 1));
    } else if (auto e = v.find_first_of("eE"); e != std::string::npos) {
      const std::int64_t mant = digits(v.substr(0, e));
      const std::int64_t ten = digits(v.substr(e + 1));
      if (ten > 18) throw bad();
      base = mant;
      for (std::int64_t i = 0; i < ten; ++i) {
        if (base > INT64_MAX / 10) throw bad();
        base *= 10;
      }
      return base;
    } else {
      return digits(v);
    }
    std::int64_t r = 1;
    for (std::int64_t i = 0; i < exp; ++i) {
      if (base != 0 && r > INT64_MAX / base) throw bad();
      r *= base;
    }
    return r;
  }

 private:
  std::vector<std::string> args_;
  std::size_t pos_ = 0;
  std::string name_;
  std::optional<std::string> inline_value_;
};

// The message of an exception without the "pmkit: " that pmkit::Error puts first
// (the command line names itself already).
inline std::string message_of(const std::exception& e) {
  const std::string m = e.what();
  return m.rfind("pmkit: ", 0) == 0 ? m.substr(7) : m;
}

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
