/* test_image_folder.c — the ImageFolder dataset (data.h): listing in
 * torchvision's order, file lists, every error path, decoding and the
 * ImageNet transforms against torchvision + PIL (tests/ref/image_folder_ref.py,
 * skipped visibly without torch), crop geometry against torchvision's
 * sampling rules, determinism across worker counts and ranks, and corrupt
 * files (truncations, garbage, byte flips) giving an error or a counted
 * skip, never a crash. Images are encoded here with libjpeg and libpng. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jpeglib.h>
#include <png.h>

#include "data/data_internal.h"
#include "data/image_resize.h"
#include "support/testkit.h"

static char g_dir[256];

static void setup(void) { tk_tmpdir(g_dir, sizeof g_dir, "loom-imgf"); }
static void teardown(void) { tk_tmpdir_remove(g_dir); }
TestSuite(image_folder, .init = setup, .fini = teardown);

/* ---- encoders ----------------------------------------------------------------------- */
static void mkdirs(const char *path) {
  char p[1024];
  snprintf(p, sizeof p, "%s", path);
  for (char *s = p + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      mkdir(p, 0755);
      *s = '/';
    }
  mkdir(p, 0755);
}

/* A smooth, structured RGB picture (JPEG-friendly), varied by seed. */
static unsigned char *picture(int w, int h, int seed) {
  unsigned char *px = malloc((size_t)w * h * 3);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      unsigned char *p = px + ((size_t)y * w + x) * 3;
      p[0] = (unsigned char)(127 + 120 * sin(0.031 * x + seed));
      p[1] = (unsigned char)(127 + 120 * cos(0.023 * y + 0.5 * seed));
      p[2] = (unsigned char)((x * 7 + y * 3 + seed * 40) & 255);
    }
  return px;
}

/* comps 3 (RGB), 1 (grey) or 4 (CMYK) samples per pixel. */
static void write_jpeg(const char *path, const unsigned char *px, int w, int h, int comps, int quality) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f, "%s", path);
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr e;
  c.err = jpeg_std_error(&e);
  jpeg_create_compress(&c);
  jpeg_stdio_dest(&c, f);
  c.image_width = (JDIMENSION)w;
  c.image_height = (JDIMENSION)h;
  c.input_components = comps;
  c.in_color_space = comps == 3 ? JCS_RGB : comps == 1 ? JCS_GRAYSCALE : JCS_CMYK;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW r = (JSAMPROW)(px + (size_t)c.next_scanline * w * comps);
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  fclose(f);
}

/* color_type: PNG_COLOR_TYPE_RGB / GRAY / RGB_ALPHA / PALETTE; depth 8 or 16. */
static void write_png(const char *path, const unsigned char *px, int w, int h, int color_type, int depth) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f, "%s", path);
  png_structp p = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(p);
  png_init_io(p, f);
  png_set_IHDR(p, info, (png_uint_32)w, (png_uint_32)h, depth, color_type, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_color pal[256];
  if (color_type == PNG_COLOR_TYPE_PALETTE) {
    for (int i = 0; i < 256; i++) pal[i] = (png_color){(png_byte)i, (png_byte)(255 - i), (png_byte)(i / 2)};
    png_set_PLTE(p, info, pal, 256);
  }
  png_write_info(p, info);
  int ch = color_type == PNG_COLOR_TYPE_RGB ? 3 : color_type == PNG_COLOR_TYPE_RGB_ALPHA ? 4 : 1;
  size_t rowbytes = (size_t)w * ch * (depth / 8);
  for (int y = 0; y < h; y++) png_write_row(p, (png_bytep)(px + (size_t)y * rowbytes));
  png_write_end(p, NULL);
  png_destroy_write_struct(&p, &info);
  fclose(f);
}

static void write_bytes(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f, "%s", path);
  if (n) cr_assert_eq(fwrite(b, 1, n, f), n);
  fclose(f);
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "%s", path);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc(*n + 1);
  cr_assert_eq(fread(b, 1, *n, f), *n);
  fclose(f);
  return b;
}

static void jpeg_at(const char *rel, int w, int h, int seed) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", g_dir, rel);
  char d[1024];
  snprintf(d, sizeof d, "%s", p);
  *strrchr(d, '/') = 0;
  mkdirs(d);
  unsigned char *px = picture(w, h, seed);
  write_jpeg(p, px, w, h, 3, 90);
  free(px);
}

static void png_at(const char *rel, int w, int h, int seed) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", g_dir, rel);
  char d[1024];
  snprintf(d, sizeof d, "%s", p);
  *strrchr(d, '/') = 0;
  mkdirs(d);
  unsigned char *px = picture(w, h, seed);
  write_png(p, px, w, h, PNG_COLOR_TYPE_RGB, 8);
  free(px);
}

static loom_dataset *open_opts(const char *sub, const loom_image_folder_options *o) {
  char root[512];
  snprintf(root, sizeof root, "%s/%s", g_dir, sub);
  return loom_dataset_image_folder_open(root, o);
}

