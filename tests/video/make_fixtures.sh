#!/usr/bin/env bash
# Writes the video tests' fixtures into the folder $1 with the ffmpeg program (Debian's ffmpeg):
# tiny videos (64x48, 25 fps) whose frame n shows n in binary, as 8 vertical bars 8 pixels wide,
# bar b white (luma 235) when bit b of n is set, else black (luma 16), so that a test reads which
# frame it got from any decoded frame, lossless or lossy, at any size.
#   ffv1.mkv    FFV1 (lossless, intra only), 30 frames
#   bf.mp4      H.264, B-frames (-bf 2), a keyframe every 12 frames, lossy, 40 frames
#   long.mp4    H.264 lossless (-qp 0), long GOP (-g 50), B-frames (-bf 3), 90 frames
#   long.mkv    long.mp4's packets in Matroska (-c copy)
#   vfr.mkv     H.264, B-frames, variable frame rate (irregular gaps between timestamps), 36 frames
#   vp9.webm    VP9, a keyframe every 10 frames, 24 frames
#   mpeg4.avi   MPEG-4 part 2 in AVI, a keyframe every 8 frames, 20 frames
#   trim.mp4    bf.mp4 from 0.5 s on, stream copied: an edit list, its first keyframe discarded
#   fast.mp4    H.264 with the index (moov) before the data (+faststart), 40 frames
#   audio.mkv   a sine tone and no video stream
#   opengopcut.mkv  an open GOP H.264 (60 frames, a keyframe every 20) cut at 1 s by a stream
#               copy: leading B-frames without timestamps; its first keyframe shows frame 20
#   pcut.avi    MPEG-4 with B-frames (60 frames) cut at 0.5 s with -copyinkf: it starts on
#               non-keyframes; its first keyframe shows frame 24
set -euo pipefail
out=$1
mkdir -p "$out"
bars="format=yuv420p,geq=lum='if(bitand(N\,pow(2\,floor(X/8)))\,235\,16)':cb=128:cr=128"
src() { echo "nullsrc=s=64x48:r=25,$bars"; }
ff() { ffmpeg -hide_banner -loglevel error -nostdin -y "$@"; }
ff -f lavfi -i "$(src)" -frames:v 30 -c:v ffv1 -g 1 "$out/ffv1.mkv"
ff -f lavfi -i "$(src)" -frames:v 40 -c:v libx264 -preset ultrafast -bf 2 -g 12 \
   -x264-params b-adapt=0:scenecut=0 "$out/bf.mp4"
ff -f lavfi -i "$(src)" -frames:v 90 -c:v libx264 -preset veryfast -qp 0 -bf 3 -g 50 \
   -x264-params b-adapt=0:scenecut=0 "$out/long.mp4"
ff -i "$out/long.mp4" -c copy "$out/long.mkv"
ff -f lavfi -i "$(src),setpts='(N+floor(N/3)*2+floor(N/7))/(25*TB)'" -frames:v 36 \
   -fps_mode passthrough -c:v libx264 -preset ultrafast -bf 2 -g 9 \
   -x264-params b-adapt=0:scenecut=0 "$out/vfr.mkv"
ff -f lavfi -i "$(src)" -frames:v 24 -c:v libvpx-vp9 -deadline realtime -cpu-used 8 -g 10 \
   -b:v 400k "$out/vp9.webm"
ff -f lavfi -i "$(src)" -frames:v 20 -c:v mpeg4 -q:v 2 -g 8 "$out/mpeg4.avi"
ff -f lavfi -i "$(src)" -frames:v 40 -c:v libx264 -preset ultrafast -bf 2 -g 12 \
   -movflags +faststart "$out/fast.mp4"
ff -ss 0.5 -i "$out/bf.mp4" -c copy "$out/trim.mp4"
ff -f lavfi -i "sine=frequency=440:duration=0.5" -c:a pcm_s16le "$out/audio.mkv"
ff -f lavfi -i "$(src)" -frames:v 60 -c:v libx264 -preset veryfast -qp 10 -bf 3 \
   -x264-params keyint=20:min-keyint=20:open-gop=1:scenecut=0:b-adapt=0 "$out/opengop.tmp.mkv"
ff -ss 1.0 -i "$out/opengop.tmp.mkv" -c copy "$out/opengopcut.mkv"
ff -f lavfi -i "$(src)" -frames:v 60 -c:v mpeg4 -bf 2 -g 12 -q:v 2 "$out/mpeg4b.tmp.avi"
ff -i "$out/mpeg4b.tmp.avi" -ss 0.5 -copyinkf -c copy "$out/pcut.avi"
rm "$out/opengop.tmp.mkv" "$out/mpeg4b.tmp.avi"
