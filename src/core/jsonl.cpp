#include "core/jsonl.h"

#include <fstream>

#include "core/error.h"

namespace strata {

void read_jsonl(const std::string& path, const std::function<bool(const nlohmann::json&, size_t)>& fn) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read '{}'", path);
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail("{}:{}: invalid JSON: {}", path, line_no, e.what());
    }
    if (!fn(value, line_no)) return;
  }
}

}  // namespace strata
