#pragma once
// A small declarative schema engine for YAML configuration. A schema is a tree of sections
// and typed fields (boolean, integer, number, string, choice, fixed-length list of numbers,
// list of entries),
// each bound to a member of a plain C++ struct and carrying a one-line description and a
// range or a set of choices. Defaults are the struct's own member initialisers, so they are
// written once. The engine:
//   - fills a struct from YAML documents and `key.path=value` overrides (Loader), rejecting
//     unknown keys (with a did-you-mean), wrong types, out-of-range values and duplicate keys
//     with "file:line: key.path: expected ..., got ..." issues, collecting as many as it can;
//   - writes a struct back as YAML (to_yaml), every field included, in schema order;
//   - compares two structs field by field (equal);
//   - prints the schema as annotated YAML: defaults, descriptions and constraints (describe).
// It knows nothing about what the fields mean: cross-field rules belong to the caller, who
// reports them through Loader::error / Loader::warn so they carry the offending line too.
//
//   struct Optim { double lr = 1e-3; std::array<double, 2> betas{0.9, 0.999}; };
//   struct Cfg { Optim optimizer; };
//
//   config::Schema schema("example");
//   auto optim = schema.root<Cfg>().section(&Cfg::optimizer, "optimizer", "the optimizer");
//   optim.number(&Optim::lr, "lr", "peak learning rate").positive();
//   optim.numbers(&Optim::betas, "betas", "Adam's decay rates").min(0).below(1);
//
//   Cfg cfg;
//   config::Loader loader(schema, &cfg);
//   loader.apply_file("cfg.yaml");
//   loader.apply_override("optimizer.lr=3e-4");
//   loader.check_required();
//   loader.throw_if_errors();  // ConfigError listing every issue
#include <array>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "framework/config/config_error.h"

namespace YAML {
class Node;
}

namespace tarn::config {

enum class FieldType { section, boolean, integer, number, string, choice, numbers, fixed, entries };


// One node of the schema tree. Built through SectionBuilder / FieldRef, read by the engine.
struct Field {
  FieldType type = FieldType::section;
  std::string key;          // the name inside its section ("lr")
  std::string path;         // dotted from the root ("optimizer.lr"); empty for the root
  std::string description;  // one line, for help output
  // The root object -> this field's member (for numbers: the first element). Unset for fixed.
  std::function<void*(void*)> locate;

  // integer, number and each element of numbers: [lo, hi], either end open.
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  std::vector<std::string> choices;  // choice: the accepted values
  // choice: the member's value as one of `choices`, and the member set to choices[i]. A choice
  // is bound to a std::string or to an enum (SectionBuilder::enumeration).
  std::function<std::string(const void*)> chosen;
  std::function<void(void*, size_t)> choose;
  size_t count = 0;                  // numbers: the exact list length
  std::string fixed_value;           // fixed: the only accepted value (a key kept for clarity)
  bool required = false;             // must be given (a string: and non-empty)
  std::string default_note;          // help shows this instead of the default value
  std::string expectation;           // replaces the generated "expected ..." text when set
  std::function<bool(const void*)> accept;  // an extra check of a parsed value (its member)

  std::vector<std::unique_ptr<Field>> children;  // section: in declaration order

  const Field* child(const std::string& key) const;
  bool is_leaf() const { return type != FieldType::section; }
};

// What a value must be, as written after "expected": "a positive number", "one of a, b".
std::string expectation(const Field& field);

// Chained options of one field; T is the member's type (double for a list's elements).
template <class T>
class FieldRef {
 public:
  explicit FieldRef(Field* field) : field_(field) {}
  FieldRef& min(double v) { return bound(v, false, true); }     // value >= v
  FieldRef& above(double v) { return bound(v, true, true); }    // value > v
  FieldRef& max(double v) { return bound(v, false, false); }    // value <= v
  FieldRef& below(double v) { return bound(v, true, false); }   // value < v
  FieldRef& positive() { return above(0); }
  FieldRef& non_negative() { return min(0); }
  FieldRef& fraction() { return min(0).below(1); }  // [0, 1): probabilities of dropping
  FieldRef& required() { field_->required = true; return *this; }
  FieldRef& default_note(std::string note) { field_->default_note = std::move(note); return *this; }
  // An extra rule, with the text that replaces "expected ..." in messages and help.
  FieldRef& check(std::function<bool(const T&)> ok, std::string expectation) {
    field_->accept = [ok = std::move(ok)](const void* v) { return ok(*static_cast<const T*>(v)); };
    field_->expectation = std::move(expectation);
    return *this;
  }

