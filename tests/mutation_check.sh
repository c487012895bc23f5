#!/usr/bin/env bash
# Mutation check: break one kernel weight, one window offset, one fuse rule and one journal write in turn,
# run the tests that should catch each, and put the file back. Every line should say "caught".
cd "$(dirname "$0")/.."
set -u
run() {  # name file python-replace-old python-replace-new tests...
  local name=$1 file=$2 old=$3 new=$4; shift 4
  backup=$(mktemp)
  cp "$file" "$backup"
  python3 - "$file" "$old" "$new" <<'PY'
import sys
p, old, new = sys.argv[1:4]
s = open(p).read()
assert old in s, f"mutation target not found in {p}: {old!r}"
open(p, "w").write(s.replace(old, new, 1))
PY
  if timeout 900 .venv/bin/python -m pytest -q -x -p no:cacheprovider "$@" > /tmp/mut.log 2>&1; then
    echo "MUTANT SURVIVED: $name ($*)"
  else
    echo "caught: $name by $(grep -m1 -oE '^FAILED [^ ]+' /tmp/mut.log)"
  fi
  cp "$backup" "$file"
  rm -f "$backup"
}
run "kernel weight (tent)" pipeline/resample/common.py "return xp.maximum(0.0, 1.0 - xp.abs(t))" "return xp.maximum(0.0, 1.0 - 0.9 * xp.abs(t))" tests/test_kernels.py
run "window offset (read one column right)" pipeline/inputs/read.py "window=Window(c0, r0, w, h)" "window=Window(c0 + 1, r0, w, h)" tests/test_end_to_end.py
run "fuse rule (first takes later tiles)" pipeline/resample/fuse.py "take = ok & ~filled" "take = ok" tests/test_fuse.py tests/test_end_to_end.py
run "journal write (wrong key)" pipeline/store/write.py 'write_bytes(output_store(path, storage), f"{JOURNAL_DIR}/{key}", b"")' 'write_bytes(output_store(path, storage), f"{JOURNAL_DIR}/{key}-", b"")' tests/test_resume.py
run "planner drops thin pairs" pipeline/planning/windows.py "keep = (win[:, 2] > win[:, 0]) & (win[:, 3] > win[:, 1])" "keep = (win[:, 2] > win[:, 0] + 6) & (win[:, 3] > win[:, 1] + 6)" tests/test_plan.py
