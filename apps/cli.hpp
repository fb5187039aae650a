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
#include <cstdio>
#include <fstream>
#include <functional>
#include <new>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "pmkit/backend.hpp"
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

// The words separated by '|', as a usage line and a usage error list them.
inline std::string joined(const std::vector<std::string>& words) {
  std::string all;
  for (const auto& w : words) all += (all.empty() ? "" : "|") + w;
  return all;
}

// The kernels' names that a command accepts (ArgReader::kernel) and its --help lists:
// every kernel of the library, or the PIC shapes (cloud-in-cell, TSC, M'4).
inline const std::vector<std::string>& all_kernel_names() {
  static const std::vector<std::string> names = {"linear",   "cic",      "tsc",      "mp4",      "bspline2", "bspline3",
                                                 "bspline4", "bspline5", "bspline6", "bspline7", "bspline8"};
  return names;
}
inline const std::vector<std::string>& pic_kernel_names() {
  static const std::vector<std::string> names = {"cic", "tsc", "mp4"};
  return names;
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
  // A finite real number in (0, max], or in (0, max) where `max_allowed` is false, and
  // at least `min`; `example` as for count().
  double positive(const char* example, double max = HUGE_VAL, bool max_allowed = true, double min = 0) {
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
    if (x < min) fail(v, "must be at least " + number(min), example);
    if (x > max || (!max_allowed && x == max))
      fail(v, std::string(max_allowed ? "must be at most " : "must be below ") + number(max), example);
    return x;
  }
  // One of the given words.
  std::string choice(const std::vector<std::string>& words) {
    const std::string v = value();
    if (std::find(words.begin(), words.end(), v) != words.end()) return v;
    throw UsageError(name_ + " = " + v + ": expected " + joined(words));
  }
  // A kernel by one of `names` (Kernel::from_name reads it), the list that the
  // command's --help prints (joined(names)).
  Kernel kernel(const std::vector<std::string>& names) { return Kernel::from_name(choice(names)); }
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
  static std::string number(double x) {
    std::ostringstream s;
    s << x;
    return s.str();
  }
  [[noreturn]] void fail(const std::string& v, const std::string& why, const char* example) const {
    throw UsageError(name_ + " = " + v + ": " + why + " (example: " + name_ + " " + example + ")");
  }

  std::vector<std::string> args_;
  std::size_t pos_ = 0;
  std::string name_;
  std::optional<std::string> inline_value_;
};

// Runs a subcommand body with the exit-code policy of the command line. The body
// returns 0 or 1; --help is handled by the body (usage on stdout, return 0). Each error
// goes to stderr in one write, prefixed "pmkit <command>: ", and only where `report` is
// true (a distributed run reports on its first rank: every rank fails alike).
inline int guarded(const char* command, const std::string& usage, const std::function<int()>& body,
                   bool report = true) {
  std::string message;
  int status = 1;
  try {
    return body();
  } catch (const UsageError& e) {
    message = std::string(e.what()) + "\n\n" + usage;
    status = 2;
  } catch (const pmkit::Error& e) {
    message = message_of(e) + " [" + pmkit::to_string(e.code()) + "]\n";
  } catch (const std::bad_alloc&) {
    message = "not enough memory for these sizes\n";
  } catch (const std::exception& e) {
    message = message_of(e) + "\n";
  }
  if (report) {
    const std::string line = "pmkit " + std::string(command) + ": " + message;
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
  }
  return status;
}

// The checks of a run's set-up that every command shares (cli.cpp), each a UsageError
// naming the option: arguments that cannot run here exit 2 before any work.
// `backend` is built and has a device: "--backend cuda: this build of pmkit has no CUDA
// backend ..." or "--backend cuda: no CUDA device is available".
void check_backend(Backend backend);
// `bytes` (the arrays a run allocates, estimated) fit in the memory available to
// `backend`: the host's available memory, or the CUDA device's free memory.
void check_memory(double bytes, Backend backend);

// An output file written beside its destination (`path` with a suffix) and renamed onto
// it by commit(): an existing file stays as it is until the output is complete, and is
// never touched when the run fails. The constructor opens the temporary file, so that an
// unwritable destination fails before any work (std::runtime_error); the destructor
// removes it unless committed.
class OutputFile {
 public:
  explicit OutputFile(std::string path);
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();
  std::ostream& stream() { return out_; }
  // Closes the temporary file and renames it onto the destination.
  void commit();

 private:
  std::string path_, temporary_;
  std::ofstream out_;
  bool committed_ = false;
};

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
