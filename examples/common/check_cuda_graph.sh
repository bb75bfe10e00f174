#!/bin/sh
# check_cuda_graph.sh TRAINER FLAGS... — a trainer's --cuda-graph end to end.
# FLAGS: the trainer's data/size flags, --device among them.
#
# --device cpu (CI): the training step (fp32, and fp16 with the dynamic loss
# scaler) is captured once to check that it is capture-safe, the loader
# writes every batch into the static input buffers, the optimizer follows
# the attached LR schedule, and the run must end byte-identical
# (checkpoint: parameters, optimizer state, scaler, loader position, step)
# to the same run without the flag.
#
# --device cuda (the GPU suite): the step is captured once and replayed.
# The run is not required to be byte-identical to the eager one (kernels
# that reduce with atomics may sum in another order); it must train like
# the eager run instead: for fp32 and fp16, the graph run's last epoch mean
# train loss is below 0.75 x its first logged loss (the first GPU run's
# broken replays stayed at ~2.3 = ln 10 from first to last), its test
# accuracy is within $ACC_MARGIN (default 0.02 absolute) of the eager run's, and its
# last epoch loss within 0.1 + 10% of the eager one. tests/test_graph.c's
# graph_cuda suite checks bit-equality of replays on a small MLP.
set -eu
bin="$1"
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gpu=0
case " $* " in *" --device cuda"*) gpu=1 ;; esac

if [ "$gpu" = 0 ]; then
  for prec in fp32 fp16; do
    "$bin" "$@" --precision $prec --quiet --save "$tmp/eager-$prec"
    "$bin" "$@" --precision $prec --cuda-graph --save "$tmp/graph-$prec" > "$tmp/graph-$prec.log"
    grep -q "step 3 was captured to check it is capture-safe" "$tmp/graph-$prec.log"
    cmp "$tmp/eager-$prec/checkpoint.safetensors" "$tmp/graph-$prec/checkpoint.safetensors"
  done
  echo "cuda graph: identical checkpoints"
  exit 0
fi

ACC_MARGIN=${ACC_MARGIN:-0.02}
acc_of() { sed -n 's/^result test_accuracy=\([0-9.]*\).*/\1/p' "$1" | tail -n 1; }
last_loss_of() { sed -n 's/^epoch [0-9]*\/[0-9]*: train loss \([0-9.]*\),.*/\1/p' "$1" | tail -n 1; }
first_loss_of() { sed -n 's/^epoch [0-9]*\/[0-9]* step [0-9]*\/[0-9]* loss \([0-9.]*\) .*/\1/p' "$1" | head -n 1; }
fail=0
for prec in fp32 fp16; do
  "$bin" "$@" --precision $prec > "$tmp/eager-$prec.log"
  "$bin" "$@" --precision $prec --cuda-graph > "$tmp/graph-$prec.log"
  if ! grep -q "cuda graph: step [0-9]* captured" "$tmp/graph-$prec.log"; then
    echo "cuda graph: $prec: the run did not replay a captured step:"
    cat "$tmp/graph-$prec.log"
    fail=1
    continue
  fi
  ea=$(acc_of "$tmp/eager-$prec.log") ga=$(acc_of "$tmp/graph-$prec.log")
  el=$(last_loss_of "$tmp/eager-$prec.log") gl=$(last_loss_of "$tmp/graph-$prec.log")
  gf=$(first_loss_of "$tmp/graph-$prec.log")
  if [ -z "$ea" ] || [ -z "$ga" ] || [ -z "$el" ] || [ -z "$gl" ] || [ -z "$gf" ]; then
    echo "cuda graph: $prec: missing result, epoch or progress lines (eager: '$ea' '$el', graph: '$ga' '$gl' '$gf')"
    fail=1
    continue
  fi
  verdict=$(awk -v ea="$ea" -v ga="$ga" -v el="$el" -v gl="$gl" -v gf="$gf" -v m="$ACC_MARGIN" 'BEGIN {
    why = "";
    if (!(gl < 0.75 * gf)) why = why sprintf(" loss did not fall (first logged %g, last epoch %g);", gf, gl);
    d = ga - ea; if (d < 0) d = -d;
    if (d > m) why = why sprintf(" test accuracy %g vs eager %g (margin %g);", ga, ea, m);
    dl = gl - el; if (dl < 0) dl = -dl;
    if (dl > 0.1 + 0.1 * el) why = why sprintf(" last epoch loss %g vs eager %g;", gl, el);
    print why == "" ? "ok" : why }')
  echo "cuda graph: $prec: eager accuracy $ea loss $el; graph accuracy $ga loss $gl (first logged $gf): $verdict"
  [ "$verdict" = ok ] || fail=1
done
[ "$fail" = 0 ] || { echo "cuda graph: replays do not train like eager steps"; exit 1; }
echo "cuda graph: replays train like eager steps"
