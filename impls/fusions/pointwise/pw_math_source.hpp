// impls/eager/pw_math.cuh's text, embedded at configure time (CMakeLists.txt writes
// generated/pw_math_source.inc): the generated kernels compile the eager kernels' own expressions.
#pragma once

namespace replay::pointwise {

inline constexpr const char* kPwMathSource =
#include "pw_math_source.inc"
    ;

}  // namespace replay::pointwise
