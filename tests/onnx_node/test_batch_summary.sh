#!/bin/sh
# run_node_test --batch appends its counts to $S4D_NODE_SUMMARY (the GPU check reads them there
# when ctest is stopped by its time limit), and a summary file it cannot write is an error.
# usage: test_batch_summary.sh RUN_NODE_TEST DATA_DIR
set -u
run=$1
data=$2
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
printf 'test_abs\n# a comment\ntest_add\ntest_relu\n' > "$tmp/list.txt"
echo 'node tests on cpu: 0 pass entirely on it, 0 pass with CPU fallback layers, 0 fail' > "$tmp/summary.txt"
S4D_NODE_SUMMARY="$tmp/summary.txt" "$run" --batch "$data" "$tmp/list.txt" > "$tmp/out.txt" 2>&1 || {
  echo "FAIL: the batch run failed"; cat "$tmp/out.txt"; exit 1; }
want='node tests on cpu: 3 pass entirely on it, 0 pass with CPU fallback layers, 0 fail'
# appended after the line already there, and the same as the line on stdout
[ "$(wc -l < "$tmp/summary.txt")" -eq 2 ] && [ "$(tail -n 1 "$tmp/summary.txt")" = "$want" ] || {
  echo "FAIL: summary file:"; cat "$tmp/summary.txt"; exit 1; }
grep -qxF "$want" "$tmp/out.txt" || { echo "FAIL: stdout lacks the counts"; cat "$tmp/out.txt"; exit 1; }
# a failing test is counted in the file as well
printf 'test_abs\ntest_no_such_node_test\n' > "$tmp/list2.txt"
if S4D_NODE_SUMMARY="$tmp/summary2.txt" "$run" --batch "$data" "$tmp/list2.txt" > "$tmp/out2.txt" 2>&1; then
  echo "FAIL: a missing test passed"; cat "$tmp/out2.txt"; exit 1
fi
grep -qxF 'node tests on cpu: 1 pass entirely on it, 0 pass with CPU fallback layers, 1 fail' "$tmp/summary2.txt" || {
  echo "FAIL: summary of the failing run:"; cat "$tmp/summary2.txt" "$tmp/out2.txt"; exit 1; }
# a summary that cannot be written: non-zero exit and a message naming the variable
if S4D_NODE_SUMMARY="$tmp/no/such/dir/summary.txt" "$run" --batch "$data" "$tmp/list.txt" > "$tmp/out3.txt" 2>&1; then
  echo "FAIL: an unwritable summary file was accepted"; cat "$tmp/out3.txt"; exit 1
fi
grep -q 'S4D_NODE_SUMMARY' "$tmp/out3.txt" || { echo "FAIL: no message naming S4D_NODE_SUMMARY"; cat "$tmp/out3.txt"; exit 1; }
echo "PASS: batch summary file"
