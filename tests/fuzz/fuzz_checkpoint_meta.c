/* fuzz_checkpoint_meta.c — libFuzzer target for the training checkpoint's
 * metadata (lib/io/checkpoint.c): the input is "key=value" lines, written as
 * the __metadata__ of an otherwise valid checkpoint (model, AdamW state,
 * scaler, loader position), which is then restored into matching objects.
 * Any metadata must restore or fail with a message, never crash or leak;
 * a failed restore must leave the objects usable (one more step runs).
 * Seeds: corpus_checkpoint_meta/ (the metadata loom itself writes). */
#define _GNU_SOURCE  /* memfd_create */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_file.h"
#include "loom/loom.h"

typedef struct objs {
  loom_dataset *ds;
  loom_loader *loader;
  loom_module *m;
  loom_optimizer *o;
  loom_grad_scaler *s;
  loom_train_state st;
} objs;

static float g_x[16 * 2];
static int64_t g_y[16];

static void objs_new(objs *b) {
  int64_t fs = 2, hidden[1] = {3};
  b->ds = loom_dataset_memory(g_x, LOOM_F32, 1, &fs, g_y, LOOM_I64, 16, false);
  loom_loader_options lo;
  loom_loader_options_init(&lo);
  lo.batch_size = 4;
  lo.workers = 0;
  lo.seed = 9;
  b->loader = loom_loader_new(b->ds, &lo);
  loom_manual_seed(1);
  b->m = loom_mlp_new(2, 1, hidden, 2, loom_cpu());
  loom_tensor *params[4];
  for (int i = 0; i < 4; i++) params[i] = loom_module_param(b->m, i);
  b->o = loom_adamw_new(params, 4, NULL);
  loom_scaler_options so;
  loom_scaler_options_init(&so);
  b->s = loom_scaler_new(&so);
  if (!b->loader || !b->m || !b->o || !b->s) abort();
  b->st = (loom_train_state){.struct_size = sizeof b->st, .model = b->m, .optimizer = b->o, .scaler = b->s,
                             .loader = b->loader, .step = 3};
}

static loom_status one_step(objs *b) {
  loom_scope_begin();
  loom_tensor *x, *y;
  loom_status st = loom_loader_next(b->loader, &x, &y);
  if (st == LOOM_OK && x) {
    loom_tensor *loss = loom_cross_entropy(loom_module_forward(b->m, x), y);
    st = loom_optimizer_zero_grad(b->o);
    if (st == LOOM_OK) st = loom_backward(loom_scaler_scale(b->s, loss));
    if (st == LOOM_OK) st = loom_scaler_step(b->s, b->o, NULL);
  }
  loom_scope_end();
  return st;
}

static void objs_free(objs *b) {
  loom_scaler_free(b->s);
  loom_optimizer_free(b->o);
  loom_module_free(b->m);
  loom_loader_free(b->loader);
  loom_dataset_release(b->ds);
}

/* A valid checkpoint cut in two: its header JSON without __metadata__ (and
 * without the closing brace) and its data section. */
static char *g_head;
static size_t g_head_len;
static unsigned char *g_data;
static size_t g_data_len;

static void load_template(void) {
  for (int i = 0; i < 32; i++) g_x[i] = (float)(i % 7) - 3.0f;
  for (int i = 0; i < 16; i++) g_y[i] = i % 2;
  objs b;
  objs_new(&b);
  if (one_step(&b) != LOOM_OK) abort();
  char path[] = "/tmp/loom-fuzz-ckpt-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) abort();
  close(fd);
  if (loom_checkpoint_save(path, &b.st) != LOOM_OK) abort();
  objs_free(&b);
  /* LOOM_FUZZ_TEMPLATE_OUT=FILE keeps a copy (the seed corpus is its metadata). */
  const char *keep = getenv("LOOM_FUZZ_TEMPLATE_OUT");
  if (keep) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, keep);
    if (system(cmd) != 0) abort();
  }
  FILE *f = fopen(path, "rb");
  if (!f) abort();
  static unsigned char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  unlink(path);
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = hl << 8 | buf[i];
  if (n < 8 || hl > n - 8) abort();
  char *json = strndup((const char *)buf + 8, (size_t)hl);
  char *key = strstr(json, "\"__metadata__\"");
  if (!key) abort();
  char *open = strchr(key, '{'), *end = open;
  for (int depth = 0, in_str = 0; *end; end++) {
    if (in_str) {
      if (*end == '\\') end++;
      else if (*end == '"') in_str = 0;
    } else if (*end == '"') in_str = 1;
    else if (*end == '{') depth++;
    else if (*end == '}' && --depth == 0) break;
  }
  /* cut [from, to): the member and one comma beside it */
  char *from = key, *to = end + 1;
  char *before = key - 1;
  while (before > json && (*before == ' ' || *before == '\n')) before--;
  if (*before == ',') from = before;
  else {
    while (*to == ' ' || *to == '\n') to++;
    if (*to == ',') to++;
  }
  memmove(from, to, strlen(to) + 1);
  char *close_brace = strrchr(json, '}');
  *close_brace = '\0';
  g_head = json;
  g_head_len = strlen(json);
  g_data_len = n - 8 - (size_t)hl;
  g_data = malloc(g_data_len ? g_data_len : 1);
  memcpy(g_data, buf + 8 + hl, g_data_len);
}

static void put_json_string(FILE *f, const char *s, size_t n) {
  fputc('"', f);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20 || c >= 0x7f) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_head) load_template();
  char *hdr = NULL;
  size_t hdr_len = 0;
  FILE *h = open_memstream(&hdr, &hdr_len);
  fwrite(g_head, 1, g_head_len, h);
  fputs(",\"__metadata__\":{", h);
  int first = 1;
  const char *p = (const char *)data, *endp = p + size;
  while (p < endp) {
    const char *nl = memchr(p, '\n', (size_t)(endp - p));
    const char *line_end = nl ? nl : endp;
    const char *eq = memchr(p, '=', (size_t)(line_end - p));
    if (eq) {
      if (!first) fputc(',', h);
      first = 0;
      put_json_string(h, p, (size_t)(eq - p));
      fputc(':', h);
      put_json_string(h, eq + 1, (size_t)(line_end - eq - 1));
    }
    p = nl ? nl + 1 : endp;
  }
  fputs("}}", h);
  while ((ftell(h) % 8) != 0) fputc(' ', h);
  fclose(h);
  unsigned char *file = malloc(8 + hdr_len + g_data_len);
  for (int i = 0; i < 8; i++) file[i] = (unsigned char)((uint64_t)hdr_len >> (8 * i));
  memcpy(file + 8, hdr, hdr_len);
  memcpy(file + 8 + hdr_len, g_data, g_data_len);
  char path[64];
  int fd = fuzz_file(file, 8 + hdr_len + g_data_len, path, sizeof path);
  free(file);
  free(hdr);
  if (fd < 0) return 0;
  objs b;
  objs_new(&b);
  if (loom_checkpoint_restore(path, &b.st) != LOOM_OK && !loom_last_error()[0]) abort();  /* say why */
  /* restored or refused, the objects still train (an error here is fine: a
   * restored loader position may be past the epoch; it must not crash) */
  (void)one_step(&b);
  objs_free(&b);
  fuzz_file_close(fd);
  return 0;
}