 private:
  FieldRef& bound(double v, bool open, bool lower) {
    (lower ? field_->lo : field_->hi) = v;
    (lower ? field_->lo_open : field_->hi_open) = open;
    return *this;
  }
  Field* field_;
};

// Appends a field to `section` (throws std::logic_error on a duplicate key: a schema bug).
Field* add_schema_field(Field* section, FieldType type, std::string key, std::string description,
                        std::function<void*(void*)> locate);

// Declares the fields of a section whose struct is S.
template <class S>
class SectionBuilder {
 public:
  explicit SectionBuilder(Field* section) : section_(section) {}

  template <class Sub>
  SectionBuilder<Sub> section(Sub S::*member, std::string key, std::string description) {
    return SectionBuilder<Sub>(add(FieldType::section, std::move(key), std::move(description), member));
  }
  FieldRef<bool> boolean(bool S::*m, std::string key, std::string description) {
    return FieldRef<bool>(add(FieldType::boolean, std::move(key), std::move(description), m));
  }
  FieldRef<int64_t> integer(int64_t S::*m, std::string key, std::string description) {
    return FieldRef<int64_t>(add(FieldType::integer, std::move(key), std::move(description), m));
  }
  FieldRef<double> number(double S::*m, std::string key, std::string description) {
    return FieldRef<double>(add(FieldType::number, std::move(key), std::move(description), m));
  }
  FieldRef<std::string> string(std::string S::*m, std::string key, std::string description) {
    return FieldRef<std::string>(add(FieldType::string, std::move(key), std::move(description), m));
  }
  FieldRef<std::string> choice(std::string S::*m, std::string key, std::string description,
                               std::vector<std::string> choices) {
    Field* f = add(FieldType::choice, std::move(key), std::move(description), m);
    f->choices = std::move(choices);
    f->chosen = [](const void* member) { return *static_cast<const std::string*>(member); };
    f->choose = [names = f->choices](void* member, size_t i) { *static_cast<std::string*>(member) = names[i]; };
    return FieldRef<std::string>(f);
  }
  // A choice parsed straight into an enum: each name with its value. Written back by name.
  template <class E>
  FieldRef<E> enumeration(E S::*m, std::string key, std::string description,
                          std::vector<std::pair<std::string, E>> options) {
    Field* f = add(FieldType::choice, std::move(key), std::move(description), m);
    for (const auto& o : options) f->choices.push_back(o.first);
    f->chosen = [options](const void* member) {
      for (const auto& o : options)
        if (o.second == *static_cast<const E*>(member)) return o.first;
      return std::string("(none)");
    };
    f->choose = [options](void* member, size_t i) { *static_cast<E*>(member) = options[i].second; };
    return FieldRef<E>(f);
  }
  // A fixed-length list of numbers; the range and check() apply to each element.
  template <size_t N>
  FieldRef<double> numbers(std::array<double, N> S::*m, std::string key, std::string description) {
    Field* f = add(FieldType::numbers, std::move(key), std::move(description), m);
    f->count = N;
    auto whole = f->locate;
    f->locate = [whole](void* root) -> void* { return static_cast<std::array<double, N>*>(whole(root))->data(); };
    return FieldRef<double>(f);
  }
  // A list whose elements are each a scalar or a map, kept as flow YAML (YamlEntry) for the
  // caller to parse; `[]` empties it.
  FieldRef<std::vector<YamlEntry>> entries(std::vector<YamlEntry> S::*m, std::string key, std::string description) {
    return FieldRef<std::vector<YamlEntry>>(add(FieldType::entries, std::move(key), std::move(description), m));
  }
  // The same for a key of this section whose value an enclosing section's struct keeps, in its
  // member `holder` (of type H) at `m`: for a type that must not hold a YAML entry, e.g. a
  // model's attention stack whose `layers` the recipe keeps beside the model's settings.
  template <class O, class H>
  FieldRef<std::vector<YamlEntry>> entries(const SectionBuilder<O>& outer, H O::*holder, std::vector<YamlEntry> H::*m,
                                           std::string key, std::string description) {
    auto outer_locate = outer.section_->locate;
    return FieldRef<std::vector<YamlEntry>>(add_field(
        FieldType::entries, std::move(key), std::move(description), [outer_locate, holder, m](void* root) -> void* {
          return &(static_cast<O*>(outer_locate(root))->*holder.*m);
        }));
  }
  // A key bound to no member that accepts exactly one value (written as `value_text`), to state
  // a rule in the file itself, e.g. `causal: true` for a decoder's self-attention.
  void fixed(std::string key, std::string description, std::string value_text, std::string why) {
    Field* f = add_field(FieldType::fixed, std::move(key), std::move(description), nullptr);
    f->fixed_value = std::move(value_text);
    f->expectation = f->fixed_value + " (" + why + ")";
  }

