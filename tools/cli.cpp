#include "tools/cli.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>
#include <type_traits>

namespace tarn::cli {
namespace {

// CLI11 shows an option as "NAME TYPE:CHECK:CHECK=DEFAULT". This layout puts the checks and the
// default after the description, and wraps it (CLI11 2.1 does not):
//   --beam N                  beam width; 1 is greedy decoding (1 to 64; default: 1)
class Formatter : public CLI::Formatter {
 public:
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (opt->get_positional() || opt->get_type_size() == 0) return "";  // flags take no value
    const bool repeatable = opt->get_multi_option_policy() == CLI::MultiOptionPolicy::TakeAll;
    return " " + type_parts(opt).front() + (repeatable ? " ..." : "");
  }

  std::string make_option_desc(const CLI::Option* opt) const override {
    std::vector<std::string> notes = type_parts(opt);
    notes.erase(notes.begin());
    if (opt->get_delimiter() != '\0')  // a list: the checks apply to each item
      for (std::string& check : notes) check = "each " + check;
    std::string fallback = opt->get_default_str();
    if (fallback.size() >= 2 && fallback.front() == '[') fallback = fallback.substr(1, fallback.size() - 2);  // a list
    if (!fallback.empty() && opt->get_type_size() != 0) notes.push_back("default: " + fallback);
    if (opt->get_required()) notes.push_back("required");
    std::string out = opt->get_description();
    for (size_t i = 0; i < notes.size(); ++i) out += (i == 0 ? " (" : "; ") + notes[i];
    return wrap(notes.empty() ? out : out + ")");
  }

  // Headings in lower case, as the rest of tarn's output: "options:", "arguments:".
  std::string make_group(std::string group, bool positional, std::vector<const CLI::Option*> opts) const override {
    std::transform(group.begin(), group.end(), group.begin(), [](unsigned char c) { return std::tolower(c); });
    return CLI::Formatter::make_group(group, positional, opts);
  }

  std::string make_usage(const CLI::App* app, std::string name) const override {
    return "\n" + get_label("Usage") + ": " + synopsis(app, name, true) + "\n";
  }

  // A list of commands shows each one's synopsis and the first paragraph of its description.
  std::string make_subcommand(const CLI::App* sub) const override {
    const std::string& description = sub->get_description();
    std::stringstream out;
    CLI::detail::format_help(out, synopsis(sub, sub->get_name(), false),
                             wrap(description.substr(0, description.find("\n\n"))), column_width_);
    return out.str();
  }

 private:
  // Lines that end by column 100 of the help.
  std::string wrap(const std::string& text) const {
    std::string out, line;
    std::stringstream words(text);
    for (std::string word; words >> word; line += (line.empty() ? "" : " ") + word)
      if (!line.empty() && column_width_ + line.size() + 1 + word.size() > 100) out += line + "\n", line.clear();
    return out + line;
  }

  // "tarn eval --checkpoint DIR --data FILE [options]": the required flags, the others, the
  // arguments, the subcommand.
  std::string synopsis(const CLI::App* app, const std::string& name, bool with_options) const {
    std::string out = name, others;
    for (const CLI::Option* opt : app->get_options([](const CLI::Option* o) { return o->nonpositional(); }))
      if (opt->get_required())
        out += " " + make_option_name(opt, false) + make_option_opts(opt);
      else if (with_options)
        others = " [" + get_label("OPTIONS") + "]";
    out += others;
    for (const CLI::Option* arg : app->get_options([](const CLI::Option* o) { return o->get_positional(); }))
      out += " " + make_option_usage(arg);
    return out + (app->get_require_subcommand_min() > 0 ? " " + get_label("SUBCOMMAND") : "");
  }

