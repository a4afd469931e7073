#include "tokenizer/unicode_class.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/utf16.h>

#include "core/check.h"

namespace strata::unicode {

Category category(uint32_t cpt) {
  const auto c = static_cast<UChar32>(cpt);
  const uint32_t mask = U_GET_GC_MASK(c);
  if (mask & U_GC_L_MASK) return Category::kLetter;
  if (mask & U_GC_M_MASK) return Category::kMark;
  if (mask & U_GC_N_MASK) return Category::kNumber;
  if (mask & U_GC_P_MASK) return Category::kPunctuation;
  if (mask & U_GC_S_MASK) return Category::kSymbol;
  if (mask & U_GC_Z_MASK) return Category::kSeparator;
  if (mask & U_GC_CN_MASK) return Category::kUnassigned;
  return Category::kControl;
}

uint32_t to_lower(uint32_t cpt) { return static_cast<uint32_t>(u_tolower(static_cast<UChar32>(cpt))); }

uint32_t nfd_first(uint32_t cpt) {
  // Nothing below U+00C0 decomposes; skip the ICU call for the common case.
  if (cpt < 0xC0) return cpt;
  UErrorCode err = U_ZERO_ERROR;
  // ICU owns the instance for the life of the process; fetching it is cheap and thread-safe.
  const UNormalizer2* nfd = unorm2_getNFDInstance(&err);
  STRATA_CHECK(U_SUCCESS(err), "ICU NFD data unavailable: {}", u_errorName(err));
  UChar buf[32];
  const int32_t n = unorm2_getDecomposition(nfd, static_cast<UChar32>(cpt), buf, 32, &err);
  if (n <= 0 || U_FAILURE(err)) return cpt;
  int32_t i = 0;
  UChar32 first;
  U16_NEXT(buf, i, n, first);
  return static_cast<uint32_t>(first);
}

}  // namespace strata::unicode
