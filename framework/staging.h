#pragma once
// A micro-batch's host data on a CUDA device in one copy the host does not wait for (issue 51).
// Without it each op uploads what it needs itself, synchronously from pageable memory: the
// embeddings' token ids, the loss's targets, and every attention call's padding mask (a real
// device finishes all queued work before each such copy starts). A StagedBatch packs the token
// id vectors and the padding masks it is given into pinned memory (one of a ring of
// kPinnedSlots buffers), queues one cudaMemcpyAsync, and, while it lives on this thread, the
// ops find their device copies by the host vector they are handed (ops_internal::ids_on,
// layers/attention/common.cpp's padding_tensor and key_keep): every attention that takes the same
// mask shares one device tensor, built once per batch. A vector it was not given (or a copy of
// one) is uploaded as before, so staging changes where the bytes come from, never the result.
// The host fills the next micro-batch while the device still runs this one; it waits only when
// it comes back to a pinned buffer whose copy (kPinnedSlots micro-batches ago) is still queued.
// The vectors must stay alive and unchanged while it lives. On the CPU it does nothing.
//
// A mask whose row count is given (mask_rows, aligned with masks; 0 = not given) and whose rows
// are right-padded (each row real positions, then padding) goes up as its rows' lengths, one
// int32 a row, and a kernel builds the mask and its complement on the device from them
// (padding_from_lengths, kernels/layout.h): B values in the copy instead of 2 x B x N floats,
// the same bits. Any other mask goes up as its flags.
//
//   StagedBatch staged(device, {&src, &tgt_in, &labels}, {&src_pad}, {rows});
//   Tensor loss = seq2seq_loss(model.forward(src, ..., src_pad, tgt_in, ...), labels, ...);
#include <cstdint>
#include <vector>

#include "framework/tensor.h"

namespace tarn {

class StagedBatch {
 public:
  static constexpr int kPinnedSlots = 4;

  StagedBatch(Device device, const std::vector<const std::vector<int32_t>*>& ids,
              const std::vector<const std::vector<uint8_t>*>& masks, const std::vector<int64_t>& mask_rows = {});
  ~StagedBatch();
  StagedBatch(const StagedBatch&) = delete;
  StagedBatch& operator=(const StagedBatch&) = delete;

  // The innermost StagedBatch alive on this thread, or null.
  static const StagedBatch* active();

  // The device copy of `host` (1-D, its ids' bits in f32 storage), undefined when `host` was
  // not staged here or `device` is not this batch's.
  Tensor ids(const std::vector<int32_t>& host, Device device) const;
  // (mask.size(),) f32 on the device: 1 = padding, or with keep 1 = real token; undefined when
  // not staged here.
  Tensor mask(const std::vector<uint8_t>& host, bool keep, Device device) const;
  // Masks of this batch built on the device from their lengths (the others went up as flags).
  int64_t masks_from_lengths() const { return from_lengths_; }

 private:
  struct Entry {
    const void* host;
    size_t count;
    int64_t offset;  // in floats into device_
  };
  Device device_;
  Tensor staged_;  // everything staged, one f32 buffer on device_
  std::vector<Entry> ids_, masks_;  // a mask's keep complement follows its flags
  int64_t from_lengths_ = 0;
  bool active_ = false;
  const StagedBatch* outer_ = nullptr;
};

}  // namespace tarn
