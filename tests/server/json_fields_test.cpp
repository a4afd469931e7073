// Typed access to request fields (server/json_fields.h): the bounds hold for every way JSON may
// spell an integer, and errors name the field.
#include "server/json_fields.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace strata::server {
namespace {

// The message of the ApiError that get_int throws, or "" when it returns.
std::string int_error(std::string_view body, int64_t lo, int64_t hi) {
  const Json obj = parse_json_object(body);
  try {
    (void)get_int(obj, "x", lo, hi);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "x");
    EXPECT_EQ(e.status(), 400);
    return e.message();
  }
  return "";
}

TEST(JsonFields, ALowerBoundAboveZeroRejectsZeroAndSmallNonNegativeValues) {
  // nlohmann reads 0 and 3 as unsigned, -1 as signed and 0.0 as a float: all four see the bound.
  EXPECT_EQ(int_error(R"({"x": 0})", 1, 100), "'x' must be an integer in [1, 100]");
  EXPECT_EQ(int_error(R"({"x": 3})", 5, 100), "'x' must be an integer in [5, 100]");
  EXPECT_EQ(int_error(R"({"x": -1})", 1, 100), "'x' must be an integer in [1, 100]");
  EXPECT_EQ(int_error(R"({"x": 0.0})", 1, 100), "'x' must be an integer in [1, 100]");
  EXPECT_EQ(int_error(R"({"x": 1})", 1, 100), "");
  EXPECT_EQ(get_int(parse_json_object(R"({"x": 5})"), "x", 5, 100), 5);
}

TEST(JsonFields, TheUpperBoundAndInt64RangeHoldForUnsignedValues) {
  EXPECT_EQ(int_error(R"({"x": 101})", 1, 100), "'x' must be an integer in [1, 100]");
  EXPECT_EQ(int_error(R"({"x": 18446744073709551615})", 0, std::numeric_limits<int64_t>::max()),
            "'x' must be an integer in [0, 9223372036854775807]");
  EXPECT_EQ(get_int(parse_json_object(R"({"x": 9223372036854775807})"), "x", 0, std::numeric_limits<int64_t>::max()),
            std::numeric_limits<int64_t>::max());
}

TEST(JsonFields, AbsentAndNullAreNoValueAndFractionsAreRejected) {
  EXPECT_EQ(get_int(parse_json_object(R"({"y": 0})"), "x", 1, 100), std::nullopt);
  EXPECT_EQ(get_int(parse_json_object(R"({"x": null})"), "x", 1, 100), std::nullopt);
  EXPECT_EQ(int_error(R"({"x": 1.5})", 1, 100), "'x' must be an integer, got 1.5");
  EXPECT_EQ(get_int(parse_json_object(R"({"x": 16.0})"), "x", 1, 100), 16);
}

TEST(JsonFields, ArrayElementsGetTheSameBounds) {
  const Json arr = Json::parse("[0, 7]");
  EXPECT_THROW((void)as_int(arr[0], "ids", 1, 10), ApiError);
  EXPECT_EQ(as_int(arr[1], "ids", 1, 10), 7);
}

}  // namespace
}  // namespace strata::server
