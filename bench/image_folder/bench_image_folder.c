/* bench_image_folder.c — loom's side of bench/image_folder: the ImageFolder
 * dataset through the loader, ImageNet transforms (train: RandomResizedCrop
 * 224 + flip; eval: Resize 256 + CenterCrop 224), shuffled, normalized f32
 * NCHW batches (what ToTensor + Normalize give torchvision's side), or --u8
 * for raw NHWC bytes. Times K batches after the first and prints one line.
 *
 *   bench_image_folder ROOT [--mode train|eval] [--workers W] [--batch B] [--batches K] [--u8] [--no-dct] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <loom/data.h>
#include <loom/loom.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_image_folder ROOT [--mode train|eval] [--workers W] [--batch B] [--batches K] "
                    "[--u8] [--no-dct]\n");
    return 2;
  }
  const char *root = argv[1], *mode = "train";
  int workers = 1, batch = 64, batches = 20, u8 = 0, dct = 1;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--u8")) u8 = 1;
    else if (!strcmp(argv[i], "--no-dct")) dct = 0;
    else if (i + 1 < argc && !strcmp(argv[i], "--mode")) mode = argv[++i];
    else if (i + 1 < argc && !strcmp(argv[i], "--workers")) workers = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--batch")) batch = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--batches")) batches = atoi(argv[++i]);
    else {
      fprintf(stderr, "bench_image_folder: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  loom_set_num_threads(1);
  loom_image_folder_options io;
  loom_image_folder_options_init(&io);
  io.mode = strcmp(mode, "eval") ? LOOM_IMAGE_TRAIN : LOOM_IMAGE_EVAL;
  io.dct_scaling = dct;
  loom_dataset *ds = loom_dataset_image_folder_open(root, &io);
  if (!ds) {
    fprintf(stderr, "bench_image_folder: %s\n", loom_last_error());
    return 1;
  }
  static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  loom_loader_options lo;
  loom_loader_options_init(&lo);
  lo.batch_size = batch;
  lo.shuffle = true;
  lo.drop_last = true;
  lo.workers = workers;
  lo.prefetch = 2 * (workers > 0 ? workers : 1);
  if (u8) {
    lo.x_dtype = LOOM_U8;
    lo.channels_last = true;
  } else {
    lo.scale = 1.0f / 255.0f;
    lo.mean = mean;
    lo.std = std;
    lo.norm_channels = 3;
  }
  loom_loader *l = loom_loader_new(ds, &lo);
  loom_dataset_release(ds);
  if (!l) {
    fprintf(stderr, "bench_image_folder: %s\n", loom_last_error());
    return 1;
  }
  double t0 = 0;
  int n = -1;
  while (n < batches) {
    loom_tensor *x, *y;
    if (loom_loader_next(l, &x, &y) != LOOM_OK) {
      fprintf(stderr, "bench_image_folder: %s\n", loom_last_error());
      return 1;
    }
    if (!x) continue; /* end of epoch: the next call starts another */
    loom_tensor_release(x);
    loom_tensor_release(y);
    if (++n == 0) t0 = now_s(); /* after the first batch */
  }
  double dt = now_s() - t0, ips = (double)batches * batch / dt;
  printf("bench=image_folder side=loom mode=%s workers=%d batch=%d batches=%d images_per_sec=%.1f "
         "images_per_sec_per_worker=%.1f out=%s dct=%d\n",
         mode, workers, batch, batches, ips, ips / (workers > 0 ? workers : 1), u8 ? "u8-nhwc" : "f32-nchw", dct);
  loom_loader_free(l);
  return 0;
}