/* ---- listing ------------------------------------------------------------------------- */
Test(image_folder, classes_and_files_come_in_torchvisions_order) {
  jpeg_at("r/b/z.jpg", 40, 30, 1);
  jpeg_at("r/b/a.JPEG", 40, 30, 2);
  png_at("r/b/sub/m.png", 40, 30, 3);
  png_at("r/b/sub-x/k.Png", 40, 30, 4);
  jpeg_at("r/b/sub/deep/q.jpg", 40, 30, 7);
  png_at("r/b/a/z/w.png", 40, 30, 8);
  jpeg_at("r/b/c/v.jpg", 40, 30, 9);
  jpeg_at("r/a/only.jpg", 40, 30, 5);
  jpeg_at("r/C/x.jpeg", 40, 30, 6);
  char p[600];
  snprintf(p, sizeof p, "%s/r/b/notes.txt", g_dir);
  write_bytes(p, "x", 1);
  snprintf(p, sizeof p, "%s/r/stray.jpg", g_dir);  /* files beside the classes are not samples */
  write_bytes(p, "x", 1);
  loom_dataset *ds = open_opts("r", NULL);
  cr_assert_not_null(ds, "%s", loom_last_error());
  cr_assert_eq(loom_image_folder_num_classes(ds), 3);
  /* Sorted by code point: upper case first, as Python's sorted(). */
  cr_assert_str_eq(loom_image_folder_class_name(ds, 0), "C");
  cr_assert_str_eq(loom_image_folder_class_name(ds, 1), "a");
  cr_assert_str_eq(loom_image_folder_class_name(ds, 2), "b");
  cr_assert_null(loom_image_folder_class_name(ds, 3));
  /* sorted(os.walk()) orders directories by path: "b/a/z" < "b/c" (which a
   * breadth-first walk would not) and "b/sub" < "b/sub-x" < "b/sub/deep"
   * ('-' < '/'; which a depth-first walk would not). */
  const char *want[] = {"C/x.jpeg",    "a/only.jpg",    "b/a.JPEG",          "b/z.jpg", "b/a/z/w.png", "b/c/v.jpg",
                        "b/sub/m.png", "b/sub-x/k.Png", "b/sub/deep/q.jpg"};
  const int labels[] = {0, 1, 2, 2, 2, 2, 2, 2, 2};
  cr_assert_eq(loom_dataset_length(ds), 9);
  for (int i = 0; i < 9; i++) {
    char full[600];
    snprintf(full, sizeof full, "%s/r/%s", g_dir, want[i]);
    cr_assert_str_eq(loom_image_folder_path(ds, i), full, "sample %d", i);
    int32_t y = -1;
    cr_assert_eq(loom_dataset_read(ds, i, NULL, &y), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(y, labels[i], "sample %d label", i);
  }
  loom_dtype dt;
  int nd;
  int64_t sh[LOOM_MAX_DIMS];
  cr_assert_eq(loom_dataset_x_info(ds, &dt, &nd, sh), LOOM_OK);
  cr_assert(dt == LOOM_U8 && nd == 3 && sh[0] == 3 && sh[1] == 224 && sh[2] == 224);
  loom_dataset_release(ds);
}

Test(image_folder, listing_errors_name_the_problem) {
  /* A missing root. */
  loom_dataset *ds = open_opts("nope", NULL);
  cr_assert_null(ds);
  tk_assert_error(loom_last_status(), LOOM_ERR_IO, "nope");
  /* No class folders. */
  char p[600];
  snprintf(p, sizeof p, "%s/flat", g_dir);
  mkdirs(p);
  jpeg_at("flat/x.jpg", 8, 8, 1);
  cr_assert_null(open_opts("flat", NULL));
  tk_assert_error(loom_last_status(), LOOM_ERR_FORMAT, "no class folders");
  /* An empty class (a text file is not an image). */
  jpeg_at("e/good/x.jpg", 8, 8, 1);
  snprintf(p, sizeof p, "%s/e/empty", g_dir);
  mkdirs(p);
  snprintf(p, sizeof p, "%s/e/empty/readme.txt", g_dir);
  write_bytes(p, "hi", 2);
  cr_assert_null(open_opts("e", NULL));
  tk_assert_error(loom_last_status(), LOOM_ERR_FORMAT, "empty' holds no image");
  /* NULL root. */
  cr_assert_null(loom_dataset_image_folder_open(NULL, NULL));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "root is NULL");
}

Test(image_folder, options_are_checked) {
  jpeg_at("o/a/x.jpg", 8, 8, 1);
  loom_image_folder_options o;
#define BAD(field, value, msg)                                              \
  do {                                                                      \
    loom_image_folder_options_init(&o);                                     \
    o.field = value;                                                        \
    cr_assert_null(open_opts("o", &o), #field);                             \
    tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, msg);         \
  } while (0)
  BAD(image_size, 0, "image_size is 0");
  BAD(mode, (loom_image_mode)7, "mode is 7");
  BAD(scale_min, 0.0f, "scale is (0, 1)");
  BAD(scale_max, 1.5f, "scale is");
  BAD(ratio_min, 2.0f, "ratio is (2, 1.33");
  BAD(num_classes, -1, "num_classes is -1");
  loom_image_folder_options_init(&o);
  o.mode = LOOM_IMAGE_EVAL;
  o.resize_size = 100;
  cr_assert_null(open_opts("o", &o));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "resize_size is 100");
  loom_image_folder_options_init(&o);
  o.struct_size = 0;
  cr_assert_null(open_opts("o", &o));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "struct_size is 0");
