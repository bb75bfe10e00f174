/* resnet_internal.h (internal) — what the ResNet builder (resnet.c) needs
 * from the block file (resnet_block.c). */
#ifndef LOOM_NN_RESNET_INTERNAL_H
#define LOOM_NN_RESNET_INTERNAL_H

#include "loom/nn.h"

/* A BasicBlock (bottleneck false) or Bottleneck; zero_init_residual zeroes
 * the last batch norm's weight (torchvision's option). */
loom_module *loom_resnet_block_make(bool bottleneck, int64_t in, int64_t planes, int64_t stride,
                                    loom_resnet_shortcut sc, bool zero_init_residual, loom_device dev);

#endif
