// Fuzzes the recipe loader (app/recipe, over framework/config's schema engine): parse_recipe
// over arbitrary text, the entry point load_recipe reads files through. Input: the YAML text,
// optionally followed by NUL and --set overrides separated by NULs
// ("optimizer.lr=3e-4\0training.max_steps=10").
//
// Expected outcomes: a Recipe, or tarn::Error (ConfigError) naming the problem. Anything else
// (a crash, a sanitizer report, another exception, a hang) is a finding. A recipe that loads
// must also survive the documented round trip parse_recipe(to_yaml(r)) == r.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "app/recipe/recipe.h"
#include "kernels/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string yaml = input.substr(0, nul);
  std::vector<std::string> overrides;
  for (size_t at = nul; at != std::string::npos && at < input.size();) {
    const size_t next = input.find('\0', at + 1);
    overrides.push_back(input.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1));
    at = next;
  }

  tarn::Recipe recipe;
  try {
    recipe = tarn::parse_recipe(yaml, "fuzz.yaml", overrides);
  } catch (const tarn::Error&) {
    return 0;  // a bad recipe, reported as such
  }
  const std::string written = tarn::to_yaml(recipe);
  try {
    const tarn::Recipe again = tarn::parse_recipe(written, "fuzz.yaml");
    if (again != recipe) {
      std::fprintf(stderr, "round trip changed %s\n--- to_yaml:\n%s\n", tarn::first_difference(recipe, again).c_str(),
                   written.c_str());
      std::abort();
    }
  } catch (const tarn::Error& e) {
    std::fprintf(stderr, "to_yaml wrote a recipe parse_recipe rejects: %s\n--- to_yaml:\n%s\n", e.what(),
                 written.c_str());
    std::abort();
  }
  return 0;
}