 private:
  template <class M>
  Field* add(FieldType type, std::string key, std::string description, M S::*member) {
    auto parent = section_->locate;
    return add_field(type, std::move(key), std::move(description),
                     [parent, member](void* root) -> void* { return &(static_cast<S*>(parent(root))->*member); });
  }
  Field* add_field(FieldType type, std::string key, std::string description, std::function<void*(void*)> locate) {
    return add_schema_field(section_, type, std::move(key), std::move(description), std::move(locate));
  }

  template <class>
  friend class SectionBuilder;
  Field* section_;
};

// The whole tree, rooted at a struct type fixed by root<T>().
class Schema {
 public:
  explicit Schema(std::string title);

  // Starts the declaration; T must be default-constructible (its defaults are the schema's).
  template <class T>
  SectionBuilder<T> root() {
    type_ = &typeid(T);
    make_default_ = [] { return std::shared_ptr<void>(std::make_shared<T>()); };
    root_.locate = [](void* p) { return p; };
    return SectionBuilder<T>(&root_);
  }

  const std::string& title() const { return title_; }
  const Field& top() const { return root_; }
  const Field* find(const std::string& path) const;  // nullptr when no such key
  std::vector<const Field*> fields() const;          // every field, depth first, sections included

  // Emits every field in schema order. `omit(field)` true leaves a field (and, for a section,
  // everything in it) out, e.g. settings made irrelevant by another one.
  template <class T>
  std::string to_yaml(const T& object, const std::function<bool(const Field&)>& omit = {}) const {
    check_type(typeid(T));
    return emit(&object, omit);
  }
  template <class T>
  bool equal(const T& a, const T& b) const {
    check_type(typeid(T));
    return equal_objects(&a, &b);
  }
  // The path of the first field whose values differ ("" when equal), for test messages.
  template <class T>
  std::string first_difference(const T& a, const T& b) const {
    check_type(typeid(T));
    return difference(&a, &b);
  }
  // Every leaf whose values differ, in schema order (fixed keys hold no value: never listed);
  // value_text(*field, &a) and value_text(*field, &b) say how.
  template <class T>
  std::vector<const Field*> differences(const T& a, const T& b) const {
    check_type(typeid(T));
    return differing_fields(&a, &b);
  }
  // Checks the values an object already holds (a config built in code, not parsed) against each
  // field's range, choices and check, as the Loader checks what it parses: `issue(path,
  // message)` for each value out of range, in schema order, the message worded as the Loader's
  // with the value as to_yaml writes it ("expected a number in [0, 1), got 1.0").
  template <class T>
  void check_values(const T& object,
                    const std::function<void(const std::string& path, const std::string& message)>& issue) const {
    check_type(typeid(T));
    check_object(&object, issue);
  }
  // Annotated YAML: every key with its default, description and constraint, for --help.
  std::string describe() const;

  void check_type(const std::type_info& type) const;

