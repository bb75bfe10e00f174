/* image_folder_internal.h (internal) — the image-folder dataset's state,
 * shared by its listing (image_list.c) and its reads (image_folder.c). */
#ifndef LOOM_DATA_IMAGE_FOLDER_INTERNAL_H
#define LOOM_DATA_IMAGE_FOLDER_INTERNAL_H

#include "data/data_internal.h"
#include "data/image_resize.h"

typedef struct imgf {
  loom_image_folder_options o;
  char *root;
  char **paths;          /* n full paths */
  int32_t *labels;
  int64_t n;
  char **classes;        /* folder names, or NULL (file list) */
  int64_t nclasses;
  loom_rrc_params rrc;
  /* skip_bad bookkeeping */
  atomic_uchar *bad;     /* per sample: 1 once found bad */
  atomic_llong nbad;
  long long nbad_reported;
  pthread_mutex_t msg_mu;
  char *first_bad;       /* message of the first bad file */
} imgf;

/* A growable array of malloc'd strings. */
typedef struct strvec {
  char **v;
  size_t n, cap;
} strvec;
void loom_imgf_strvec_free(strvec *s);

/* Fill paths (full paths) and f->labels, f->classes, f->nclasses: by
 * scanning f->root as torchvision's ImageFolder, or from the "path label"
 * lines of f->o.file_list. The error names the root, class, list or line. */
loom_status loom_imgf_scan_root(imgf *f, strvec *paths);
loom_status loom_imgf_read_list(imgf *f, strvec *paths);

#endif
