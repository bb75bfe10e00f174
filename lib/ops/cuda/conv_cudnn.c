/* conv_cudnn.c — conv2d on CUDA through cuDNN 9. (Work in progress: the
 * cuDNN path lands in a following commit; until then both kernels fail
 * with LOOM_ERR_UNSUPPORTED.) */
#ifdef LOOM_HAVE_CUDA
#include "ops/conv.h"

loom_status loom_cuda_conv2d(loom_op_args *a) {
  (void)a;
  return loom_set_error(LOOM_ERR_UNSUPPORTED, "conv2d: the CUDA convolution is not implemented yet; run it on the CPU");
}

loom_status loom_cuda_conv2d_backward(loom_op_args *a) {
  (void)a;
  return loom_set_error(LOOM_ERR_UNSUPPORTED, "conv2d backward: the CUDA convolution is not implemented yet");
}
#endif
