/* mpi_fault_comm.c — one point of the communicator-creation fault sweep
 * under MPI (issue 24 part 2), run by check_fault_comm.sh under
 * `mpirun -np 2`, once per point in a fresh job: a failed creation leaves
 * collectives pending that no later creation in the same job could be told
 * apart from, so each point gets its own job.
 *
 *   mpi_fault_comm FAULT_RANK N TIMEOUT_S
 *
 * On rank FAULT_RANK the Nth host allocation or file call inside
 * loom_comm_init (MPI back end) fails (core/fault.h; N = 0 fails none and
 * counts the calls: the injection points). Each rank prints one line,
 *   rank R: faulted|peer n=N calls=C hit=0|1 status=S seconds=T msg=M
 * and checks what it can see itself, printing "FAIL:" otherwise:
 *   - a status other than OK carries a message;
 *   - the faulted rank: no fault reached means OK; a fault reached means an
 *     error status (or OK where loom absorbed it);
 *   - the peer: OK, or LOOM_ERR_COMM within TIMEOUT_S + 5 s (it waits for a
 *     rank that left the creation's collectives: no hang);
 *   - no leak: after the communicator (if any) is freed, LeakSanitizer's
 *     check (in sanitizer builds) finds nothing. MPI's own allocations are
 *     not loom's: the program initializes MPI itself with LeakSanitizer
 *     off (OpenMPI leaks strings in components it unloads, which no
 *     suppression can name), and check_fault_comm.sh suppresses the rest
 *     by library. loom_comm_init then finds MPI initialized, as in a
 *     program that uses MPI itself.
 * The job's end is bounded by the script. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "core/fault.h"
#include "loom/loom.h"

/* LeakSanitizer's interface; absent (NULL) without a sanitizer. */
extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));
extern void __lsan_disable(void) __attribute__((weak));
extern void __lsan_enable(void) __attribute__((weak));

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: mpi_fault_comm FAULT_RANK N TIMEOUT_S (under mpirun -np 2)\n");
    return 2;
  }
  int fault_rank = atoi(argv[1]);
  long n = atol(argv[2]);
  double timeout = atof(argv[3]);
  if (!loom_fault_compiled()) {
    printf("SKIP: fault injection not compiled in (configure with -DLOOM_FAULT_INJECTION=ON)\n");
    return 0;
  }
  if (__lsan_disable) __lsan_disable();
  int provided = 0;
  int mpi_rc = MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (__lsan_enable) __lsan_enable();
  if (mpi_rc != MPI_SUCCESS) {
    printf("FAIL: MPI_Init_thread failed\n");
    return 1;
  }
  loom_dist_env env = {.struct_size = sizeof env};
  if (loom_dist_env_get(&env) != LOOM_OK || env.world_size != 2) {
    printf("FAIL: run under mpirun -np 2 (world size %d: %s)\n", env.world_size, loom_last_error());
    return 1;
  }
  int rank = env.rank;
  bool faulted = rank == fault_rank;
  loom_comm_options o;
  loom_comm_options_init(&o);
  o.backend = LOOM_COMM_MPI;
  o.timeout_s = timeout;
  loom_comm *c = NULL;

  if (faulted) loom_fault_arm(LOOM_FAULT_HOST | LOOM_FAULT_FILE, n > 0 ? n : LONG_MAX, false);
  loom_clear_error();
  double t0 = now();
  loom_status st = loom_comm_init(&o, &c);
  double took = now() - t0;
  long calls = faulted ? loom_fault_calls() : 0, hits = faulted ? loom_fault_hits() : 0;
  if (faulted) loom_fault_clear();
  char msg[512];
  snprintf(msg, sizeof msg, "%s", st == LOOM_OK ? "" : loom_last_error());

  printf("rank %d: %s n=%ld calls=%ld hit=%d status=%s seconds=%.2f msg=%s\n", rank, faulted ? "faulted" : "peer", n,
         calls, hits > 0, loom_status_name(st), took, msg);
  int bad = 0;
#define EXPECT(cond, ...)                 \
  do {                                    \
    if (!(cond)) {                        \
      printf("rank %d: FAIL: ", rank);    \
      printf(__VA_ARGS__);                \
      printf("\n");                       \
      bad = 1;                            \
    }                                     \
  } while (0)
  EXPECT(st == LOOM_OK || msg[0], "status %s with no message", loom_status_name(st));
  EXPECT(st == LOOM_OK || c == NULL, "a failed creation handed out a communicator");
  if (faulted)
    EXPECT(hits > 0 || st == LOOM_OK, "no fault was reached, but creation failed: %s", msg);
  else
    EXPECT(st == LOOM_OK || (st == LOOM_ERR_COMM && took <= timeout + 5.0),
           "the peer's creation ended with %s after %.2f s (timeout %g s): want OK or LOOM_ERR_COMM within the timeout",
           loom_status_name(st), took, timeout);
  if (st == LOOM_OK) {
    EXPECT(loom_comm_size(c) == 2 && loom_comm_rank(c) == rank, "rank %d of %d", loom_comm_rank(c), loom_comm_size(c));
    loom_comm_free(c);
  }
  if (__lsan_do_recoverable_leak_check) EXPECT(__lsan_do_recoverable_leak_check() == 0, "LeakSanitizer found a leak");
  fflush(stdout);
  /* MPI is finalized only where nothing was left pending (no communicator
   * was abandoned); otherwise the process exits and the launcher ends the
   * job. */
  bool abandoned = st == LOOM_ERR_COMM;  /* a timed-out collective is still pending */
  if (!abandoned) MPI_Finalize();
  return bad;
}
