/* tfrecord.c — CRC-32C, TFRecord framing and the Event/Summary protobuf
 * encoding of TensorBoard event files (see tfrecord.h for why by hand).
 *
 * Wire format used (protobuf): a field is a varint key (number << 3 | wire
 * type) then its value: wire type 0 varint, 1 fixed 8 bytes little-endian,
 * 2 varint length + bytes, 5 fixed 4 bytes little-endian.
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
 *             Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; } */
#include <pthread.h>
#include <string.h>

#include "io/tfrecord.h"
#include "core/sys.h"

/* ---- CRC-32C (reflected polynomial 0x82F63B78), one table, built once ---- */
static uint32_t g_table[256];
static pthread_once_t g_table_once = PTHREAD_ONCE_INIT;

static void build_table(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    g_table[i] = c;
  }
}

uint32_t loom_crc32c(const void *data, size_t n) {
  pthread_once(&g_table_once, build_table);
  const uint8_t *p = data;
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) c = g_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t loom_crc32c_masked(const void *data, size_t n) {
  uint32_t c = loom_crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int loom_tfrecord_write(FILE *f, const void *data, size_t n) {
  uint8_t head[12], tail[4];
  le64(head, (uint64_t)n);
  le32(head + 8, loom_crc32c_masked(head, 8));
  le32(tail, loom_crc32c_masked(data, n));
  if (loom_sys_fwrite(head, 1, sizeof head, f) != sizeof head) return -1;
  if (n && loom_sys_fwrite(data, 1, n, f) != n) return -1;
  if (loom_sys_fwrite(tail, 1, sizeof tail, f) != sizeof tail) return -1;
  return 0;
}

/* ---- protobuf ------------------------------------------------------------------ */
typedef struct pb {
  uint8_t *p;
  size_t n, cap;
  int overflow;
} pb;

static void put(pb *b, const void *src, size_t n) {
  if (b->n + n > b->cap) {
    b->overflow = 1;
    return;
  }
  memcpy(b->p + b->n, src, n);
  b->n += n;
}

static void varint(pb *b, uint64_t v) {
  uint8_t tmp[10];
  size_t k = 0;
  do {
    tmp[k++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
    v >>= 7;
  } while (v);
  put(b, tmp, k);
}

static size_t varint_len(uint64_t v) {
  size_t k = 1;
  while (v > 0x7F) {
    v >>= 7;
    k++;
  }
  return k;
}

static void key(pb *b, unsigned field, unsigned wire) { varint(b, (uint64_t)(field << 3 | wire)); }

static void fixed64_double(pb *b, unsigned field, double v) {
  uint64_t u;
  memcpy(&u, &v, 8);
  uint8_t t[8];
  le64(t, u);
  key(b, field, 1);
  put(b, t, 8);
}

static void bytes_field(pb *b, unsigned field, const void *s, size_t n) {
  key(b, field, 2);
  varint(b, n);
  put(b, s, n);
}

size_t loom_event_file_version(uint8_t *buf, size_t cap, double wall_time) {
  pb b = {buf, 0, cap, 0};
  static const char version[] = "brain.Event:2";
  fixed64_double(&b, 1, wall_time);
  bytes_field(&b, 3, version, sizeof version - 1);
  return b.overflow ? 0 : b.n;
}

size_t loom_event_scalar(uint8_t *buf, size_t cap, double wall_time, int64_t step, const char *tag, float value) {
  size_t tlen = strlen(tag);
  /* Value { tag = 1; simple_value = 2 (fixed32) } */
  size_t value_len = 1 + varint_len(tlen) + tlen + 1 + 4;
  /* Summary { value = 1 } */
  size_t summary_len = 1 + varint_len(value_len) + value_len;
  pb b = {buf, 0, cap, 0};
  fixed64_double(&b, 1, wall_time);
  key(&b, 2, 0);
  varint(&b, (uint64_t)step);  /* int64: negative steps take ten bytes, as protobuf says */
  key(&b, 5, 2);
  varint(&b, summary_len);
  key(&b, 1, 2);
  varint(&b, value_len);
  bytes_field(&b, 1, tag, tlen);
  uint32_t u;
  memcpy(&u, &value, 4);
  uint8_t t[4];
  le32(t, u);
  key(&b, 2, 5);
  put(&b, t, 4);
  return b.overflow ? 0 : b.n;
}
