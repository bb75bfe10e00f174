/* test_log.c — level parsing, LOOM_LOG at first use, level filtering, the
 * sink and the stderr format. Criterion runs each test in its own process,
 * so each one sees a fresh logger (LOOM_LOG is read once per process). */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdlib.h>
#include <string.h>

#include "loom/log.h"
#include "loom/status.h"

Test(log, parse_level_accepts_and_rejects) {
  static const struct {
    const char *name;
    loom_log_level level;
  } ok[] = {{"off", LOOM_LOG_OFF},     {"error", LOOM_LOG_ERROR}, {"warn", LOOM_LOG_WARN},
            {"info", LOOM_LOG_INFO},   {"debug", LOOM_LOG_DEBUG}, {"trace", LOOM_LOG_TRACE},
            {"DEBUG", LOOM_LOG_DEBUG}, {"Warn", LOOM_LOG_WARN}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    loom_log_level lv = (loom_log_level)-1;
    cr_assert_eq(loom_log_parse_level(ok[i].name, &lv), LOOM_OK, "%s", ok[i].name);
    cr_assert_eq(lv, ok[i].level, "%s", ok[i].name);
  }
  const char *bad[] = {"", "warning", "verbose", "3", "debug ", "errors", "inf"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    loom_log_level lv = LOOM_LOG_INFO;
    loom_clear_error();
    cr_assert_eq(loom_log_parse_level(bad[i], &lv), LOOM_ERR_INVALID_ARG, "\"%s\" accepted", bad[i]);
    cr_assert_eq(lv, LOOM_LOG_INFO, "output written for a rejected name");
    cr_assert(strstr(loom_last_error(), "accepted") != NULL, "message: %s", loom_last_error());
  }
  loom_log_level lv;
  cr_assert_eq(loom_log_parse_level(NULL, &lv), LOOM_ERR_INVALID_ARG);
  cr_assert_eq(loom_log_parse_level("info", NULL), LOOM_ERR_INVALID_ARG);
}

Test(log, default_level_is_warn) {
  unsetenv("LOOM_LOG");
  cr_assert_eq(loom_log_get_level(), LOOM_LOG_WARN);
}

Test(log, env_sets_level_at_first_use) {
  setenv("LOOM_LOG", "debug", 1);
  cr_assert_eq(loom_log_get_level(), LOOM_LOG_DEBUG);
  /* Read once: later changes to the environment do not matter. */
  setenv("LOOM_LOG", "error", 1);
  cr_assert_eq(loom_log_get_level(), LOOM_LOG_DEBUG);
}

Test(log, explicit_level_wins_over_env) {
  setenv("LOOM_LOG", "trace", 1);
  loom_log_set_level(LOOM_LOG_ERROR); /* before any other logging call */
  cr_assert_eq(loom_log_get_level(), LOOM_LOG_ERROR);
}

static void redirect_stderr(void) { cr_redirect_stderr(); }

Test(log, bad_env_value_warns_once_and_keeps_warn, .init = redirect_stderr) {
  setenv("LOOM_LOG", "loud", 1);
  cr_assert_eq(loom_log_get_level(), LOOM_LOG_WARN);
  cr_assert_eq(loom_log_get_level(), LOOM_LOG_WARN);
  loom_log_msg(LOOM_LOG_INFO, "not shown");
  fflush(stderr);
  cr_assert_stderr_eq_str(
      "[loom W] LOOM_LOG=\"loud\" is not a log level (accepted: error, warn, info, debug, trace, off); using warn\n");
}

Test(log, stderr_format_and_filtering, .init = redirect_stderr) {
  unsetenv("LOOM_LOG");
  loom_log_set_level(LOOM_LOG_INFO);
  loom_log_msg(LOOM_LOG_ERROR, "disk %s", "full");
  loom_log_msg(LOOM_LOG_WARN, "scale %d", 1024);
  loom_log_msg(LOOM_LOG_INFO, "step done\n"); /* a trailing newline is not doubled */
  loom_log_msg(LOOM_LOG_DEBUG, "hidden");
  loom_log_msg(LOOM_LOG_TRACE, "hidden");
  loom_log_msg(LOOM_LOG_OFF, "never a message level");
  fflush(stderr);
  cr_assert_stderr_eq_str("[loom E] disk full\n[loom W] scale 1024\n[loom I] step done\n");
}

