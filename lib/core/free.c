/* free.c — loom_free: the one way to give back memory loom returned to the
 * caller. Such memory comes from the C library's malloc inside libloom. */
#include <stdlib.h>

#include "loom/free.h"
#include "core/sys.h"

void loom_free(void *p) { loom_sys_free(p); }
