#!/usr/bin/env bash
# Writes train_video's data with the ffmpeg program (Debian's ffmpeg, from scripts/setup): short
# H.264 videos of a white square moving left, right, up or down on grey noise that changes every
# frame, as VideoFolders DIR/train/<direction>/<n>.mp4 and DIR/test/<direction>/<n>.mp4.
#   samples/train_video/make_videos.sh DIR [TRAIN_PER_CLASS] [TEST_PER_CLASS]
# (defaults 150 and 50 a class: 800 videos, 25 MB, a few seconds on two cores.)
#
# Every video is 64x64, 24 frames at 25 fps, a keyframe every 12 frames (so a clip may start
# after a seek). The square (10x10) moves 2 pixels a frame along one axis. Both of its coordinates
# have the same distribution in every frame of every class: along the axis it moves on,
# a + 2 n (or a + 2 (23 - n) going back), across it b + 2 k, with a and b uniform in 0..8 and k
# in 0..23, drawn per video. So no single frame tells the direction (a classifier on one frame is
# at chance, 25%); two frames apart in time do.
#
# The noise is the same in every class of a part (ffmpeg's noise filter draws it from its seed,
# 1 for train/, 2 for test/): a seed per class would let a model tell the classes by their noise.
#
# One ffmpeg a folder: a long video whose every 24 frames are one video (the expressions of the
# overlay draw a, b and k from the video's number s = floor(frame / 24) with a hash), cut into files
# by the segment muxer; a process per video would take ten times longer.
set -euo pipefail
out=$1
train=${2:-150}
test=${3:-50}
frames=24
directions=(left right up down)
# The frame number, from the time (the overlay's own n counts from 1 here).
N="round(t*25)"

# floor(m * frac(43758.5453 |sin(12.9898 s + c)|)): a value in 0..m-1 that looks random in s.
hash() { echo "floor($1*mod(43758.5453*abs(sin(12.9898*floor($N/$frames)+$2)),1))"; }

make_folder() {  # part direction count salt noise_seed
  local dir=$out/$1/$2 count=$3 salt=$4 along across x y
  along="$(hash 9 "$salt.1")+2*mod($N,$frames)"
  [[ $2 == left || $2 == up ]] && along="$(hash 9 "$salt.1")+2*($frames-1-mod($N,$frames))"
  across="$(hash 9 "$salt.2")+2*$(hash "$frames" "$salt.3")"
  x=$along y=$across
  [[ $2 == up || $2 == down ]] && x=$across y=$along
  mkdir -p "$dir"
  ffmpeg -hide_banner -loglevel error -nostdin -y -filter_complex \
    "color=c=0x808080:s=64x64:r=25,format=yuv420p,noise=c0s=60:c0f=t:all_seed=$5[bg];
     color=c=white:s=10x10:r=25[fg];[bg][fg]overlay=x='$x':y='$y':eval=frame[v]" \
    -map "[v]" -frames:v $((count * frames)) -c:v libx264 -preset ultrafast -g 12 \
    -x264-params scenecut=0 -threads 1 -f segment -reset_timestamps 1 \
    -segment_frames "$(seq -s, "$frames" "$frames" $(((count - 1) * frames)))" "$dir/%d.mp4"
}

salt=0 pids=()
for part in train test; do
  count=$train noise=1
  [[ $part == test ]] && count=$test noise=2
  for d in "${directions[@]}"; do
    salt=$((salt + 1))
    make_folder "$part" "$d" "$count" "$salt" "$noise" &
    pids+=($!)
  done
done
for pid in "${pids[@]}"; do wait "$pid"; done  # fails when any ffmpeg failed
echo "make_videos: $((4 * (train + test))) videos in $out"
