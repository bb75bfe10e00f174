/* fuzz_alloc_conf.c — libFuzzer target for the LOOM_ALLOC_CONF parser
 * (loom_alloc_options_parse, lib/alloc/config.c): any string must parse into
 * options that pass the allocator's own check, or fail with a message and
 * leave the options as they were. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "loom/loom.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *conf = malloc(size + 1);
  memcpy(conf, data, size);
  conf[size] = '\0';
  loom_alloc_options o, before;
  loom_alloc_options_init(&o);
  before = o;
  loom_status st = loom_alloc_options_parse(conf, &o);
  if (st != LOOM_OK) {
    if (!loom_last_error()[0]) abort();                /* every failure says why */
    if (memcmp(&o, &before, sizeof o)) abort();        /* and changes nothing */
  } else {
    /* what parses is a configuration the allocator takes: an options struct
     * copied through loom_alloc_options_parse("") again is unchanged */
    loom_alloc_options again = o;
    if (loom_alloc_options_parse("", &again) != LOOM_OK || memcmp(&again, &o, sizeof o)) abort();
    if (o.expandable_segments < 0 || o.expandable_segments > 2) abort();
    if (!(o.limit_fraction >= 0 && o.limit_fraction <= 1)) abort();
    if (!(o.preallocate_fraction >= 0 && o.preallocate_fraction <= 1)) abort();
  }
  free(conf);
  return 0;
}
