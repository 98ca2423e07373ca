#include "kernels/parallel.h"

#include <cblas.h>
#include <omp.h>

namespace tarn::kernels {

void set_num_threads(int n) {
  if (n <= 0) return;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace tarn::kernels
