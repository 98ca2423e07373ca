// framework/config/config_error.h: nearest_origin, the walk up a dotted key that both
// Loader::origin and Recipe::where use.
#include "framework/config/config_error.h"

#include <gtest/gtest.h>

namespace tarn {
namespace {

TEST(NearestOrigin, OwnEntryThenNearestAncestorThenNone) {
  const std::map<std::string, ConfigOrigin> origins = {
      {"a", {"r.yaml", 1}}, {"a.b.c", {"r.yaml", 3}}, {"x.y", ConfigOrigin::command_line()}};
  ASSERT_NE(nearest_origin(origins, "a.b.c"), nullptr);
  EXPECT_EQ(nearest_origin(origins, "a.b.c")->line, 3);
  EXPECT_EQ(nearest_origin(origins, "a.b.d")->line, 1);  // a.b is not given: a is
  EXPECT_EQ(nearest_origin(origins, "a.b")->line, 1);
  EXPECT_EQ(nearest_origin(origins, "a.b.c.d")->line, 3);
  EXPECT_TRUE(nearest_origin(origins, "x.y.z")->is_override());
  EXPECT_EQ(nearest_origin(origins, "x"), nullptr);  // a child's entry is not its parent's
  EXPECT_EQ(nearest_origin(origins, "ab"), nullptr);  // a prefix that is not a dotted ancestor
  EXPECT_EQ(nearest_origin(origins, ""), nullptr);
  EXPECT_EQ(nearest_origin({}, "a"), nullptr);
}

}  // namespace
}  // namespace tarn
