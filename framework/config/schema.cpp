#include "framework/config/schema.h"

#include <sys/stat.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "framework/config/yaml_scalar.h"
#include "framework/edit_distance.h"

namespace tarn::config {
namespace {

constexpr size_t kHelpValueColumn = 38;  // describe(): where the "# description" comments start
constexpr int kIndent = 2;

int line_of(const YAML::Mark& mark) { return mark.line >= 0 ? mark.line + 1 : 0; }

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

// yaml-cpp 0.7's LoadAll never returns when a document's node would start at a ',' (a recipe of
// just ",", or "#\n,"): the document parser emits a null without consuming the token, so the
// next document starts at the same token, forever, each one a new null node (yaml-cpp issue
// #1040, fixed upstream by PR #1319 after 0.8.0; found by fuzz/recipe_fuzzer). This first pass
// with the event parser throws a syntax error at the first document that does not advance.
class DocumentStarts : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    stuck_ = seen_ && mark.pos == last_.pos;
    seen_ = true;
    last_ = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
  bool stuck() const { return stuck_; }
  const YAML::Mark& last() const { return last_; }

 private:
  bool seen_ = false, stuck_ = false;
  YAML::Mark last_;
};

void check_documents_advance(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts starts;
  while (parser.HandleNextDocument(starts)) {
    if (!starts.stuck()) continue;
    const YAML::Mark& at = starts.last();
    const bool in_text = at.pos >= 0 && static_cast<size_t>(at.pos) < text.size();
    const std::string token = in_text ? std::string(1, text[static_cast<size_t>(at.pos)]) : "?";
    throw YAML::ParserException(at, "unexpected '" + token + "' where a value should start" +
                                        (token == "," ? " (',' separates items only inside [ ] or { })" : ""));
  }
}

// yaml-cpp reports a tab in indentation in several ways ("illegal map value", ...); name it.
std::string tab_hint(const std::string& text, int line) {
  std::istringstream in(text);
  std::string l;
  for (int i = 1; std::getline(in, l); ++i) {
    if (i < line - 1) continue;
    if (i > line) break;
    const size_t indent_end = l.find_first_not_of(" \t");
    if (l.substr(0, indent_end).find('\t') != std::string::npos) {
      return str_cat(" (line ", i, " is indented with a tab; YAML allows only spaces)");
    }
  }
  return "";
}

std::string child_path(const Field& section, const std::string& key) {
  return section.path.empty() ? key : section.path + "." + key;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// A bound as people write it: 0, 1, 0.5, 1e-6 (no ".0" on integral values).
std::string bound_text(double v) {
  std::string s = format_number(v);
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s;
}

// " in [0, 1)", " >= 0", " > 0", "" for an unbounded field.
std::string range_suffix(const Field& f) {
  const bool has_lo = std::isfinite(f.lo), has_hi = std::isfinite(f.hi);
  if (has_lo && has_hi) {
    return str_cat(" in ", f.lo_open ? "(" : "[", bound_text(f.lo), ", ", bound_text(f.hi), f.hi_open ? ")" : "]");
  }
  if (has_lo) return str_cat(f.lo_open ? " > " : " >= ", bound_text(f.lo));
  if (has_hi) return str_cat(f.hi_open ? " < " : " <= ", bound_text(f.hi));
  return "";
}

// "a positive integer", "a non-negative number", "a number in [0, 1)".
std::string range_text(const Field& f, const std::string& noun) {
  const bool has_hi = std::isfinite(f.hi);
  const bool integer = noun == "integer";
  if (!has_hi && ((f.lo == 0 && f.lo_open) || (integer && f.lo == 1 && !f.lo_open))) return "a positive " + noun;
  if (!has_hi && f.lo == 0 && !f.lo_open) return "a non-negative " + noun;
  return (integer ? "an " : "a ") + noun + range_suffix(f);
}

bool in_range(const Field& f, double x) {
  return (f.lo_open ? x > f.lo : x >= f.lo) && (f.hi_open ? x < f.hi : x <= f.hi);
}

// The closest of `candidates` to `word` when close enough to be a likely typo: a small edit
// distance, or a candidate that extends the word ("warmup" -> "warmup_steps").
std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  int best_distance = 0;
  const int limit = std::max(1, static_cast<int>(word.size()) / 3);
  for (const std::string& c : candidates) {
    int d = static_cast<int>(edit_distance(word, c, /*adjacent_swaps=*/true));
    const bool extends = word.size() >= 4 && (c.rfind(word, 0) == 0 || word.rfind(c, 0) == 0);
    if (d > limit && !extends) continue;
    if (extends) d = std::min(d, limit);
    if (best.empty() || d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

std::vector<std::string> child_keys(const Field& section) {
  std::vector<std::string> keys;
  for (const auto& c : section.children) keys.push_back(c->key);
  return keys;
}

void collect(const Field& f, std::vector<const Field*>& out) {
  for (const auto& c : f.children) {
    out.push_back(c.get());
    collect(*c, out);
  }
}

bool fixed_matches(const Field& f, const YAML::Node& v) {
  if (!v.IsScalar()) return false;
  if (f.fixed_value == "true" || f.fixed_value == "false") {
    const std::optional<bool> b = parse_bool(v);
    return b && *b == (f.fixed_value == "true");
  }
  return v.Scalar() == f.fixed_value;
}

bool leaf_equal(const Field& f, const void* a, const void* b) {
  switch (f.type) {
    case FieldType::boolean: return *static_cast<const bool*>(a) == *static_cast<const bool*>(b);
    case FieldType::integer: return *static_cast<const int64_t*>(a) == *static_cast<const int64_t*>(b);
    case FieldType::number: return *static_cast<const double*>(a) == *static_cast<const double*>(b);
    case FieldType::string: return *static_cast<const std::string*>(a) == *static_cast<const std::string*>(b);
    case FieldType::choice: return f.chosen(a) == f.chosen(b);
    case FieldType::numbers:
      return std::equal(static_cast<const double*>(a), static_cast<const double*>(a) + f.count,
                        static_cast<const double*>(b));
    case FieldType::entries:
      return *static_cast<const std::vector<YamlEntry>*>(a) == *static_cast<const std::vector<YamlEntry>*>(b);
    case FieldType::fixed:
    case FieldType::section: return true;
  }
  return true;
}

// A node as one line of flow YAML: "linear", "{kind: hybrid, window: 128}".
std::string flow_yaml(const YAML::Node& node) {
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

}  // namespace

// ---------------------------------------------------------------------------------- schema

const Field* Field::child(const std::string& key) const {
  for (const auto& c : children) {
    if (c->key == key) return c.get();
  }
  return nullptr;
}

Field* add_schema_field(Field* section, FieldType type, std::string key, std::string description,
                        std::function<void*(void*)> locate) {
  if (section->child(key)) throw std::logic_error("schema: duplicate key " + child_path(*section, key));
  auto f = std::make_unique<Field>();
  f->type = type;
  f->path = child_path(*section, key);
  f->key = std::move(key);
  f->description = std::move(description);
  f->locate = std::move(locate);
  section->children.push_back(std::move(f));
  return section->children.back().get();
}

std::string expectation(const Field& f) {
  if (!f.expectation.empty()) return f.expectation;
  switch (f.type) {
    case FieldType::section: return "a map of settings";
    case FieldType::boolean: return "true or false";
    case FieldType::integer: return range_text(f, "integer");
    case FieldType::number: return range_text(f, "number");
    case FieldType::string: return f.required ? "a non-empty string" : "a string";
    case FieldType::choice: return "one of " + join(f.choices, ", ");
    case FieldType::numbers: {
      const std::string suffix = range_suffix(f);
      return str_cat("a list of ", f.count, " numbers", suffix.empty() ? "" : ", each" + suffix);
    }
    case FieldType::fixed: return f.fixed_value;
    case FieldType::entries: return "a list whose entries are each a name or a map of settings";
  }
  return "";
}

Schema::Schema(std::string title) : title_(std::move(title)) {}

void Schema::check_type(const std::type_info& type) const {
  if (!type_ || *type_ != type) {
    throw std::logic_error(str_cat("schema \"", title_, "\" is not declared for type ", type.name()));
  }
}

const Field* Schema::find(const std::string& path) const {
  const Field* f = &root_;
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '.')) {
    f = f->child(part);
    if (!f) return nullptr;
  }
  return f == &root_ ? nullptr : f;
}

std::vector<const Field*> Schema::fields() const {
  std::vector<const Field*> out;
  collect(root_, out);
  return out;
}

std::string Schema::value_text(const Field& f, const void* object) {
  if (f.type == FieldType::fixed) return f.fixed_value;
  const void* p = f.locate(const_cast<void*>(object));
  switch (f.type) {
    case FieldType::boolean: return *static_cast<const bool*>(p) ? "true" : "false";
    case FieldType::integer: return std::to_string(*static_cast<const int64_t*>(p));
    case FieldType::number: return format_number(*static_cast<const double*>(p));
    case FieldType::string: return format_string(*static_cast<const std::string*>(p));
    case FieldType::choice: return format_string(f.chosen(p));
    case FieldType::numbers: {
      std::vector<std::string> parts;
      for (size_t i = 0; i < f.count; ++i) parts.push_back(format_number(static_cast<const double*>(p)[i]));
      return "[" + join(parts, ", ") + "]";
    }
    case FieldType::entries: {
      std::vector<std::string> parts;
      for (const YamlEntry& e : *static_cast<const std::vector<YamlEntry>*>(p)) parts.push_back(e.text);
      return "[" + join(parts, ", ") + "]";
    }
    default: return "";
  }
}

void Schema::check_object(const void* object,
                          const std::function<void(const std::string& path, const std::string& message)>& issue) const {
  for (const Field* f : fields()) {
    if (!f->is_leaf() || f->type == FieldType::fixed) continue;  // a fixed key holds no value
    const void* p = f->locate(const_cast<void*>(object));
    bool good = true;
    switch (f->type) {
      case FieldType::integer:
        good = in_range(*f, static_cast<double>(*static_cast<const int64_t*>(p))) && (!f->accept || f->accept(p));
        break;
      case FieldType::number:
        good = in_range(*f, *static_cast<const double*>(p)) && (!f->accept || f->accept(p));
        break;
      case FieldType::numbers:
        for (size_t i = 0; i < f->count; ++i) {
          const double* x = static_cast<const double*>(p) + i;
          good = good && in_range(*f, *x) && (!f->accept || f->accept(x));
        }
        break;
      case FieldType::boolean: good = !f->accept || f->accept(p); break;
      case FieldType::string: {
        const auto& text = *static_cast<const std::string*>(p);
        good = !(f->required && text.empty()) && (!f->accept || f->accept(p));
        break;
      }
      case FieldType::choice:  // a value none of the choices names (an enum's) reads "(none)"
        good = std::find(f->choices.begin(), f->choices.end(), f->chosen(p)) != f->choices.end();
        break;
      default: break;  // entries are the caller's to check
    }
    if (!good) issue(f->path, "expected " + expectation(*f) + ", got " + value_text(*f, object));
  }
}

std::string Schema::emit(const void* object, const std::function<bool(const Field&)>& omit) const {
  std::string out;
  std::function<void(const Field&, int)> walk = [&](const Field& section, int depth) {
    const std::string pad(depth * kIndent, ' ');
    for (const auto& c : section.children) {
      if (omit && omit(*c)) continue;
      if (c->is_leaf()) {
        out += pad + c->key + ": " + value_text(*c, object) + "\n";
      } else {
        const size_t mark = out.size();
        out += pad + c->key + ":\n";
        const size_t body = out.size();
        walk(*c, depth + 1);
        if (out.size() == body) out.replace(mark, std::string::npos, pad + c->key + ": {}\n");
      }
    }
  };
  walk(root_, 0);
  return out;
}

bool Schema::equal_objects(const void* a, const void* b) const { return difference(a, b).empty(); }

std::string Schema::difference(const void* a, const void* b) const {
  const std::vector<const Field*> differ = differing_fields(a, b);
  return differ.empty() ? "" : differ.front()->path;
}

std::vector<const Field*> Schema::differing_fields(const void* a, const void* b) const {
  std::vector<const Field*> out;
  for (const Field* f : fields()) {
    if (!f->is_leaf() || f->type == FieldType::fixed) continue;
    if (!leaf_equal(*f, f->locate(const_cast<void*>(a)), f->locate(const_cast<void*>(b)))) out.push_back(f);
  }
  return out;
}

std::string Schema::describe() const {
  const std::shared_ptr<void> defaults = make_default_();
  std::string out = "# " + title_ + ": every key, its default and what it accepts\n";
  std::function<void(const Field&, int)> walk = [&](const Field& section, int depth) {
    const std::string pad(depth * kIndent, ' ');
    for (const auto& c : section.children) {
      std::string text = pad + c->key + ":";
      std::string comment = c->description;
      if (c->is_leaf()) {
        text += " " + value_text(*c, defaults.get());
        std::string rule = (c->required ? "required: " : "") + expectation(*c);
        if (!c->default_note.empty()) rule += "; default " + c->default_note;
        comment += " [" + rule + "]";
      }
      if (text.size() < kHelpValueColumn) text.resize(kHelpValueColumn, ' ');
      out += text + " # " + comment + "\n";
      if (!c->is_leaf()) walk(*c, depth + 1);
    }
  };
  walk(root_, 0);
  return out;
}

// ---------------------------------------------------------------------------------- loader

void Loader::issue(const ConfigOrigin& at, const std::string& key, const std::string& message) {
  errors_.push_back({at, key, message});
}

void Loader::mark_given(const Field& field, const ConfigOrigin& at) { origins_[field.path] = at; }

ConfigOrigin Loader::origin(const std::string& path) const {
  if (const ConfigOrigin* at = nearest_origin(origins_, path)) return *at;
  return {first_source_.empty() ? ConfigOrigin::kOverride : first_source_, 0};
}

void Loader::error(const std::string& path, const std::string& message) { issue(origin(path), path, message); }

void Loader::warn(const std::string& path, const std::string& message) {
  warnings_.push_back({origin(path), path, message});
}

void Loader::throw_if_errors() const {
  if (!errors_.empty()) throw ConfigError(errors_);
}

bool Loader::apply_file(const std::string& path) {
  // A recipe is a small regular file: a FIFO would block the read forever, a device such as
  // /dev/zero never ends, and anything of megabytes is not a recipe.
  auto refuse = [&](const std::string& why) {
    if (first_source_.empty()) first_source_ = path;
    issue({path, 0}, "", why);
    return false;
  };
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) return refuse("is a directory, not a recipe file");
  if (exists && !S_ISREG(st.st_mode))
    return refuse("is not a regular file (a FIFO, socket or device): recipes must be regular files");
  if (exists && st.st_size > kMaxRecipeBytes)
    return refuse(str_cat("is ", st.st_size, " bytes; recipes are kilobytes, and files over ", kMaxRecipeBytes,
                          " bytes are refused"));
  std::ifstream in(path, std::ios::binary);
  if (!in) return refuse(str_cat("cannot read the file (", std::strerror(errno), ")"));
  std::string text(static_cast<size_t>(kMaxRecipeBytes) + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (static_cast<int64_t>(text.size()) > kMaxRecipeBytes)  // grew since the stat
    return refuse(str_cat("is over ", kMaxRecipeBytes, " bytes; recipes are kilobytes"));
  return apply_text(text, path);
}

bool Loader::apply_text(const std::string& yaml_text, const std::string& source) {
  if (first_source_.empty()) first_source_ = source;
  YAML::Node document;
  try {
    check_documents_advance(yaml_text);  // before LoadAll, which can loop forever
    const std::vector<YAML::Node> documents = YAML::LoadAll(yaml_text);
    if (documents.size() > 1) {
      issue({source, line_of(documents[1].Mark())}, "",
            str_cat("expected one YAML document, got ", documents.size(), " (separated by ---)"));
      return false;
    }
    if (!documents.empty()) document = documents.front();
  } catch (const YAML::Exception& e) {
    const int line = line_of(e.mark);
    issue({source, line}, "", "YAML syntax error: " + e.msg + tab_hint(yaml_text, line));
    return false;
  }
  text_ = yaml_text;
  apply_document(document, source);
  text_ = {};
  return true;
}

// The lines a quoted scalar of the file being applied spans, from its opening quote to its
// closing one (1 for a plain scalar, or when there is no file text: an override).
int64_t Loader::quoted_scalar_lines(const YAML::Node& value) const {
  const YAML::Mark m = value.Mark();
  if (m.pos < 0 || static_cast<size_t>(m.pos) >= text_.size()) return 1;
  const char quote = text_[static_cast<size_t>(m.pos)];
  if (quote != '"' && quote != '\'') return 1;
  int64_t lines = 1;
  for (size_t i = static_cast<size_t>(m.pos) + 1; i < text_.size(); ++i) {
    const char c = text_[i];
    if (c == '\n') {
      ++lines;
    } else if (quote == '"' && c == '\\') {
      ++i;  // an escape: the next character is not the closing quote
    } else if (c == quote) {
      if (quote == '\'' && i + 1 < text_.size() && text_[i + 1] == '\'') {
        ++i;  // '' inside single quotes is a quote character
        continue;
      }
      return lines;
    }
  }
  return lines;
}

void Loader::apply_document(const YAML::Node& document, const std::string& source) {
  if (first_source_.empty()) first_source_ = source;
  if (!document.IsDefined() || document.IsNull()) return;  // an empty file: every default
  const ConfigOrigin at{source, line_of(document.Mark())};
  if (!document.IsMap()) {
    issue(at, "", str_cat("expected a map of sections (", join(child_keys(schema_.top()), ", "), "), got ",
                          describe_value(document)));
    return;
  }
  apply_section(schema_.top(), document, at, source);
}

void Loader::apply(const Field& field, const YAML::Node& value, const ConfigOrigin& at, const std::string& source) {
  if (field.is_leaf()) {
    apply_leaf(field, value, at, source);
    return;
  }
  if (!value.IsNull() && !value.IsMap()) {
    issue(at, field.path, "expected " + expectation(field) + " (" + join(child_keys(field), ", ") + "), got " +
                              describe_value(value));
    return;
  }
  mark_given(field, at);
  apply_section(field, value, at, source);
}

void Loader::apply_section(const Field& section, const YAML::Node& map, const ConfigOrigin& at,
                           const std::string& source) {
  if (map.IsNull()) return;  // `section:` with everything under it commented out
  std::map<std::string, int> seen;  // key -> line
  for (const auto& entry : map) {
    const YAML::Node key_node = entry.first;  // copies: the iterator hands out temporaries
    const YAML::Node value = entry.second;
    const ConfigOrigin key_at = at.is_override() ? at : ConfigOrigin{source, line_of(key_node.Mark())};
    if (!key_node.IsScalar()) {
      issue(key_at, section.path, "expected a key name, got " + describe_value(key_node));
      continue;
    }
    const std::string& key = key_node.Scalar();
    const std::string path = child_path(section, key);
    const auto [first, inserted] = seen.emplace(key, key_at.line);
    if (!inserted) {
      issue(key_at, path, first->second > 0 ? str_cat("duplicate key (first given at line ", first->second, ")")
                                            : "duplicate key");
      continue;
    }
    const Field* child = section.child(key);
    if (!child) {
      unknown_key(section, key, key_at);
      continue;
    }
    apply(*child, value, key_at, source);
  }
}

void Loader::apply_leaf(const Field& f, const YAML::Node& v, const ConfigOrigin& at, const std::string& source) {
  std::string hint;
  bool good = false;
  switch (f.type) {
    case FieldType::boolean:
      if (const auto b = parse_bool(v)) {
        good = !f.accept || f.accept(&*b);
        if (good) *static_cast<bool*>(member(f)) = *b;
      }
      break;
    case FieldType::integer:
      if (const auto i = parse_integer(v)) {
        good = in_range(f, static_cast<double>(*i)) && (!f.accept || f.accept(&*i));
        if (good) *static_cast<int64_t*>(member(f)) = *i;
      }
      break;
    case FieldType::number:
      if (const auto x = parse_number(v)) {
        good = in_range(f, *x) && (!f.accept || f.accept(&*x));
        if (good) *static_cast<double*>(member(f)) = *x;
      }
      break;
    case FieldType::string:
      if (v.IsScalar()) {
        const std::string s = v.Scalar();
        // No value of a recipe spans lines: a quoted one that does almost always lost its
        // closing quote and swallowed the lines after it (YAML folds them into the value, and
        // the keys there would silently fall back to their defaults).
        const int64_t lines = quoted_scalar_lines(v);
        good = lines == 1 && !(f.required && s.empty()) && (!f.accept || f.accept(&s));
        if (lines > 1)
          hint = str_cat(" (a quoted value over ", lines, " lines: a quote that is never closed takes in the rest "
                         "of the file)");
        if (good) *static_cast<std::string*>(member(f)) = s;
      }
      break;
    case FieldType::choice:
      if (v.IsScalar()) {
        const std::string s = v.Scalar();
        const auto it = std::find(f.choices.begin(), f.choices.end(), s);
        good = it != f.choices.end() && (!f.accept || f.accept(&s));
        if (good) {
          f.choose(member(f), static_cast<size_t>(it - f.choices.begin()));
        } else if (const std::string near = closest(s, f.choices); !near.empty()) {
          hint = " (did you mean " + near + "?)";
        }
      }
      break;
    case FieldType::numbers:
      if (v.IsSequence() && v.size() == f.count) {
        std::vector<double> values;
        for (size_t i = 0; i < f.count; ++i) {
          const YAML::Node e = v[i];
          const auto x = parse_number(e);
          if (x && in_range(f, *x) && (!f.accept || f.accept(&*x))) {
            values.push_back(*x);
            continue;
          }
          const ConfigOrigin e_at = at.is_override() ? at : ConfigOrigin{source, line_of(e.Mark())};
          Field element = {};
          element.lo = f.lo, element.hi = f.hi, element.lo_open = f.lo_open, element.hi_open = f.hi_open;
          issue(e_at, str_cat(f.path, "[", i, "]"),
                "expected " + range_text(element, "number") + ", got " + describe_value(e));
        }
        if (values.size() != f.count) {  // the elements' issues say why
          rejected_.insert(f.path);
          return;
        }
        std::copy(values.begin(), values.end(), static_cast<double*>(member(f)));
        good = true;
      }
      break;
    case FieldType::entries:
      if (v.IsSequence()) {
        std::vector<YamlEntry> entries;
        for (size_t i = 0; i < v.size(); ++i) {
          const YAML::Node e = v[i];
          const ConfigOrigin e_at = at.is_override() ? at : ConfigOrigin{source, line_of(e.Mark())};
          if (!e.IsScalar() && !e.IsMap()) {
            issue(e_at, str_cat(f.path, "[", i, "]"), "expected a name or a map of settings, got " + describe_value(e));
            continue;
          }
          entries.push_back({flow_yaml(e), e_at});
        }
        if (entries.size() != v.size()) {  // the elements' issues say why
          rejected_.insert(f.path);
          return;
        }
        *static_cast<std::vector<YamlEntry>*>(member(f)) = std::move(entries);
        good = true;
      }
      break;
    case FieldType::fixed: good = fixed_matches(f, v); break;
    case FieldType::section: break;
  }
  if (good) {
    mark_given(f, at);
  } else {
    rejected_.insert(f.path);
    issue(at, f.path, "expected " + expectation(f) + ", got " + describe_value(v) + hint);
  }
}

void Loader::unknown_key(const Field& section, const std::string& key, const ConfigOrigin& at) {
  // No key of a recipe is long: a huge one is shown cut, and not compared with the known ones.
  constexpr size_t kShownKeyChars = 80;
  if (key.size() > kShownKeyChars) {
    issue(at, child_path(section, key.substr(0, kShownKeyChars) + "..."),
          str_cat("unknown key of ", key.size(), " characters"));
    return;
  }
  const std::string path = child_path(section, key);
  // The same key in another section ("training.lr" for "optimizer.lr") is the likeliest mistake.
  std::vector<std::string> elsewhere;
  for (const Field* f : schema_.fields()) {
    if (f->key == key) elsewhere.push_back(f->path);
  }
  if (!elsewhere.empty()) {
    issue(at, path, "unknown key (did you mean " + join(elsewhere, " or ") + "?)");
    return;
  }
  if (const std::string near = closest(key, child_keys(section)); !near.empty()) {
    issue(at, path, "unknown key (did you mean " + child_path(section, near) + "?)");
    return;
  }
  const std::string where = section.path.empty() ? "the top level has" : section.path + " has";
  issue(at, path, "unknown key; " + where + ": " + join(child_keys(section), ", "));
}

void Loader::apply_override(const std::string& assignment) {
  const ConfigOrigin at = ConfigOrigin::command_line();
  const size_t eq = assignment.find('=');
  const std::string key = trim(assignment.substr(0, eq));
  if (eq == std::string::npos || key.empty()) {
    issue(at, key, "expected key=value (e.g. optimizer.lr=3e-4), got \"" + assignment + "\"");
    return;
  }
  const std::string text = assignment.substr(eq + 1);
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    issue(at, key, "cannot read \"" + text + "\" as a YAML value (" + e.msg + ")");
    return;
  }
  const Field* f = &schema_.top();
  std::stringstream ss(key);
  std::string part;
  while (std::getline(ss, part, '.')) {
    if (part.empty()) {
      issue(at, key, "expected a dotted key such as optimizer.lr");
      return;
    }
    if (f->is_leaf()) {
      issue(at, key, f->path + " is a single value, not a section");
      return;
    }
    const Field* child = f->child(part);
    if (!child) {
      unknown_key(*f, part, at);
      return;
    }
    f = child;
  }
  if (key.back() == '.') {
    issue(at, key, "expected a dotted key such as optimizer.lr");
    return;
  }
  apply(*f, value, at, ConfigOrigin::kOverride);
}

void Loader::check_required() {
  for (const Field* f : schema_.fields()) {
    if (f->required && !given(f->path) && !rejected_.count(f->path)) {
      issue(origin(f->path), f->path, "missing required value (" + f->description + ")");
    }
  }
}

}  // namespace tarn::config
