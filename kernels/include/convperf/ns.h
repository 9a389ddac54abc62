// The op namespace of a family's TORCH_LIBRARY: CONVPERF_NS, defaulting to convperf_<family>
// (each binding.cpp defines that default before including this header). The
// loader (kernels/_build.py) passes -DCONVPERF_NS=convperf_<family>_<hash> for a second build of
// a family in one process (an A/B against a revision). The extra macro level expands CONVPERF_NS
// before TORCH_LIBRARY pastes and stringifies it.
#pragma once

#define CONVPERF_EXPAND_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
#define CONVPERF_EXPAND_LIBRARY_IMPL(ns, key, m) TORCH_LIBRARY_IMPL(ns, key, m)
#define CONVPERF_TORCH_LIBRARY(m) CONVPERF_EXPAND_LIBRARY(CONVPERF_NS, m)
#define CONVPERF_TORCH_LIBRARY_IMPL(key, m) CONVPERF_EXPAND_LIBRARY_IMPL(CONVPERF_NS, key, m)