#define MAX_MSGS 16
struct capture {
  int n;
  loom_log_level levels[MAX_MSGS];
  char msgs[MAX_MSGS][700];
};

static void capture_sink(loom_log_level level, const char *msg, void *user) {
  struct capture *c = user;
  if (c->n < MAX_MSGS) {
    c->levels[c->n] = level;
    snprintf(c->msgs[c->n], sizeof c->msgs[0], "%s", msg);
  }
  c->n++;
}

Test(log, sink_receives_at_and_above_level_only, .init = redirect_stderr) {
  unsetenv("LOOM_LOG");
  struct capture cap = {0};
  loom_log_set_sink(capture_sink, &cap);
  loom_log_set_level(LOOM_LOG_WARN);
  loom_log_msg(LOOM_LOG_ERROR, "e%d", 1);
  loom_log_msg(LOOM_LOG_WARN, "w%d", 2);
  loom_log_msg(LOOM_LOG_INFO, "i%d", 3);
  loom_log_msg(LOOM_LOG_DEBUG, "d%d", 4);
  loom_log_msg(LOOM_LOG_TRACE, "t%d", 5);
  cr_assert_eq(cap.n, 2);
  cr_assert_eq(cap.levels[0], LOOM_LOG_ERROR);
  cr_assert_str_eq(cap.msgs[0], "e1");
  cr_assert_eq(cap.levels[1], LOOM_LOG_WARN);
  cr_assert_str_eq(cap.msgs[1], "w2");

  loom_log_set_level(LOOM_LOG_TRACE);
  loom_log_msg(LOOM_LOG_TRACE, "t%d", 6);
  cr_assert_eq(cap.n, 3);
  cr_assert_eq(cap.levels[2], LOOM_LOG_TRACE);

  loom_log_set_level(LOOM_LOG_OFF);
  loom_log_msg(LOOM_LOG_ERROR, "off means off");
  cr_assert_eq(cap.n, 3);

  /* An invalid level is refused and the old one kept. */
  loom_log_set_level(LOOM_LOG_INFO);
  loom_log_set_level((loom_log_level)42);
  cr_assert_eq(loom_log_get_level(), LOOM_LOG_INFO);
  cr_assert_eq(loom_last_status(), LOOM_ERR_INVALID_ARG);

  /* Long messages arrive whole (beyond any fixed stack buffer). */
  char big[600];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  loom_log_msg(LOOM_LOG_ERROR, "%s!", big);
  cr_assert_eq(cap.n, 4);
  cr_assert_eq(strlen(cap.msgs[3]), sizeof big);
  cr_assert_eq(cap.msgs[3][sizeof big - 1], '!');

  /* NULL restores stderr: the sink is no longer called. */
  loom_log_set_sink(NULL, NULL);
  loom_log_msg(LOOM_LOG_ERROR, "to stderr");
  cr_assert_eq(cap.n, 4);
  fflush(stderr);
  cr_assert_stderr_eq_str("[loom E] to stderr\n");
}

static int reentrant_calls;
static void reentrant_sink(loom_log_level level, const char *msg, void *user) {
  reentrant_calls++;
  /* Logging from inside a sink must not deadlock (it goes to stderr). */
  loom_log_msg(LOOM_LOG_ERROR, "inner");
}

Test(log, sink_that_logs_does_not_deadlock, .timeout = 10, .init = redirect_stderr) {
  loom_log_set_sink(reentrant_sink, NULL);
  loom_log_msg(LOOM_LOG_ERROR, "outer");
  cr_assert_eq(reentrant_calls, 1);
  fflush(stderr);
  cr_assert_stderr_eq_str("[loom E] inner\n");
}
