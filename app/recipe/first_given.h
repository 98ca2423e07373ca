#pragma once
// A helper of the recipe's sections (app/recipe/*_recipe.cpp): where to report a rule that
// several keys take part in.
#include <initializer_list>
#include <string>

#include "framework/config/schema.h"

namespace tarn::recipe_sections {

// The origin of the first of `keys` that was given, else of the last one's section.
inline ConfigOrigin first_given(const config::Loader& loader, std::initializer_list<std::string> keys) {
  for (const std::string& k : keys) {
    if (loader.given(k)) return loader.origin(k);
  }
  return loader.origin(*(keys.end() - 1));
}

}  // namespace tarn::recipe_sections