#undef BAD
  cr_assert(loom_image_folder_supports("jpeg") && loom_image_folder_supports("PNG"));
  cr_assert(!loom_image_folder_supports("gif") && !loom_image_folder_supports(NULL));
  /* Accessors refuse other datasets. */
  int64_t xs[1] = {2};
  float x[2] = {0, 0};
  loom_dataset *mem = loom_dataset_memory(x, LOOM_F32, 1, xs, NULL, LOOM_U8, 1, true);
  cr_assert_eq(loom_image_folder_num_classes(mem), 0);
  cr_assert_null(loom_image_folder_path(mem, 0));
  tk_assert_error(loom_image_folder_bad_files(mem, NULL, NULL), LOOM_ERR_INVALID_ARG, "not an image folder");
  loom_dataset_release(mem);
}

Test(image_folder, file_list_instead_of_a_scan) {
  jpeg_at("l/img one.jpg", 16, 12, 1);
  png_at("l/two.png", 16, 12, 2);
  char list[600], abs_path[600];
  snprintf(abs_path, sizeof abs_path, "%s/l/two.png", g_dir);
  snprintf(list, sizeof list, "%s/list.txt", g_dir);
  FILE *f = fopen(list, "w");
  fprintf(f, "# comment\n\nimg one.jpg 4\n%s\t1\r\n", abs_path);
  fclose(f);
  loom_image_folder_options o;
  loom_image_folder_options_init(&o);
  o.file_list = list;
  o.image_size = 8;
  loom_dataset *ds = open_opts("l", &o);
  cr_assert_not_null(ds, "%s", loom_last_error());
  cr_assert_eq(loom_dataset_length(ds), 2);
  cr_assert_eq(loom_image_folder_num_classes(ds), 5, "largest label + 1");
  cr_assert_null(loom_image_folder_class_name(ds, 0));
  char want[600];
  snprintf(want, sizeof want, "%s/l/img one.jpg", g_dir);
  cr_assert_str_eq(loom_image_folder_path(ds, 0), want);
  cr_assert_str_eq(loom_image_folder_path(ds, 1), abs_path);
  unsigned char x[3 * 8 * 8];
  int32_t y;
  cr_assert_eq(loom_dataset_read(ds, 0, x, &y), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(y, 4);
  cr_assert_eq(loom_dataset_read(ds, 1, x, &y), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(y, 1);
  loom_dataset_release(ds);
  /* num_classes too small for a label; a bad line; a missing list; an empty one. */
  o.num_classes = 3;
  cr_assert_null(open_opts("l", &o));
  tk_assert_error(loom_last_status(), LOOM_ERR_FORMAT, "label 4 but num_classes is 3");
  o.num_classes = 0;
  f = fopen(list, "w");
  fprintf(f, "img one.jpg 1\ntwo.png minus\n");
  fclose(f);
  cr_assert_null(open_opts("l", &o));
  tk_assert_error(loom_last_status(), LOOM_ERR_FORMAT, "line 2");
  f = fopen(list, "w");
  fprintf(f, "# nothing\n");
  fclose(f);
  cr_assert_null(open_opts("l", &o));
  tk_assert_error(loom_last_status(), LOOM_ERR_FORMAT, "names no image");
  snprintf(list, sizeof list, "%s/missing.txt", g_dir);
  o.file_list = list;
  cr_assert_null(open_opts("l", &o));
  tk_assert_error(loom_last_status(), LOOM_ERR_IO, "missing.txt");
}

/* ---- decoding ------------------------------------------------------------------------ */
/* With image_size == resize_size == the image's side, eval is the identity:
 * the sample is the decoded pixels, CHW. */
static void read_identity(const char *rel, int side, unsigned char *chw) {
  loom_image_folder_options o;
  loom_image_folder_options_init(&o);
  o.mode = LOOM_IMAGE_EVAL;
  o.image_size = o.resize_size = side;
  char list[600];
  snprintf(list, sizeof list, "%s/one.txt", g_dir);
  FILE *f = fopen(list, "w");
  fprintf(f, "%s 0\n", rel);
  fclose(f);
  o.file_list = list;
  loom_dataset *ds = open_opts("", &o);
  cr_assert_not_null(ds, "%s", loom_last_error());
  cr_assert_eq(loom_dataset_read(ds, 0, chw, NULL), LOOM_OK, "%s", loom_last_error());
  loom_dataset_release(ds);
}

Test(image_folder, png_colour_types_become_rgb_exactly) {
  enum { N = 16 };
  unsigned char grey[N * N], rgba[N * N * 4], pal[N * N], g16[N * N * 2], out[3 * N * N];
  for (int i = 0; i < N * N; i++) {
    grey[i] = (unsigned char)(i * 7);
    pal[i] = (unsigned char)(i * 3);
    for (int c = 0; c < 4; c++) rgba[4 * i + c] = (unsigned char)(i + 60 * c);
    g16[2 * i] = (unsigned char)(i * 5), g16[2 * i + 1] = 0xEE; /* big-endian: the high byte counts */
  }
  char p[600];
  mkdirs(g_dir);
  snprintf(p, sizeof p, "%s/grey.png", g_dir);
  write_png(p, grey, N, N, PNG_COLOR_TYPE_GRAY, 8);
  read_identity("grey.png", N, out);
  for (int i = 0; i < N * N; i++)
    for (int c = 0; c < 3; c++) cr_assert_eq(out[c * N * N + i], grey[i], "grey pixel %d channel %d", i, c);
  snprintf(p, sizeof p, "%s/rgba.png", g_dir);
  write_png(p, rgba, N, N, PNG_COLOR_TYPE_RGB_ALPHA, 8);
  read_identity("rgba.png", N, out);
  for (int i = 0; i < N * N; i++)
    for (int c = 0; c < 3; c++) cr_assert_eq(out[c * N * N + i], rgba[4 * i + c], "rgba pixel %d channel %d", i, c);
  snprintf(p, sizeof p, "%s/pal.png", g_dir);
  write_png(p, pal, N, N, PNG_COLOR_TYPE_PALETTE, 8);
  read_identity("pal.png", N, out);
  for (int i = 0; i < N * N; i++) {
    int v = pal[i];
    cr_assert(out[i] == v && out[N * N + i] == 255 - v && out[2 * N * N + i] == v / 2, "palette pixel %d", i);
  }
  snprintf(p, sizeof p, "%s/g16.png", g_dir);
  write_png(p, g16, N, N, PNG_COLOR_TYPE_GRAY, 16);
  read_identity("g16.png", N, out);
  for (int i = 0; i < N * N; i++) cr_assert_eq(out[i], g16[2 * i], "16-bit pixel %d", i);
}

Test(image_folder, grey_and_cmyk_jpegs_become_rgb) {
  enum { N = 32 };
  unsigned char grey[N * N], cmyk[N * N * 4], out[3 * N * N];
  for (int i = 0; i < N * N; i++) grey[i] = (unsigned char)(40 + (i % N) * 4);
  /* Constant CMYK: libjpeg writes the samples as given (no Adobe inversion
   * without the marker... it writes one, so the values read back inverted). */
  for (int i = 0; i < N * N; i++) cmyk[4 * i] = 200, cmyk[4 * i + 1] = 100, cmyk[4 * i + 2] = 50, cmyk[4 * i + 3] = 220;
  char p[600];
  mkdirs(g_dir);
  snprintf(p, sizeof p, "%s/grey.jpg", g_dir);
  write_jpeg(p, grey, N, N, 1, 95);
  read_identity("grey.jpg", N, out);
  for (int i = 0; i < N * N; i++) {
    cr_assert(out[i] == out[N * N + i] && out[i] == out[2 * N * N + i], "grey JPEG pixel %d is grey", i);
    cr_assert_leq(abs(out[i] - grey[i]), 3, "grey JPEG pixel %d: %d vs %d", i, out[i], grey[i]);
  }
  snprintf(p, sizeof p, "%s/cmyk.jpg", g_dir);
  write_jpeg(p, cmyk, N, N, 4, 95);
  read_identity("cmyk.jpg", N, out);
  /* Adobe-inverted storage (libjpeg writes the Adobe marker for CMYK):
   * R = C * K / 255 on the stored values, as Pillow's CMYK;I -> RGB. */
  int want[3] = {200 * 220 / 255, 100 * 220 / 255, 50 * 220 / 255};
  for (int c = 0; c < 3; c++)
    cr_assert_leq(abs(out[c * N * N + N * N / 2] - want[c]), 3, "CMYK channel %d: %d vs %d", c,
                  out[c * N * N + N * N / 2], want[c]);
}

/* ---- against torchvision -------------------------------------------------------------- */
static const char *python(void) {
  const char *py = getenv("LOOM_TEST_PYTHON");
  return py && *py ? py : "python3";
}

/* Runs tests/ref/image_folder_ref.py with args; 3 means torch is missing. */
static int run_ref(const char *args, char *out, size_t n) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s %s/ref/image_folder_ref.py %s 2>&1", python(), LOOM_TEST_SRC_DIR, args);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  size_t got = fread(out, 1, n - 1, p);
  out[got] = 0;
  int rc = pclose(p);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* A small "ImageNet": JPEGs of several sizes (one greyscale, one smaller than
 * the crop) and a PNG, in two classes. */
static void make_tree(const char *sub) {
  char rel[256];
  const int sizes[][2] = {{500, 375}, {375, 500}, {640, 480}, {300, 200}, {180, 160}, {1024, 683}};
  for (int k = 0; k < 6; k++) {
    snprintf(rel, sizeof rel, "%s/%s/im%d.jpg", sub, k % 2 ? "dog" : "cat", k);
    jpeg_at(rel, sizes[k][0], sizes[k][1], k);
  }
  snprintf(rel, sizeof rel, "%s/dog/p.png", sub);
  png_at(rel, 260, 300, 9);
  char p[900];
  snprintf(p, sizeof p, "%s/%s/cat/grey.jpg", g_dir, sub);
  unsigned char *px = picture(333, 250, 4);
  for (int i = 0; i < 333 * 250; i++) px[i] = px[3 * i];
  write_jpeg(p, px, 333, 250, 1, 90);
  free(px);
}

/* Writes loom's samples (mode) to files and compares with torchvision. */
static void compare_with_torchvision(loom_image_mode mode, bool dct, int tol) {
  make_tree("tv");
  loom_image_folder_options o;
  loom_image_folder_options_init(&o);
  o.mode = mode;
  o.dct_scaling = dct;
  loom_dataset *ds = open_opts("tv", &o);
  cr_assert_not_null(ds, "%s", loom_last_error());
  int64_t n = loom_dataset_length(ds);
  char paths[600], params[600], bin[600], root[600];
  snprintf(root, sizeof root, "%s/tv", g_dir);
  snprintf(paths, sizeof paths, "%s/paths.txt", g_dir);
  snprintf(params, sizeof params, "%s/params.txt", g_dir);
  snprintf(bin, sizeof bin, "%s/samples.bin", g_dir);
  FILE *fp = fopen(paths, "w"), *fq = fopen(params, "w"), *fb = fopen(bin, "wb");
  unsigned char *x = malloc(3 * 224 * 224);
  for (int64_t i = 0; i < n; i++) {
    int32_t y;
    cr_assert_eq(loom_dataset_read(ds, i, x, &y), LOOM_OK, "%s", loom_last_error());
    fwrite(x, 1, 3 * 224 * 224, fb);
    fprintf(fp, "%s %d\n", loom_image_folder_path(ds, i), y);
    if (mode == LOOM_IMAGE_EVAL) {
      fprintf(fq, "%lld eval 256\n", (long long)i);
    } else {
      /* The crop loom drew for this read (seed 0, epoch 0), from the full size. */
      size_t len;
      unsigned char *buf = slurp(loom_image_folder_path(ds, i), &len);
      int W = 0, H = 0;
      if (buf[0] == 0x89) W = buf[16] << 24 | buf[17] << 16 | buf[18] << 8 | buf[19], H = buf[20] << 24 | buf[21] << 16 | buf[22] << 8 | buf[23];
      else {
        struct jpeg_decompress_struct c;
        struct jpeg_error_mgr e;
        c.err = jpeg_std_error(&e);
        jpeg_create_decompress(&c);
        jpeg_mem_src(&c, buf, len);
        jpeg_read_header(&c, TRUE);
        W = (int)c.image_width, H = (int)c.image_height;
        jpeg_destroy_decompress(&c);
      }
      free(buf);
      uint64_t key = loom_data_sample_key(0, 0, i);
      loom_rrc_params rp = {0.08f, 1.0f, 3.0f / 4.0f, 4.0f / 3.0f};
      int top, left, h, w;
      loom_img_rrc_crop(W, H, &rp, key, &top, &left, &h, &w);
      fprintf(fq, "%lld train %d %d %d %d %d\n", (long long)i, top, left, h, w, (int)loom_img_flip(key));
    }
  }
  free(x);
  fclose(fp), fclose(fq), fclose(fb);
  loom_dataset_release(ds);
  char args[3000], out[8192];
  snprintf(args, sizeof args, "samples '%s' '%s' '%s' '%s' 224 %d", root, paths, params, bin, tol);
  int rc = run_ref(args, out, sizeof out);
  if (rc == 3) {
    cr_skip_test("image folder reference skipped: %s", out);
    return;
  }
  fprintf(stderr, "%s", out);
  cr_assert_eq(rc, 0, "loom vs torchvision (%s, dct_scaling %d):\n%s", mode == LOOM_IMAGE_EVAL ? "eval" : "train", dct,
               out);
}

/* Pillow decodes with the same libjpeg-turbo and resamples with the same
 * filter in the same fixed point: the samples are equal, byte for byte. */
Test(image_folder, eval_transform_matches_torchvision) { compare_with_torchvision(LOOM_IMAGE_EVAL, false, 0); }
Test(image_folder, train_transform_matches_torchvision) { compare_with_torchvision(LOOM_IMAGE_TRAIN, false, 0); }

/* DCT-domain scaling decodes 2-8x fewer pixels: close, not equal. */
Test(image_folder, dct_scaling_stays_close_to_a_full_decode) {
  jpeg_at("big/a/x.jpg", 2000, 1500, 3);
  loom_image_folder_options o;
  loom_image_folder_options_init(&o);
  o.mode = LOOM_IMAGE_EVAL;
  unsigned char *a = malloc(3 * 224 * 224), *b = malloc(3 * 224 * 224);
  loom_dataset *ds = open_opts("big", &o);
  cr_assert_not_null(ds, "%s", loom_last_error());
  cr_assert_eq(loom_dataset_read(ds, 0, a, NULL), LOOM_OK, "%s", loom_last_error());
  loom_dataset_release(ds);
  o.dct_scaling = false;
  ds = open_opts("big", &o);
  cr_assert_eq(loom_dataset_read(ds, 0, b, NULL), LOOM_OK, "%s", loom_last_error());
  loom_dataset_release(ds);
  double sum = 0;
  int worst = 0, same = 1;
  for (int i = 0; i < 3 * 224 * 224; i++) {
    int d = abs(a[i] - b[i]);
    sum += d;
    if (d > worst) worst = d;
    if (d) same = 0;
  }
  double mean = sum / (3 * 224 * 224);
  cr_assert(!same, "a 2000x1500 eval crop is decoded at a smaller DCT scale");
  cr_assert_lt(mean, 2.0, "mean |scaled - full| = %g (max %d)", mean, worst);
  free(a);
  free(b);
}

/* ---- crop geometry ------------------------------------------------------------------- */
Test(image_folder, random_resized_crop_follows_torchvisions_rules) {
  const loom_rrc_params p = {0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0};
  enum { N = 20000 };
  const int W = 500, H = 375;
  double area = 0, lr = 0, top_f = 0, left_f = 0;
  for (int k = 0; k < N; k++) {
    int t, l, h, w;
    loom_img_rrc_crop(W, H, &p, loom_data_sample_key(1, 0, k), &t, &l, &h, &w);
    cr_assert(h > 0 && w > 0 && t >= 0 && l >= 0 && t + h <= H && l + w <= W, "crop %d,%d %dx%d in %dx%d", t, l, w,
              h, W, H);
    /* Rounded sides of an area fraction in [0.08, 1] and a ratio in [3/4, 4/3]. */
    cr_assert(w <= (int)ceil(sqrt(1.0 * W * H * 4 / 3)) + 1 && h >= 1);
    area += (double)h * w / (W * H);
    lr += log((double)w / h);
    top_f += (double)t / (H - h + 1);
    left_f += (double)l / (W - w + 1);
  }
  area /= N, lr /= N, top_f /= N, left_f /= N;
  /* Fallbacks: no try fits a 1000x10 strip -> central crop of ratio 4/3. */
  int t, l, h, w;
  loom_img_rrc_crop(1000, 10, &p, 7, &t, &l, &h, &w);
  cr_assert(t == 0 && h == 10 && w == 13 && l == (1000 - 13) / 2, "got %d,%d %dx%d", t, l, w, h);
  loom_img_rrc_crop(10, 1000, &p, 7, &t, &l, &h, &w);
  cr_assert(l == 0 && w == 10 && h == 13 && t == (1000 - 13) / 2, "got %d,%d %dx%d", t, l, w, h);
  /* Resize(256) + CenterCrop(224) of 500x375: 341x256, crop at (58, 16). */
  double box[4];
  loom_img_center_box(500, 375, 256, 224, box);
  cr_assert(fabs(box[0] - 58 * 500.0 / 341) < 1e-9 && fabs(box[1] - 16 * 375.0 / 256) < 1e-9, "%g %g", box[0], box[1]);
  /* The same statistics of torchvision's get_params (4 standard errors). */
  char out[4096];
  int rc = run_ref("rrc 500 375 20000", out, sizeof out);
  if (rc == 3) {
    cr_skip_test("image folder reference skipped: %s", out);
    return;
  }
  cr_assert_eq(rc, 0, "%s", out);
  double ta, tl, tt, tlf;
  cr_assert_eq(sscanf(out, "%lf %lf %lf %lf", &ta, &tl, &tt, &tlf), 4, "%s", out);
  fprintf(stderr, "rrc 500x375: loom area %.4f logratio %.4f top %.4f left %.4f; torchvision %.4f %.4f %.4f %.4f\n",
          area, lr, top_f, left_f, ta, tl, tt, tlf);
  const double se_area = 0.27 / sqrt(N), se_lr = 0.17 / sqrt(N), se_pos = 0.29 / sqrt(N);
  cr_assert_lt(fabs(area - ta), 4 * sqrt(2) * se_area, "area fraction %g vs torchvision %g", area, ta);
  cr_assert_lt(fabs(lr - tl), 4 * sqrt(2) * se_lr, "log ratio %g vs torchvision %g", lr, tl);
  cr_assert_lt(fabs(top_f - tt), 4 * sqrt(2) * se_pos, "top %g vs torchvision %g", top_f, tt);
  cr_assert_lt(fabs(left_f - tlf), 4 * sqrt(2) * se_pos, "left %g vs torchvision %g", left_f, tlf);
}

/* ---- the loader: determinism, sharding -------------------------------------------------- */
typedef struct epoch_bytes {
  unsigned char *x;
  int64_t *y;
  int64_t n;
} epoch_bytes;

static epoch_bytes run_epoch_ex(loom_dataset *ds, int workers, int prefetch, int rank, int world, int64_t epoch,
                                bool shuffle) {
  loom_loader_options lo;
  loom_loader_options_init(&lo);
  lo.batch_size = 3;
  lo.shuffle = shuffle;
  lo.seed = 11;
  lo.workers = workers;
  lo.prefetch = prefetch;
  lo.x_dtype = LOOM_U8;
  lo.channels_last = true;
  lo.rank = rank;
  lo.world_size = world;
  loom_loader *l = loom_loader_new(ds, &lo);
  cr_assert_not_null(l, "%s", loom_last_error());
  cr_assert_eq(loom_loader_start_epoch(l, epoch), LOOM_OK);
  const size_t per = 3 * 64 * 64;
  epoch_bytes e = {malloc(per * 64), malloc(sizeof(int64_t) * 64), 0};
  for (;;) {
    loom_tensor *x, *y;
    cr_assert_eq(loom_loader_next(l, &x, &y), LOOM_OK, "%s", loom_last_error());
    if (!x) break;
    cr_assert(loom_tensor_is_channels_last(x), "NHWC batches");
    int64_t b = loom_tensor_dim(x, 0);
    loom_tensor *xc = loom_contiguous(x); /* back to CHW per sample */
    memcpy(e.x + e.n * per, loom_tensor_data(xc), b * per);
    memcpy(e.y + e.n, loom_tensor_data(y), sizeof(int64_t) * (size_t)b);
    loom_tensor_release(xc);
    e.n += b;
    loom_tensor_release(x);
    loom_tensor_release(y);
  }
  loom_loader_free(l);
  return e;
}

static epoch_bytes run_epoch(loom_dataset *ds, int workers, int prefetch, int rank, int world, int64_t epoch) {
  return run_epoch_ex(ds, workers, prefetch, rank, world, epoch, true);
}

Test(image_folder, batches_do_not_depend_on_workers_and_shard_by_rank) {
  make_tree("det");
  loom_image_folder_options o;
  loom_image_folder_options_init(&o);
  o.image_size = 64;
  loom_dataset *ds = open_opts("det", &o);
  cr_assert_not_null(ds, "%s", loom_last_error());
  const size_t per = 3 * 64 * 64;
  epoch_bytes ref = run_epoch(ds, 0, 1, 0, 1, 1);
  cr_assert_eq(ref.n, loom_dataset_length(ds));
  const int cfg[][2] = {{1, 1}, {3, 2}, {4, 5}};
  for (int c = 0; c < 3; c++) {
    epoch_bytes e = run_epoch(ds, cfg[c][0], cfg[c][1], 0, 1, 1);
    cr_assert_eq(e.n, ref.n);
    cr_assert(!memcmp(e.x, ref.x, per * (size_t)e.n), "workers %d prefetch %d: same pixels", cfg[c][0], cfg[c][1]);
    cr_assert(!memcmp(e.y, ref.y, sizeof(int64_t) * (size_t)e.n));
    free(e.x), free(e.y);
  }
  /* Another epoch draws other crops: in the same (unshuffled) order, every
   * sample differs. */
  epoch_bytes u1 = run_epoch_ex(ds, 2, 2, 0, 1, 1, false), u2 = run_epoch_ex(ds, 1, 2, 0, 1, 2, false);
  for (int64_t i = 0; i < u1.n; i++)
    cr_assert(memcmp(u1.x + i * per, u2.x + i * per, per), "sample %lld: epoch 2's crop differs from epoch 1's",
              (long long)i);
  /* And a batch sample is the dataset read with the loader's key. */
  unsigned char *one = malloc(per);
  cr_assert_eq(loom_dataset_read_keyed(ds, 1, loom_data_sample_key(11, 2, 1), one, NULL), LOOM_OK);
  cr_assert(!memcmp(u2.x + per, one, per), "sample 1 of epoch 2 is the dataset's read with key (11, 2, 1)");
  free(one);
  free(u1.x), free(u1.y), free(u2.x), free(u2.y);
  /* Two ranks: disjoint halves that together hold every label once more. */
  epoch_bytes r0 = run_epoch(ds, 2, 2, 0, 2, 1), r1 = run_epoch(ds, 1, 2, 1, 2, 1);
  cr_assert_eq(r0.n + r1.n, ref.n + (ref.n % 2), "ranks cover the epoch (padded to even)");
  int64_t count[2] = {0, 0}, want[2] = {0, 0};
  for (int64_t i = 0; i < r0.n; i++) count[r0.y[i]]++;
  for (int64_t i = 0; i < r1.n; i++) count[r1.y[i]]++;
  for (int64_t i = 0; i < ref.n; i++) want[ref.y[i]]++;
  cr_assert(count[0] >= want[0] && count[1] >= want[1] && count[0] + count[1] == r0.n + r1.n);
  free(r0.x), free(r0.y), free(r1.x), free(r1.y), free(ref.x), free(ref.y);
  loom_dataset_release(ds);
}

/* ---- corrupt files ------------------------------------------------------------------- */
/* Reads sample 0 of a one-file list over `bytes`: OK or an error, never a crash. */
static loom_status read_bytes_as(const char *name, const unsigned char *b, size_t n, loom_image_mode mode) {
  char p[600], list[600];
  snprintf(p, sizeof p, "%s/%s", g_dir, name);
  write_bytes(p, b, n);
  snprintf(list, sizeof list, "%s/c.txt", g_dir);
  FILE *f = fopen(list, "w");
  fprintf(f, "%s 0\n", name);
  fclose(f);
  loom_image_folder_options o;
  loom_image_folder_options_init(&o);
  o.file_list = list;
  o.mode = mode;
  o.image_size = 32;
  o.resize_size = 40;
  loom_dataset *ds = open_opts("", &o);
  cr_assert_not_null(ds, "%s", loom_last_error());
  unsigned char x[3 * 32 * 32];
  loom_status st = loom_dataset_read(ds, 0, x, NULL);
  if (st != LOOM_OK) cr_assert(strstr(loom_last_error(), name), "the error names the file: %s", loom_last_error());
  loom_dataset_release(ds);
  return st;
}

Test(image_folder, corrupt_files_are_errors_never_crashes) {
  mkdirs(g_dir);
  jpeg_at("src.jpg", 120, 90, 1);
  png_at("src.png", 120, 90, 2);
  char p[600];
  const char *srcs[2] = {"src.jpg", "src.png"};
  for (int s = 0; s < 2; s++) {
    snprintf(p, sizeof p, "%s/%s", g_dir, srcs[s]);
    size_t n;
    unsigned char *b = slurp(p, &n);
    /* Every truncation is an error: no half-grey image passes as good. */
    for (size_t cut = 0; cut < n; cut += n / 23 + 1)
      cr_assert_neq(read_bytes_as("cut.img", b, cut, LOOM_IMAGE_EVAL), LOOM_OK, "%s cut at %zu of %zu", srcs[s], cut,
                    n);
    /* Byte flips anywhere: an error or a decoded image, never a crash. */
    unsigned char *m = malloc(n);
    int errors = 0;
    for (int k = 0; k < 120; k++) {
      memcpy(m, b, n);
      size_t at = (size_t)(loom_data_mix(k, s) % n);
      m[at] ^= (unsigned char)(1 + (k * 37) % 255);
      if (k % 3 == 0) m[(at * 7 + 11) % n] = 0xFF;
      errors += read_bytes_as("flip.img", m, n, k % 2 ? LOOM_IMAGE_TRAIN : LOOM_IMAGE_EVAL) != LOOM_OK;
    }
    fprintf(stderr, "%s: %d of 120 byte-flipped copies were refused\n", srcs[s], errors);
    free(m);
    free(b);
  }
  /* Garbage, an empty file and a header with absurd dimensions. */
  unsigned char junk[300];
  for (int i = 0; i < 300; i++) junk[i] = (unsigned char)(i * 13);
  tk_assert_error(read_bytes_as("junk.jpg", junk, sizeof junk, LOOM_IMAGE_EVAL), LOOM_ERR_FORMAT, "neither a JPEG");
  tk_assert_error(read_bytes_as("empty.png", junk, 0, LOOM_IMAGE_EVAL), LOOM_ERR_FORMAT, "0 bytes");
  junk[0] = 0xFF, junk[1] = 0xD8, junk[2] = 0xFF;
  tk_assert_error(read_bytes_as("hdr.jpg", junk, sizeof junk, LOOM_IMAGE_EVAL), LOOM_ERR_FORMAT, "corrupt JPEG");
}

static char g_log[2048];
static void capture(loom_log_level lvl, const char *msg, void *user) {
  (void)user;
  if (lvl == LOOM_LOG_WARN) snprintf(g_log, sizeof g_log, "%s", msg);
}

Test(image_folder, bad_files_fail_the_batch_or_are_counted_and_skipped) {
  make_tree("bad");
  char p[600];
  snprintf(p, sizeof p, "%s/bad/cat/zz_broken.jpg", g_dir);
  write_bytes(p, "\xFF\xD8\xFF\xE0 not really", 15);
  snprintf(p, sizeof p, "%s/bad/dog/zz_garbage.png", g_dir);
  write_bytes(p, "garbage", 7);
  loom_image_folder_options o;
  loom_image_folder_options_init(&o);
  o.image_size = 32;
  loom_dataset *ds = open_opts("bad", &o);
  cr_assert_not_null(ds, "%s", loom_last_error());
  loom_loader_options lo;
  loom_loader_options_init(&lo);
  lo.batch_size = 4;
  lo.x_dtype = LOOM_U8;
  loom_loader *l = loom_loader_new(ds, &lo);
  loom_status st = LOOM_OK;
  for (int k = 0; k < 10 && st == LOOM_OK; k++) {
    loom_tensor *x, *y;
    st = loom_loader_next(l, &x, &y);
    if (st == LOOM_OK && !x) break;
    loom_tensor_release(x);
    loom_tensor_release(y);
  }
  tk_assert_error(st, LOOM_ERR_FORMAT, "zz_broken.jpg");
  loom_loader_free(l);
  loom_dataset_release(ds);
  /* skip_bad: whole batches, two distinct bad files counted once each, a
   * warning at the end of the epoch. */
  o.skip_bad = true;
  ds = open_opts("bad", &o);
  loom_log_set_sink(capture, NULL);
  l = loom_loader_new(ds, &lo);
  int64_t samples = 0;
  for (int epoch = 0; epoch < 2; epoch++) {
    g_log[0] = 0;
    for (;;) {
      loom_tensor *x, *y;
      cr_assert_eq(loom_loader_next(l, &x, &y), LOOM_OK, "%s", loom_last_error());
      if (!x) break;
      samples += loom_tensor_dim(x, 0);
      loom_tensor_release(x);
      loom_tensor_release(y);
    }
    if (epoch == 0) cr_assert(strstr(g_log, "2 bad files") && strstr(g_log, "zz_"), "epoch-end report: '%s'", g_log);
    else cr_assert_eq(g_log[0], 0, "no new bad file, no report: '%s'", g_log);
  }
  loom_log_set_sink(NULL, NULL);
  cr_assert_eq(samples, 2 * loom_dataset_length(ds));
  int64_t nbad = 0;
  const char *first = NULL;
  cr_assert_eq(loom_image_folder_bad_files(ds, &nbad, &first), LOOM_OK);
  cr_assert_eq(nbad, 2);
  cr_assert(first && strstr(first, "zz_"), "%s", first ? first : "(null)");
  loom_loader_free(l);
  loom_dataset_release(ds);
}
