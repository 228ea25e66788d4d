#!/usr/bin/env bash
# make_digits.sh: the spoken digits samples/train_audio trains on, spoken by espeak-ng (Debian's
# espeak-ng package; scripts/setup installs it) and cut and converted by sox to 44.1 kHz FLAC.
#
#   samples/train_audio/make_digits.sh OUT
#
# Writes two AudioFolder layouts, OUT/train/<digit>/<voice>-<take>.flac and OUT/test/..., classes
# "0".."9" (the words "zero".."nine"). A voice is one of espeak-ng's variants (m1..m8, f1..f5:
# timbre and pitch range) with one of six accents. The split is by variant: the test set's
# variants are never heard in training, in any accent.
#   train: m1 m2 m3 m4 m5 f1 f2 f3, 6 accents, 2 takes: 96 takes x 10 digits = 960 clips
#   test:  m6 m7 f4 f5,             6 accents, 1 take:  24 takes x 10 digits = 240 clips
# A take is one espeak-ng run that says the ten words with pauses between them at one speed
# (130..210 words per minute) and pitch (25..75), both from the take's position in the lists,
# so every run writes the same files; sox splits it at the pauses (leading and trailing silence
# trimmed) and writes each word as 44.1 kHz FLAC (espeak-ng speaks at 22.05 kHz, so the loader
# has a resample to do). A take that does not split into exactly ten words is an error.
# 120 takes on every core: 20 to 50 s on two cores shared with other jobs (load 8 to 18).
# A finished folder (OUT/.done) is kept.
set -euo pipefail
out="${1:?usage: make_digits.sh OUT}"
if [[ -f "$out/.done" ]]; then
  echo "make_digits: $out is made"
  exit 0
fi
for tool in espeak-ng sox; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "make_digits: $tool is missing (apt-get install espeak-ng sox, or scripts/setup)" >&2
    exit 1
  fi
done

accents=(en-gb en-us en-gb-scotland en-gb-x-rp en-029 en-us-nyc)
speeds=(130 150 170 190 210)
pitches=(25 37 50 62 75)

rm -rf "$out"
mkdir -p "$out"
for split in train test; do
  for digit in 0 1 2 3 4 5 6 7 8 9; do mkdir -p "$out/$split/$digit"; done
done
jobs="$out/.takes"
: >"$jobs"
n=0
add_takes() {  # split takes variants...
  local split=$1 takes=$2 variant accent take speed pitch
  shift 2
  for variant in "$@"; do
    for accent in "${accents[@]}"; do
      for ((take = 0; take < takes; take++)); do
        # Speed n mod 5 and pitch floor(3n / 5) mod 5: every pair once in each 25 takes.
        speed=${speeds[$((n % 5))]} pitch=${pitches[$((n * 3 / 5 % 5))]}
        echo "$accent+$variant $speed $pitch $out/$split $accent-$variant-$take" >>"$jobs"
        n=$((n + 1))
      done
    done
  done
}
add_takes train 2 m1 m2 m3 m4 m5 f1 f2 f3
add_takes test 1 m6 m7 f4 f5

# One line a take: voice, speed, pitch, split folder, file name. The pauses are SSML breaks of
# 0.8 s; sox's silence effect starts a new file after 0.4 s under 0.1% of full scale. The
# volume is lowered a little (-v 0.9) so that the resampler does not clip; -R seeds sox's
# dither with a fixed number, so that the files are the same bytes on every run.
take() {
  local voice=$1 speed=$2 pitch=$3 dir=$4 name=$5 words="" word digit
  local tmp
  tmp="$(mktemp -d "$dir/.take.XXXXXX")"
  for word in zero one two three four five six seven eight nine; do
    words+="$word<break time=\"800ms\"/>"
  done
  espeak-ng -v "$voice" -s "$speed" -p "$pitch" -m --stdout "<speak>$words</speak>" |
    sox -R -q -v 0.9 -t wav - -r 44100 "$tmp/w.flac" silence 1 0.01 0.1% 1 0.4 0.1% : newfile : restart
  # The pause after "nine" leaves an empty last file: a FLAC header of about 100 bytes, where a
  # word is several kB.
  find "$tmp" -name 'w*.flac' -size -1000c -delete
  local parts=("$tmp"/w*.flac)
  if ((${#parts[@]} != 10)); then
    echo "make_digits: $voice at $speed wpm, pitch $pitch split into ${#parts[@]} words, not 10" >&2
    exit 1
  fi
  for digit in 0 1 2 3 4 5 6 7 8 9; do
    mv "${parts[$digit]}" "$dir/$digit/$name.flac"
  done
  rm -r "$tmp"
}
export -f take
xargs -P "$(nproc)" -L 1 bash -c 'take "$@"' _ <"$jobs"
rm "$jobs"
touch "$out/.done"
train=$(find "$out/train" -name '*.flac' | wc -l)
test=$(find "$out/test" -name '*.flac' | wc -l)
echo "make_digits: $train training and $test test clips in $out"
