/* nvtx.c — loom's ranges as NVTX v3 ranges (the header-only NVTX that ships
 * with the CUDA toolkit), in a "loom" domain with one named category and
 * color per kind of range, so Nsight Systems shows ops, backward, optimizer,
 * loader, copies and user ranges on each thread. Without an attached tool,
 * NVTX calls are a null check each. Built without CUDA there is no NVTX and
 * these are no-ops. */
#include "prof/prof_internal.h"

#ifdef LOOM_HAVE_NVTX
/* NVTX v3 is header-only: nvToolsExt.h defines its implementation in the
 * file that includes it, as hidden weak ("link-once") functions and globals
 * named nvtx*_v3, plus a weak InitializeInjectionNvtx2_fnptr for statically
 * linked tools. In libloom.a those would be global names beside loom_*
 * that a user's own NVTX copy would merge with. Only this file includes
 * NVTX, so here they become static instead: the link-once macros of
 * nvtxDetail/nvtxLinkOnce.h are given as static before the header reads
 * them (its include guard then skips its own definitions), and static
 * injection is off (NVTX_SUPPORT_STATIC_INJECTION_LIBRARY, nvtxInit.h).
 * Tools attach through NVTX_INJECTION64_PATH as before, which is how Nsight
 * Systems does it (tests/test_prof_nvtx.c checks that path). */
#define NVTX_SUPPORT_STATIC_INJECTION_LIBRARY 0
#define __NVTX_LINKONCE_H__
#define NVTX_LINKONCE_DEFINE_GLOBAL static
#define NVTX_LINKONCE_DEFINE_FUNCTION static
#define NVTX_LINKONCE_FWDDECL_GLOBAL static
#define NVTX_LINKONCE_FWDDECL_FUNCTION static
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  /* the parts of NVTX loom does not call */
#include <nvtx3/nvToolsExt.h>
#pragma GCC diagnostic pop

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
