/* image_folder.h — loom-resnet's ImageFolder input: DIR/train and DIR/val
 * of class folders of JPEG/PNG images (the ImageNet layout), opened with
 * torchvision's ImageNet transforms. */
#ifndef LOOM_EXAMPLES_RESNET_IMAGE_FOLDER_H
#define LOOM_EXAMPLES_RESNET_IMAGE_FOLDER_H

#include <stdint.h>

#include <loom/data.h>

/* Whether DIR holds train/ and val/ directories. */
int imgf_is_root(const char *dir);

/* DIR/train (train: RandomResizedCrop(size) + flip, or Resize + CenterCrop
 * when augment is 0) or DIR/val (Resize(size * 256 / 224) + CenterCrop(size)).
 * limit > 0 keeps that many files, evenly spaced so every class stays
 * (through a file list in a temporary file). NULL after printing why. */
loom_dataset *imgf_open(const char *dir, int train, int size, int augment, int64_t limit);

#endif
