// The dtype codes every family's host API takes (plain C++: binding.cpp includes it too).
#pragma once

namespace convperf {

// The codes are part of each family's C API (and of the CPU emulator's wrappers): never renumber.
enum class DType : int { F32 = 0, F16 = 1, BF16 = 2, I8 = 3 };

}  // namespace convperf
