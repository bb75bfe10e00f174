# torch_best.sh — sourced by the bench scripts that time PyTorch on the CPU:
# run an anchor under both of libgomp's wait policies and keep the faster.
#
#   torch_best FIELD COMMAND...   one result: the faster run's (see below)
#   torch_both COMMAND...         both runs' lines, each tagged with its policy,
#                                 for runners that keep the best per op themselves
#
# Why: Debian's torch runs Linear/matmul through OpenBLAS, whose own
# pthreads then compete with ATen's OpenMP workers, which spin (libgomp's
# default, OMP_WAIT_POLICY=active) between parallel regions. With 2 threads
# on 2 cores that halves the MNIST MLP step and the GPT twin (measured on a
# Zen 3: MLP 15.7 vs 46.5 steps/s), while the conv-heavy ResNet step runs
# faster with the default. A user tuning PyTorch would pick per workload, so
# the anchor is the better of the two — never a handicapped PyTorch.
# OMP_WAIT_POLICY must be set before libgomp starts, hence two processes.
#
# Prints the winning run's stdout with " omp_wait_policy=P" appended to every
# line holding FIELD=, and a "# torch_best ..." line with both figures on
# stderr (the callers keep only the result lines of stdout). A
# larger FIELD is better (throughput). If one run reports no FIELD, the other
# wins; if neither does, the active run's output is printed as is.
torch_best() {
  local field="$1" a p va vp
  shift
  a=$(OMP_WAIT_POLICY=active "$@") || true
  p=$(OMP_WAIT_POLICY=passive "$@") || true
  va=$(printf '%s\n' "$a" | sed -n "s/.*[ ]$field=\([0-9.]*\).*/\1/p" | tail -1)
  vp=$(printf '%s\n' "$p" | sed -n "s/.*[ ]$field=\([0-9.]*\).*/\1/p" | tail -1)
  echo "# torch_best $field: active=${va:-none} passive=${vp:-none}" >&2
  if [ -n "$vp" ] && { [ -z "$va" ] || awk -v a="$va" -v p="$vp" 'BEGIN{exit !(p > a)}'; }; then
    printf '%s\n' "$p" | sed "/[ ]$field=/s/\$/ omp_wait_policy=passive/"
  elif [ -n "$va" ]; then
    printf '%s\n' "$a" | sed "/[ ]$field=/s/\$/ omp_wait_policy=active/"
  else
    printf '%s\n' "$a"
  fi
}

torch_both() {
  local w
  for w in active passive; do
    OMP_WAIT_POLICY=$w "$@" | sed "s/\$/ omp_wait_policy=$w/"
  done
}
