#pragma once
// The command-line conventions of every tarn program (`tarn`, `tarn bench ...` and the benches
// of tools/bench/), on CLI11, so that they all behave alike:
// - -h and --help print, on stdout, every flag with its value, range and default, and exit 0;
// - a bad command line (unknown flag or command, missing or malformed value, number out of
//   range) is one line on stderr, "<program> <command>: <what is wrong> (see <program>
//   <command> --help)", and exit status 2, the status of every user error (docs/design.md
//   section 1);
// - a flag given twice keeps its last value, lists are comma-separated (--n 128,256).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace tarn::cli {

// Sets `app` up the tarn way (help layout, -h/--help, last value wins). Call it before adding
// subcommands: CLI11 copies the settings into each subcommand when it is added.
void configure(CLI::App& app);

// Parses the command line into `app`. Returns nullopt when the program should go on, else its
// exit status: 0 once the help asked for is printed, 2 once a usage error is.
std::optional<int> parse(CLI::App& app, int argc, const char* const* argv);

// Value checks. The message names the value and what was expected ("--beam: 100 is out of
// range: it must be from 1 to 64"); the description ("1 to 64") is shown in the help.
CLI::Validator integer(int64_t lo, int64_t hi);
CLI::Validator real(double lo, double hi);
CLI::Validator one_of(const std::vector<std::string>& allowed);

// A comma-separated list (--n 128,256), each item checked by `check`. Given twice, the last
// list replaces the first, as any other flag's last value does (CLI11 would append).
template <class T>
CLI::Option* add_list(CLI::App& app, const std::string& name, std::vector<T>& values, const std::string& description,
                      const CLI::Validator& check) {
  return app.add_option(name, values, description)
      ->type_name("LIST")
      ->delimiter(',')
      ->allow_extra_args(false)  // one list per flag: `--n 1,2 RECIPE` leaves RECIPE alone
      ->trigger_on_parse()       // each occurrence assigns the list anew
      ->check(check);
}

// --name VALUE: an integer, or a number, from lo to hi; `value_name` stands for it in the help.
// [lo, hi] must fit the type T that holds the value, so the check runs before any narrowing:
// a flag declared otherwise is a bug, thrown when the command line is built.
template <class T>
CLI::Option* add_integer(CLI::App& app, const std::string& name, T& value, int64_t lo, int64_t hi,
                         const std::string& description, const std::string& value_name = "N") {
  if constexpr (std::is_integral_v<T>) {
    using L = std::numeric_limits<T>;
    const bool fits = lo <= hi && (std::is_signed_v<T> ? lo >= static_cast<int64_t>(L::min()) : lo >= 0) &&
                      (hi < 0 || static_cast<uint64_t>(hi) <= static_cast<uint64_t>(L::max()));
    if (!fits) throw std::logic_error(name + ": the range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                      "] does not fit the type that holds the value");
  }
  return app.add_option(name, value, description)->type_name(value_name)->check(integer(lo, hi));
}
inline CLI::Option* add_real(CLI::App& app, const std::string& name, double& value, double lo, double hi,
                             const std::string& description, const std::string& value_name) {
  return app.add_option(name, value, description)->type_name(value_name)->check(real(lo, hi));
}

// A subcommand and what it does, run once the whole command line has parsed.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

}  // namespace tarn::cli
