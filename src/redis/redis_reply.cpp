#include "redis/redis_reply.h"

#include <fmt/format.h>

namespace strata::redis {

std::string RedisReply::render() const {
  switch (type) {
    case Type::kString:
    case Type::kStatus: return str;
    case Type::kInteger: return fmt::format("{}", integer);
    case Type::kNil: return "(nil)";
    case Type::kError: return "(error) " + str;
    case Type::kArray: {
      std::string out;
      for (size_t i = 0; i < elements.size(); ++i) {
        if (i > 0) out += '\n';
        out += elements[i].render();
      }
      return out;
    }
  }
  return {};
}

}  // namespace strata::redis
