#pragma once
// The kernel table for a device (kernels/backend.h): the one branch an op takes on its inputs'
// device. A CUDA device without a CUDA backend throws "no CUDA device ..." here.
#include "framework/device.h"
#include "kernels/backend.h"

namespace tarn {

inline const kernels::Backend& backend_for(Device d) {
  return d.is_cpu() ? kernels::cpu_backend() : kernels::cuda_backend();
}

}  // namespace tarn
