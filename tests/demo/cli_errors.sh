#!/usr/bin/env bash
# s4d_demo refuses bad arguments and bad files with exit status 2 and one
# clear line on stderr. Usage: cli_errors.sh <s4d_demo> <scratch dir>
set -u
demo=$1
tmp=$2
rm -rf "$tmp" && mkdir -p "$tmp/frames/frame_000"
fails=0

expect() { # expect <status> <stderr text> -- args...
  local want=$1 text=$2; shift 3
  "$demo" "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -ne "$want" ] || ! grep -qF -- "$text" "$tmp/err"; then
    echo "FAIL: s4d_demo $*: exit $got (want $want), stderr: $(cat "$tmp/err")"
    fails=$((fails + 1))
  else
    echo "ok: $* -> $(head -n 1 "$tmp/err")"
  fi
}

echo "frame_000 1 0.0" >"$tmp/frames/frames.txt"
printf 'not an engine file' >"$tmp/bogus.s4d"
expect 2 "--backbone, --head and --frames are required" --
expect 2 "unknown argument '--bogus'" -- --bogus
expect 2 "bad value in '--topk=abc'" -- --topk=abc
expect 2 "bad value in '--rel-l2=nan'" -- --rel-l2=nan
expect 2 "bad value in '--min-matched=1.5'" -- --fp16 --min-matched=1.5
expect 2 "bad value in '--match-metres=0'" -- --fp16 --match-metres=0
expect 2 "--topk must be at least 1" -- --topk=0 --backbone=x --head=y --frames=z
expect 2 "cannot open '$tmp/missing/frames.txt'" -- --backbone=x --head=y --frames="$tmp/missing"
expect 2 "loading the backbone engine '$tmp/bogus.s4d'" -- \
  --backbone="$tmp/bogus.s4d" --head="$tmp/bogus.s4d" --frames="$tmp/frames"
expect 2 "loading plugins '$tmp/none.so'" -- --plugins="$tmp/none.so" \
  --backbone="$tmp/bogus.s4d" --head="$tmp/bogus.s4d" --frames="$tmp/frames"
echo "frame_000 yes" >"$tmp/frames/frames.txt"
expect 2 "frames.txt:1: expected '<subdirectory> <0|1> [timestamp]'" -- \
  --backbone=x --head=y --frames="$tmp/frames"
echo "../etc 0" >"$tmp/frames/frames.txt"
expect 2 "frames.txt:1: expected" -- --backbone=x --head=y --frames="$tmp/frames"
printf 'frame"000 1\n' >"$tmp/frames/frames.txt"
expect 2 "frames.txt:1: expected" -- --backbone=x --head=y --frames="$tmp/frames"
echo "# nothing" >"$tmp/frames/frames.txt"
expect 2 "frames.txt lists no frames" -- --backbone=x --head=y --frames="$tmp/frames"
"$demo" --help | grep -q "usage: s4d_demo" || { echo "FAIL: --help"; fails=$((fails + 1)); }

[ "$fails" -eq 0 ] && echo "all CLI cases passed" || echo "$fails case(s) failed"
exit $((fails > 0))
