// Every fusion the harness knows, in matching priority order (an earlier fusion claims nodes
// first). The list is explicit (registry.cpp), one line per fusion: static self-registration would
// be dropped by the linker from a static library.
#pragma once

#include <span>

#include "workloads/plan/fusion_spec.hpp"

namespace replay {

std::span<const FusionSpec* const> fusion_registry();

}  // namespace replay