  // The value's name, then each validator's description (CLI11 joins them with ':').
  static std::vector<std::string> type_parts(const CLI::Option* opt) {
    std::vector<std::string> parts;
    std::stringstream in(opt->get_type_name());
    for (std::string part; std::getline(in, part, ':');) parts.push_back(part);
    if (parts.empty()) parts.emplace_back();
    return parts;
  }
};

// The program and the subcommands given: "tarn bench attention".
std::vector<CLI::App*> chain(CLI::App& app) {
  std::vector<CLI::App*> apps = {&app};
  for (std::vector<CLI::App*> subs = app.get_subcommands(); !subs.empty(); subs = subs.front()->get_subcommands())
    apps.push_back(subs.front());
  return apps;
}

int usage_error(const std::vector<CLI::App*>& apps, size_t depth, const std::string& message) {
  std::string path;
  for (size_t i = 0; i < depth; ++i) path += (i ? " " : "") + apps[i]->get_name();
  std::cerr << path << ": " << message << " (see " << path << " --help)" << std::endl;
  return 2;
}

// What CLI11 could not place. Extras are allowed so that they come here, named our way, before
// any other complaint: a misspelt --checkpont explains the "--checkpoint is required".
std::optional<int> report_unknown(const std::vector<CLI::App*>& apps) {
  for (size_t i = 0; i < apps.size(); ++i) {
    std::vector<std::string> rest = apps[i]->remaining();
    rest.erase(std::remove(rest.begin(), rest.end(), "--"), rest.end());  // CLI11 keeps the end-of-options mark
    if (rest.empty()) continue;
    const std::string& first = rest.front();
    if (first.size() > 1 && first[0] == '-')
      return usage_error(apps, i + 1, "unknown option " + first.substr(0, first.find('=')));
    const bool command = apps[i]->get_require_subcommand_min() > 0 && i + 1 == apps.size();
    return usage_error(apps, i + 1, (command ? "unknown command \"" : "unexpected argument \"") + first + "\"");
  }
  return std::nullopt;
}

// CLI11 2.1's wording, where a plainer one exists.
std::string plain_message(const CLI::ParseError& e, int argc, const char* const* argv) {
  const std::string what = e.what();
  if (what == "A subcommand is required") return "which command?";
  if (!dynamic_cast<const CLI::ArgumentMismatch*>(&e)) return what;
  if (what.size() > 8 && what.compare(what.size() - 8, 8, " missing") == 0)  // "--beam: 1 required N missing"
    return what.substr(0, what.find(':')) + " needs a value";
  const size_t override_at = what.find(" was given a disallowed flag override");  // "restart was given ..."
  if (override_at == std::string::npos) return what;
  const std::string flag = "--" + what.substr(0, override_at);
  std::string given = flag + "=...";
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind(flag + "=", 0) == 0) given = argv[i];
  return flag + " takes no value (got " + given + "): give " + flag + " alone, or leave it out";
}

}  // namespace

void configure(CLI::App& app) {
  app.formatter(std::make_shared<Formatter>());
  app.get_formatter()->label("Usage", "usage");
  app.get_formatter()->label("OPTIONS", "options");
  app.get_formatter()->label("SUBCOMMAND", "COMMAND");
  app.get_formatter()->label("Positionals", "arguments");
  app.get_formatter()->column_width(28);
  app.option_defaults()  // --flag=false is refused, not read as the flag's absence
      ->always_capture_default()
      ->disable_flag_override()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_help_flag("-h,--help", "print this help and exit");
  app.group("commands");
  app.allow_extras();  // report_unknown() names them
}

std::optional<int> parse(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    if (std::optional<int> status = report_unknown(chain(app))) return status;  // `tarn nope --help`
    std::cout << app.help();  // the help of the deepest subcommand given
    return 0;
  } catch (const CLI::CallForVersion& e) {  // --version, where a program set_version_flag()
    std::cout << e.what() << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    const std::vector<CLI::App*> apps = chain(app);
    if (std::optional<int> status = report_unknown(apps)) return status;
    return usage_error(apps, apps.size(), plain_message(e, argc, argv));
  }
  return report_unknown(chain(app));
}

// A number read by `read` (strtoll, strtod) from lo to hi; the message names the value.
template <class T, class Read>
CLI::Validator range(T lo, T hi, const std::string& kind, Read read) {
  const std::string range = CLI::detail::to_string(lo) + " to " + CLI::detail::to_string(hi);
  auto check = [=](std::string& text) -> std::string {
    char* end = nullptr;
    errno = 0;
    const T v = read(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(static_cast<double>(v)))
      return "expected " + kind + ", got \"" + text + "\"";
    const bool overflow = std::is_integral<T>::value && errno == ERANGE;  // a double's overflow is inf, above
    if (overflow || v < lo || v > hi) return text + " is out of range: it must be from " + range;
    return "";
  };
  return CLI::Validator(check, range);
}

CLI::Validator integer(int64_t lo, int64_t hi) {
  return range<int64_t>(lo, hi, "an integer",
                        [](const char* s, char** end) -> int64_t { return std::strtoll(s, end, 10); });
}

CLI::Validator real(double lo, double hi) {
  return range<double>(lo, hi, "a number", [](const char* s, char** end) { return std::strtod(s, end); });
}

CLI::Validator one_of(const std::vector<std::string>& allowed) {
  const std::string choices = CLI::detail::join(allowed, ", ");
  return CLI::Validator(
      [allowed, choices](std::string& word) -> std::string {
        if (std::find(allowed.begin(), allowed.end(), word) != allowed.end()) return "";
        return "\"" + word + "\" is not one of " + choices;
      },
      "one of " + choices);
}

}  // namespace tarn::cli
