/* nvtx.c — loom's ranges as NVTX v3 ranges (the header-only NVTX that ships
 * with the CUDA toolkit), in a "loom" domain with one named category and
 * color per kind of range, so Nsight Systems shows ops, backward, optimizer,
 * loader, copies and user ranges on each thread. Without an attached tool,
 * NVTX calls are a null check each. Built without CUDA there is no NVTX and
 * these are no-ops. */
#include "prof/prof_internal.h"

#ifdef LOOM_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>

static nvtxDomainHandle_t g_domain;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static const uint32_t g_colors[LOOM_PROF_NCAT] = {
    0xff4c8bf5, /* op: blue */
    0xffe8710a, /* backward: orange */
    0xff1e8e3e, /* optimizer: green */
    0xff9334e6, /* loader: purple */
    0xffd01884, /* h2d: magenta */
    0xffd93025, /* collective: red */
    0xff5f6368, /* user: grey */
    0xff202124, /* step: black */
    0xff12b5cb, /* amp: cyan */
};

static void init(void) {
  g_domain = nvtxDomainCreateA("loom");
  for (int c = 0; c < LOOM_PROF_NCAT; c++) nvtxDomainNameCategoryA(g_domain, (uint32_t)c + 1, loom_prof_cat_name(c));
}

int loom_prof_nvtx_available(void) { return 1; }

void loom_prof_nvtx_push(int cat, const char *name) {
  pthread_once(&g_once, init);
  nvtxEventAttributes_t a = {0};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.category = (uint32_t)cat + 1;
  a.colorType = NVTX_COLOR_ARGB;
  a.color = cat >= 0 && cat < LOOM_PROF_NCAT ? g_colors[cat] : 0xff000000;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  nvtxDomainRangePushEx(g_domain, &a);
}

void loom_prof_nvtx_pop(void) {
  pthread_once(&g_once, init);
  nvtxDomainRangePop(g_domain);
}

#else

int loom_prof_nvtx_available(void) { return 0; }
void loom_prof_nvtx_push(int cat, const char *name) { (void)cat, (void)name; }
void loom_prof_nvtx_pop(void) {}

#endif
