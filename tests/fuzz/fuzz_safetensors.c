/* fuzz_safetensors.c — libFuzzer target for the safetensors reader: any byte
 * string must open with every tensor loadable and its bytes readable, or
 * fail with a message — never crash, leak or allocate more than the file
 * holds. Also runs the training-checkpoint restore over the same bytes (a
 * small fixed model), which reads metadata and tensors by name. Built as a
 * real fuzzer with -DLOOM_FUZZ=ON (clang); otherwise replayed over the corpus
 * in ctest (see replay_main.c). */
#define _GNU_SOURCE  /* memfd_create */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_file.h"
#include "loom/loom.h"

static void restore_into_a_model(const char *path) {
  int64_t hidden[1] = {3};
  loom_module *m = loom_mlp_new(2, 1, hidden, 2, loom_cpu());
  loom_tensor *params[4];
  for (int i = 0; i < 4; i++) params[i] = loom_module_param(m, i);
  loom_optimizer *o = loom_adamw_new(params, 4, NULL);
  loom_train_state st = {.struct_size = sizeof st, .model = m, .optimizer = o};
  if (loom_checkpoint_restore(path, &st) != LOOM_OK && !loom_last_error()[0]) abort();
  loom_optimizer_free(o);
  loom_module_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  int fd = fuzz_file(data, size, path, sizeof path);
  if (fd < 0) return 0;
  loom_safetensors *f = loom_safetensors_open(path);
  if (!f) {
    if (!loom_last_error()[0]) abort();  /* every failure must say why */
  } else {
    loom_scope_begin();
    for (int i = 0; i < loom_safetensors_num_tensors(f); i++) {
      loom_tensor *t = loom_safetensors_get(f, loom_safetensors_name(f, i), loom_cpu());
      if (!t) {
        if (loom_last_status() != LOOM_ERR_UNSUPPORTED) abort();  /* a validated file loads */
        continue;
      }
      /* A success must describe memory that is really there. */
      size_t bytes = (size_t)loom_tensor_numel(t) * loom_dtype_size(loom_tensor_dtype(t));
      volatile uint8_t sink = 0;
      if (bytes) sink ^= ((const uint8_t *)loom_tensor_data(t))[bytes - 1];
      (void)sink;
    }
    for (int i = 0; i < loom_safetensors_num_metadata(f); i++)
      if (!loom_safetensors_metadata(f, loom_safetensors_metadata_key(f, i))) abort();
    loom_scope_end();
    loom_safetensors_close(f);
  }
  restore_into_a_model(path);
  fuzz_file_close(fd);
  return 0;
}
