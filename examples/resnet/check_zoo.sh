#!/bin/sh
# check_zoo.sh LOOM_RESNET — every ImageNet-style ResNet the README lists
# trains on the CPU with synthetic data, under whatever LOOM_CPU_ISA is in
# force (ctest runs this once per instruction set): ResNet-18 and -50 two
# steps at 3x64x64 in both memory formats, ResNet-34, -101 and -152 one step
# at 3x32x32 (small: this checks that every layer shape of each network has a
# kernel path and the step finishes with a finite loss, not speed).
set -eu
bin="$1"
run() {
  model=$1 size=$2 steps=$3 format=$4
  out=$("$bin" --synthetic "$size" --model "$model" --steps "$steps" --warmup 0 --batch 2 --format "$format" \
    --device cpu --quiet 2>&1) || { echo "$out"; echo "zoo: $model $format failed"; exit 1; }
  echo "$out"
  echo "$out" | grep -Eq "^result model=$model .*format=$format .*loss=[0-9]+\.[0-9]+ " ||
    { echo "zoo: $model $format: no result line with a finite loss"; exit 1; }
}
for format in nhwc nchw; do
  run resnet18 3x64x64 2 "$format"
  run resnet50 3x64x64 2 "$format"
done
run resnet34 3x32x32 1 nhwc
run resnet101 3x32x32 1 nchw
run resnet152 3x32x32 1 nhwc
echo "zoo: ok (cpu isa ${LOOM_CPU_ISA:-widest})"
