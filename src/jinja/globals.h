// The functions templates can call without a receiver: range, namespace, dict, cycler, joiner,
// and the two Hugging Face adds for chat templates, raise_exception(msg) (ends the render with
// RaiseException) and strftime_now(fmt) (formats RenderOptions::now, or the current time).
// Thread-safety: add_globals fills a frame owned by one render.
#pragma once

#include "jinja/interpreter.h"

namespace strata::jinja {

// Largest range() a template may build (as Jinja2's sandbox, MAX_RANGE).
inline constexpr int64_t kMaxRange = 100'000;

void add_globals(Frame& frame);

}  // namespace strata::jinja
