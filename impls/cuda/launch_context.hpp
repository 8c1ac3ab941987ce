// What every launch gets: the streams it may use and, for collectives, its rank in the group.
#pragma once

#include <cuda_runtime.h>

// nccl.h's own declaration, so that launch sites need not include NCCL.
typedef struct ncclComm* ncclComm_t;

namespace replay {

/// The context of one enqueue. Work is enqueued on `stream`; a variant that overlaps work may
/// also use `side_stream`, and must join it back into `stream` (an event) before returning, so
/// that events recorded on `stream` around the launch time all of it.
struct LaunchContext {
  cudaStream_t stream = nullptr;
  cudaStream_t side_stream = nullptr;
  int rank = 0;
  int world_size = 1;
  ncclComm_t comm = nullptr;  ///< a multi-process run's communicator (DistContext::comm), or null
};

}  // namespace replay
