#pragma once
// Keeping data-parallel replicas identical: parameters broadcast from one rank at start, and
// a bitwise checksum compared across ranks at start and every few steps, so that silent drift
// (a nondeterministic kernel, a rank that skipped an update) is an error naming the ranks
// instead of a model that quietly diverges.
#include <cstdint>
#include <string>
#include <vector>

#include "framework/tensor.h"
#include "kernels/collectives.h"

namespace tarn {

// Every tensor (parameters, buffers) <- root's values.
void broadcast_tensors(const std::vector<Tensor*>& tensors, kernels::Communicator& comm, int root = 0);

// A 64-bit hash of the tensors' bits, in order (host copies of device tensors).
uint64_t tensors_checksum(const std::vector<Tensor*>& tensors);

// Compares tensors_checksum across ranks; throws tarn::Error naming the ranks whose values
// differ from rank 0's (`what` says when: "at start", "after step 400").
void check_replicas_identical(const std::vector<Tensor*>& tensors, kernels::Communicator& comm,
                              const std::string& what);

}  // namespace tarn
