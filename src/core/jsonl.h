// JSON Lines files (one JSON value per line): the prompt and dataset files of `generate`,
// `bench offline` and `bench serve`.
// Thread-safety: a free function; `fn` runs on the calling thread.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace strata {

// Calls fn(value, line_number) for each line of `path` that is not blank, in order, until fn
// returns false. Throws strata::Error "cannot read 'PATH'" when the file cannot be opened and
// "PATH:LINE: invalid JSON: ..." for a line that does not parse (so do callers, for their own
// checks of a value: "PATH:LINE: ...").
void read_jsonl(const std::string& path, const std::function<bool(const nlohmann::json&, size_t)>& fn);

}  // namespace strata
