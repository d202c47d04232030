#!/usr/bin/env bash
# Work longer than one GPU-machine command may run (a whole `bench llm` on a fresh machine):
# the work runs detached from the command that started it, in its own copy of the tree, and
# later commands on the same (still warm) machine wait for it and collect its files.
#
#   scripts/gpu-detach.sh start NAME 'COMMAND'   copies the tree to /tmp/detached/NAME/tree,
#                                                runs COMMAND there under setsid (after
#                                                sourcing scripts/gpu-env.sh), returns at once
#   scripts/gpu-detach.sh wait NAME SECONDS [FILE...]
#                                                waits until COMMAND ends or SECONDS pass,
#                                                prints the log's tail, and copies the log,
#                                                the exit status (once there) and each FILE
#                                                (relative to the copy) to $OUT
#
# The copy keeps the running programs and their inputs apart from the tree the next
# command's transfer rewrites.
set -uo pipefail
cd "$(dirname "$0")/.."
verb=${1:-}
name=${2:-}
if [ -z "$verb" ] || [ -z "$name" ]; then
  echo "usage: $0 start NAME 'COMMAND' | wait NAME SECONDS [FILE...]" >&2
  exit 2
fi
dir=/tmp/detached/$name
case "$verb" in
  start)
    cmd=${3:?"start needs the COMMAND to run"}
    if [ -e "$dir" ]; then echo "$dir exists: $name was started before" >&2; exit 2; fi
    mkdir -p "$dir/tree"
    tar --exclude=./target -cf - . | tar -xf - -C "$dir/tree"
    printf '%s\n' "$cmd" >"$dir/command"
    (cd "$dir/tree" && setsid bash -c ". scripts/gpu-env.sh; ( $cmd ); echo \$? >'$dir/rc'" \
      >"$dir/log" 2>&1 </dev/null &)
    echo "started $name in $dir ($(date +%T)): $cmd"
    ;;
  wait)
    secs=${3:?"wait needs SECONDS"}
    shift 3
    if [ ! -d "$dir" ]; then echo "$name was never started on this machine ($dir is missing)" >&2; exit 2; fi
    end=$((SECONDS + secs))
    while [ ! -e "$dir/rc" ] && [ $SECONDS -lt $end ]; do sleep 2; done
    tail -n 40 "$dir/log"
    if [ -e "$dir/rc" ]; then echo "== $name ended with status $(cat "$dir/rc")"; else echo "== $name still running ($(date +%T))"; fi
    if [ -n "${OUT:-}" ]; then
      cp "$dir/log" "$OUT/$name.log"
      [ -e "$dir/rc" ] && cp "$dir/rc" "$OUT/$name.rc"
      for f in "$@"; do [ -e "$dir/tree/$f" ] && cp "$dir/tree/$f" "$OUT/"; done
    fi
    ;;
  *)
    echo "unknown verb $verb: start or wait" >&2
    exit 2
    ;;
esac