  // The value of a leaf as emitted YAML text ("3e-4", "[0.9, 0.98]", "\"a b\"").
  static std::string value_text(const Field& leaf, const void* object);

 private:
  std::string emit(const void* object, const std::function<bool(const Field&)>& omit) const;
  bool equal_objects(const void* a, const void* b) const;
  std::string difference(const void* a, const void* b) const;
  std::vector<const Field*> differing_fields(const void* a, const void* b) const;
  void check_object(const void* object,
                    const std::function<void(const std::string& path, const std::string& message)>& issue) const;

  std::string title_;
  Field root_;
  const std::type_info* type_ = nullptr;
  std::function<std::shared_ptr<void>()> make_default_;
};

// Applies YAML documents and overrides to one object, collecting issues instead of stopping
// at the first. Later sources win: apply the file, then the overrides in command-line order.
class Loader {
 public:
  template <class T>
  Loader(const Schema& schema, T* object) : schema_(schema), object_(object) {
    schema.check_type(typeid(T));
  }

  // A whole document: null (an empty file) or a map of the root's keys. `source` names it
  // in messages (the path as the user gave it).
  void apply_document(const YAML::Node& document, const std::string& source);
  // Reads and parses `path` (unreadable files, files that are not regular or are over
  // kMaxRecipeBytes, and YAML syntax errors become issues), then applies it. Returns false
  // when it could not be parsed.
  bool apply_file(const std::string& path);
  static constexpr int64_t kMaxRecipeBytes = 1 << 20;
  // The same from text already in memory, named `source` in messages.
  bool apply_text(const std::string& yaml_text, const std::string& source);
  // "dotted.key=value": the value is parsed as YAML (a scalar, or a flow list / map such as
  // [0.9, 0.98]) and validated exactly as a file value would be; messages say "--set key".
  void apply_override(const std::string& assignment);
  // Required fields that no source gave.
  void check_required();

  // Whether `path` (a field or section) was set by a file or an override.
  bool given(const std::string& path) const { return origins_.count(path) != 0; }
  // Where `path` was set; else its nearest given ancestor; else the first source, no line.
  ConfigOrigin origin(const std::string& path) const;
  const std::map<std::string, ConfigOrigin>& origins() const { return origins_; }

  // Caller-side rules: an issue or warning about `path`, located at origin(path).
  void error(const std::string& path, const std::string& message);
  void warn(const std::string& path, const std::string& message);
  // The same at an explicit origin (e.g. the line of another key that caused the problem).
  void error_at(const ConfigOrigin& at, const std::string& path, const std::string& message) {
    errors_.push_back({at, path, message});
  }
  void warn_at(const ConfigOrigin& at, const std::string& path, const std::string& message) {
    warnings_.push_back({at, path, message});
  }

  bool ok() const { return errors_.empty(); }
  const std::vector<ConfigIssue>& errors() const { return errors_; }
  const std::vector<ConfigIssue>& warnings() const { return warnings_; }
  void throw_if_errors() const;  // ConfigError with every issue

 private:
  void apply(const Field& field, const YAML::Node& value, const ConfigOrigin& at, const std::string& source);
  void apply_section(const Field& section, const YAML::Node& map, const ConfigOrigin& at, const std::string& source);
  void apply_leaf(const Field& field, const YAML::Node& value, const ConfigOrigin& at, const std::string& source);
  int64_t quoted_scalar_lines(const YAML::Node& value) const;
  void unknown_key(const Field& section, const std::string& key, const ConfigOrigin& at);
  void mark_given(const Field& field, const ConfigOrigin& at);
  void issue(const ConfigOrigin& at, const std::string& key, const std::string& message);
  void* member(const Field& field) const { return field.locate(object_); }

  const Schema& schema_;
  void* object_;
  std::map<std::string, ConfigOrigin> origins_;
  std::set<std::string> rejected_;  // fields given with a bad value (already reported)
  std::string first_source_;
  std::string_view text_;  // of the file being applied (apply_text), for quoted_scalar_lines
  std::vector<ConfigIssue> errors_, warnings_;
};

}  // namespace tarn::config
